package explorer

import (
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence/protocol"
)

// The invariants.
const (
	propStaleCommit = "stale-commit"
	propNotHolder   = "not-holder"
	propLiveRefused = "live-refused"
)

type violation struct {
	prop, what string
}

// succ is one step: what happened, and the state after it.
type succ struct {
	// who acted: a party's index, or -1 (time).
	who   int
	label string
	next  *state
}

type model struct {
	cfg *Config
	// objects caches the guarded object's JSON by token (-1: none).
	objects map[int64][]byte
}

func (m *model) violate(s *state, prop, what string) {
	if len(m.cfg.Check) > 0 && !slices.Contains(m.cfg.Check, prop) {
		return
	}
	if s.violation == nil {
		s.violation = &violation{prop: prop, what: what}
	}
}

// initial returns the initial states: one per admissible combination of
// clock offsets. The lease exists with the queued clients' requests; the
// controller has not seen it yet; the guarded object exists, guarded,
// without a token.
func (m *model) initial() []*state {
	var requests []coordv1alpha1.LeaseRequest
	var insts []instance
	for i, c := range m.cfg.Clients {
		if c.Queued {
			requests = append(requests, coordv1alpha1.LeaseRequest{HolderIdentity: c.Identity, User: c.Name, Heartbeat: m.heartbeatOf(i)})
			insts = append(insts, instance{identity: c.Identity, id: len(insts), owner: i})
		}
	}
	lease := &coordv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: leaseNamespace, Name: leaseName, UID: "lease-1", Generation: 1, ResourceVersion: "1",
			Finalizers: []string{coordv1alpha1.EpochFinalizer}},
		Spec: coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: m.cfg.LeaseSeconds, LockDelaySeconds: m.cfg.LockDelaySeconds,
			IdentityBinding: coordv1alpha1.IdentityBindingNone, Requests: requests},
	}
	s0 := &state{rev: 2, lease: newVersion(lease, 1, 0), insts: insts, nextInst: len(insts),
		obj:  guarded{exists: true, rev: 2},
		ctrl: ctrlState{up: true, done: -1, requeue: -1}}
	s0.ctrl.cache = s0.lease
	for i, c := range m.cfg.Clients {
		s0.clients[i].ackSince = -1
		if c.Queued {
			s0.clients[i].phase = cQueued
		}
	}
	var out []*state
	parties := m.parties()
	var rec func(k int, offs [maxParties]time.Duration)
	rec = func(k int, offs [maxParties]time.Duration) {
		if k == len(parties) {
			lo, hi := time.Duration(0), time.Duration(0)
			for _, o := range offs {
				lo, hi = min(lo, o), max(hi, o)
			}
			if hi-lo <= m.cfg.Skew {
				s := s0.clone()
				s.offsets = offs
				out = append(out, s)
			}
			return
		}
		choices := m.cfg.Offsets[m.partyName(parties[k])]
		if len(choices) == 0 {
			choices = []time.Duration{0}
		}
		for _, o := range choices {
			offs[parties[k]] = o
			rec(k+1, offs)
		}
	}
	rec(0, [maxParties]time.Duration{})
	return out
}

// parties are the indexes of the parties in play.
func (m *model) parties() []int {
	ps := []int{pFencing, pLeaseWebhook}
	for i := range m.cfg.Clients {
		ps = append(ps, pClient0+i)
	}
	return ps
}

func (m *model) partyName(p int) string {
	if p < pClient0 {
		return partyNames[p]
	}
	return m.cfg.Clients[p-pClient0].Name
}

// successors are every step possible from s, in a fixed order (a trace is
// replayed by position).
func (m *model) successors(s *state) []succ {
	var out []succ
	if s.violation != nil {
		return nil
	}
	if due, _ := m.ctrlDue(s); due {
		n, label := m.reconcile(s)
		out = append(out, succ{pController, "controller " + label, n})
	}
	for j := range s.writes {
		out = m.writeActions(s, j, out)
	}
	for i := range m.cfg.Clients {
		out = m.clientActions(s, i, out)
	}
	out = m.environmentActions(s, out)
	if m.canTick(s) {
		n := s.clone()
		n.t++
		out = append(out, succ{-1, "time passes", n})
	}
	for _, sc := range out {
		m.settle(sc.next)
	}
	return out
}

// settle brings the deadlines of what must happen soon up to date: since
// when each honest client has a grant to acknowledge.
func (m *model) settle(s *state) {
	for i := range m.cfg.Clients {
		c := &s.clients[i]
		switch due := m.ackDue(s, i); {
		case due && c.ackSince < 0:
			c.ackSince = s.t
		case !due:
			c.ackSince = -1
		}
	}
}

