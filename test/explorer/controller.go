package explorer

import (
	"fmt"
	"strings"

	"github.com/kubefence/kubefence/controllers/fencedlease"
)

// The controller runs the reconciler's loop: a reconcile decides on the
// lease as its informer cache has it (fencedlease.Decide), sends the write
// (Step.Write) with that version's resourceVersion, and goes on deciding on
// its own write's result until it has nothing to write; after a conflict it
// reads the lease from the API server and decides again. A lease being
// deleted is finalized: its epoch (fencedlease.EpochOf) goes to the epoch
// store, then the finalizer.

// view is the lease version the controller's next decision reads: its
// loop's own (after a write, or a re-read after a conflict), else its cache.
func (m *model) view(s *state) *version {
	switch {
	case s.ctrl.loop != nil:
		return s.ctrl.loop
	case m.cfg.CacheLag > 0:
		return s.ctrl.cache
	}
	return s.lease
}

// ctrlDue tells whether the controller has something to look at (its loop
// goes on, the lease it sees changed since it last reconciled, or its
// requeue came) and since when.
func (m *model) ctrlDue(s *state) (bool, int) {
	c := &s.ctrl
	v := m.view(s)
	if !c.up || v == nil || v.obj == nil {
		return false, 0
	}
	if c.loop != nil {
		// The loop goes on at once: since its write (or read) returned.
		return true, c.loop.at
	}
	due, since := false, 0
	if v.rev != c.done {
		due, since = true, v.at
	}
	if c.requeue >= 0 && s.t >= c.requeue && (!due || c.requeue < since) {
		due, since = true, c.requeue
	}
	return due, since
}

// cacheDue tells whether the controller's cache is behind, and whether it
// must catch up before time passes.
func (m *model) cacheDue(s *state) (behind, urgent bool) {
	if m.cfg.CacheLag <= 0 || !s.ctrl.up || s.ctrl.cache == s.lease {
		return false, false
	}
	return true, s.t-s.lease.at >= m.cfg.CacheLag
}

// reconcile is one pass of the controller's loop.
func (m *model) reconcile(s *state) (*state, string) {
	n := s.clone()
	v := m.view(n)
	lease := v.obj
	n.ctrl.loop = nil
	if !lease.DeletionTimestamp.IsZero() {
		return m.finalize(n, v)
	}
	now := n.now(m.cfg, pController)
	var stored int64
	if lease.Status.ObservedGeneration == 0 {
		stored = n.epoch
	}
	hb, live := m.tracked(n, v), n.ctrl.live != nil
	if live {
		hb, n.ctrl.live = n.ctrl.live, nil
	}
	step, err := fencedlease.Decide(lease, n.ctrl.mem.WithHeartbeat(hb), stored, now, m.cfg.Timing)
	if err == nil && step.NeedsLiveHeartbeat() {
		if live {
			n.ctrl.done, n.ctrl.requeue = v.rev, n.t+1
			return n, "asks for the heartbeat live again after a live read"
		}
		// The reconciler reads the heartbeat from the API server, then
		// decides again on the same lease: a step of its own, so that a
		// heartbeat may commit in between.
		n.ctrl.live = m.readLive(n)
		n.ctrl.loop = v
		if n.ctrl.live.RenewTime.IsZero() {
			return n, fmt.Sprintf("asks for the heartbeat live on rev %d and reads no renewTime", v.rev)
		}
		return n, fmt.Sprintf("asks for the heartbeat live on rev %d and reads renewTime %s (sighted %s)",
			v.rev, m.fmtClock(n.ctrl.live.RenewTime), m.fmtClock(n.ctrl.live.Sighted))
	}
	if err != nil {
		n.ctrl.done, n.ctrl.requeue = v.rev, n.t+1
		return n, fmt.Sprintf("decides: %v", err)
	}
	updated, statusWrite := step.Write(lease)
	if updated == nil {
		n.ctrl.mem = step.Remember(false, now)
		n.ctrl.done, n.ctrl.requeue = v.rev, -1
		if d := step.RequeueAfter(); d > 0 {
			n.ctrl.requeue = n.t + m.cfg.ticks(d)
		}
		what := ""
		if step.Renewed() {
			what = " (it observes a renewal)"
		}
		return n, fmt.Sprintf("decides nothing to write on rev %d%s (requeue after %v)", v.rev, what, step.RequeueAfter())
	}
	kind := "request removal"
	if statusWrite {
		err = m.updateStatus(n, updated)
		kind = "status write"
	} else {
		err = m.updateLease(n, controllerWriter, updated, true)
	}
	if err != nil {
		// The reconciler reads the lease from the API server and decides
		// again at once.
		n.ctrl.loop = n.lease
		return n, fmt.Sprintf("%s decided on rev %d refused: %v", kind, v.rev, err)
	}
	n.ctrl.mem = step.Remember(true, now)
	n.ctrl.requeue = -1
	n.ctrl.loop = n.lease
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
		return n, fmt.Sprintf("%s decided on rev %d committed at rev %d", kind, v.rev, n.rev)
	}
	return n, fmt.Sprintf("%s decided on rev %d committed at rev %d (%s)", kind, v.rev, n.rev, strings.Join(trs, "; "))
}

// finalize records a deleted lease's epoch in the epoch store and removes
// the finalizer (with the resourceVersion it read: a grant meanwhile makes
// it conflict); the lease is then gone.
func (m *model) finalize(n *state, v *version) (*state, string) {
	high := fencedlease.EpochOf(v.obj)
	n.epoch = max(n.epoch, high)
	if v.rev != n.lease.rev {
		n.ctrl.loop = n.lease
		return n, fmt.Sprintf("records epoch %d of the deleted lease; its finalizer removal on rev %d is refused: conflict", high, v.rev)
	}
	m.commitLease(n, controllerWriter, nil)
	n.ctrl.mem = fencedlease.Memory{}
	n.ctrl.done, n.ctrl.requeue = n.lease.rev, -1
	return n, fmt.Sprintf("records epoch %d of the deleted lease and removes its finalizer: the lease is gone (rev %d)", high, n.rev)
}
