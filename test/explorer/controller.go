package explorer

import (
	"fmt"
	"strings"

	"github.com/kubefence/kubefence/controllers/fencedlease"
)

// ctrlDue tells whether the controller has something to look at (the lease
// changed since it last reconciled, or its requeue came) and since when.
func (m *model) ctrlDue(s *state) (bool, int) {
	c := &s.ctrl
	if !c.up || s.lease == nil {
		return false, 0
	}
	due, since := false, 0
	if s.lease.rev != c.done {
		due, since = true, s.lease.at
	}
	if c.requeue >= 0 && s.t >= c.requeue && (!due || c.requeue < since) {
		due, since = true, c.requeue
	}
	return due, since
}

// reconcile is one pass of the controller's loop (fencedlease.Decide, the
// write it produces, what it remembers), on the lease as the API server has
// it: the write is sent with its resourceVersion.
func (m *model) reconcile(s *state) (*state, string) {
	n := s.clone()
	lease := n.lease.obj
	now := n.now(m.cfg, pController)
	step, err := fencedlease.Decide(lease, n.ctrl.mem, 0, now, m.cfg.Timing)
	if err != nil {
		n.ctrl.done, n.ctrl.requeue = n.lease.rev, n.t+1
		return n, fmt.Sprintf("decides: %v", err)
	}
	updated, statusWrite := step.Write(lease)
	if updated == nil {
		n.ctrl.mem = step.Remember(false, now)
		n.ctrl.done, n.ctrl.requeue = n.lease.rev, -1
		if d := step.RequeueAfter(); d > 0 {
			n.ctrl.requeue = n.t + m.cfg.ticks(d)
		}
		what := "nothing to write"
		if step.Renewed() {
			what = "observes a renewal, nothing to write"
		}
		return n, fmt.Sprintf("decides %s (requeue after %v)", what, step.RequeueAfter())
	}
	kind := "request removal"
	if statusWrite {
		err = m.updateStatus(n, updated)
		kind = "status write"
	} else {
		err = m.updateLease(n, controllerWriter, updated, true)
	}
	if err != nil {
		// The reconciler reads the lease again and decides at once.
		return n, fmt.Sprintf("%s refused: %v", kind, err)
	}
	n.ctrl.mem = step.Remember(true, now)
	n.ctrl.requeue = -1
	var trs []string
	for _, tr := range step.Transitions() {
		switch {
		case tr.Holder == "":
			trs = append(trs, fmt.Sprintf("%s: %s/%d", tr.Kind, tr.Previous, tr.PreviousToken))
		case tr.Previous == "":
			trs = append(trs, fmt.Sprintf("%s: %s/%d", tr.Kind, tr.Holder, tr.Token))
		default:
			trs = append(trs, fmt.Sprintf("%s: %s/%d after %s/%d", tr.Kind, tr.Holder, tr.Token, tr.Previous, tr.PreviousToken))
		}
	}
	if len(trs) == 0 {
		return n, fmt.Sprintf("%s committed at rev %d", kind, n.rev)
	}
	return n, fmt.Sprintf("%s committed at rev %d (%s)", kind, n.rev, strings.Join(trs, "; "))
}