// environmentActions: the controller's cache catches up; the controller
// stops (losing its memory) and starts again; an operator releases the
// holder, hands the lease over, deletes it (as a lease admin may) and
// creates it again.
func (m *model) environmentActions(s *state, out []succ) []succ {
	c := &s.ctrl
	if behind, _ := m.hbBehind(s); behind {
		n := s.clone()
		m.sight(n)
		out = append(out, succ{pController, fmt.Sprintf("the controller's heartbeat informer sights renewTime %s", m.fmtClock(n.hb.renew)), n})
	}
	if s.hb.flight {
		out = append(out, m.beatCommits(s))
	}
	if behind, _ := m.cacheDue(s); behind {
		n := s.clone()
		n.ctrl.cache = n.lease
		out = append(out, succ{pController, fmt.Sprintf("the controller's cache catches up (rev %d)", n.lease.rev), n})
	}
	switch {
	case c.up && c.restarts < m.cfg.ControllerRestarts:
		n := s.clone()
		n.ctrl = ctrlState{up: false, done: -1, requeue: -1, restarts: c.restarts + 1, operator: c.operator}
		out = append(out, succ{pController, "the controller stops (a restart or a leader change: what it remembered is lost)", n})
	case !c.up:
		n := s.clone()
		n.ctrl.up, n.ctrl.cache = true, n.lease
		if m.hbClient() >= 0 {
			m.sight(n) // its heartbeat informer's list
		}
		out = append(out, succ{pController, "the controller starts, remembering nothing", n})
	}
	lease := s.lease.obj
	if c.operator >= m.cfg.OperatorActions {
		return out
	}
	operator := func(label string, do func(n *state) error) {
		n := s.clone()
		n.ctrl.operator++
		if err := do(n); err != nil {
			label += fmt.Sprintf(": refused: %v", err)
		} else {
			label += fmt.Sprintf(": committed at rev %d", n.rev)
		}
		out = append(out, succ{pOperator, label, n})
	}
	switch {
	case lease == nil:
		if m.cfg.LeaseDeletes {
			operator("an operator creates the lease again", func(n *state) error { return m.createLease(n) })
		}
		return out
	case m.cfg.LeaseDeletes && lease.DeletionTimestamp.IsZero():
		operator("an operator deletes the lease", func(n *state) error { return m.deleteLease(n, operatorWriter) })
	}
	if h := lease.Status.HolderIdentity; m.cfg.Revocations && h != "" && lease.DeletionTimestamp.IsZero() {
		if p, err := protocol.ReleasePatch(lease, h); err == nil {
			operator(fmt.Sprintf("an operator releases %s (kubectl fence release)", h), func(n *state) error { return m.patchLease(n, operatorWriter, p) })
		}
		for _, r := range lease.Spec.Requests {
			if r.HolderIdentity == h {
				continue
			}
			if p, err := protocol.HandoverPatch(lease, r.HolderIdentity); err == nil {
				operator(fmt.Sprintf("an operator hands the lease over to %s (kubectl fence handover)", r.HolderIdentity),
					func(n *state) error { return m.patchLease(n, operatorWriter, p) })
			}
			break
		}
	}
	return out
}

// canTick tells whether time may pass: nothing is due that must happen
// within the current tick, and the horizon is not reached.
func (m *model) canTick(s *state) bool {
	if m.cfg.Horizon > 0 && s.t >= m.cfg.Horizon {
		return false
	}
	if due, since := m.ctrlDue(s); due && s.t-since >= m.cfg.ControllerDelay {
		return false
	}
	if _, urgent := m.cacheDue(s); urgent {
		return false
	}
	if _, urgent := m.hbBehind(s); urgent {
		return false
	}
	if s.hb.flight && s.t-s.hb.flightSent >= m.cfg.HeartbeatDelay {
		return false
	}
	for i := range m.cfg.Clients {
		if c := &s.clients[i]; c.ackSince >= 0 && s.t-c.ackSince >= m.cfg.ClientDelay {
			return false
		}
	}
	for i := range m.cfg.Clients {
		c := &s.clients[i]
		if c.withdrawing != nil && s.t-c.withdrawSent >= m.cfg.CommitDelay {
			return false
		}
		// A release goes on at once (the Elector's lead, on one goroutine):
		// its quiesce returns as soon as no write is under way, its withdraw
		// is sent as soon as the quiesce returned.
		if c.phase == cReleasing && c.withdrawing == nil && !m.cfg.Clients[i].NoQuiesce &&
			((c.quiet < 0 && c.inflight == 0) || (c.quiet >= 0 && m.quiesced(s, i))) {
			return false
		}
	}
	for _, w := range s.writes {
		switch w.phase {
		case wArrived:
			if s.t-w.arrived >= m.cfg.DecisionDelay {
				return false
			}
		case wDecided:
			if s.t >= w.answerAt {
				return false
			}
		case wAnswered:
			if s.t-w.answered >= m.cfg.CommitDelay {
				return false
			}
		}
	}
	return true
}

// fmtClock shows a time as seconds since true time 0.
func (m *model) fmtClock(t time.Time) string {
	return fmt.Sprintf("%+.3fs", t.Sub(base).Seconds())
}
