package explorer

import (
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/fencedlease"
	"github.com/kubefence/kubefence/pkg/fence"
)

// Heartbeats (docs/design.md, "Heartbeats"): the client of
// Config.Heartbeat names its heartbeat Lease (a coordination.k8s.io/v1
// Lease, a separate object) in every request it makes; after acknowledging
// a grant with a renewal patch it renews by updating the heartbeat's
// renewTime (stamped with its clock when sent). The update is in flight
// until it commits, at most Config.HeartbeatDelay ticks later, and it
// counts for the client's deadline only if its answer came before that
// deadline (pkg/fence Elector.beat). The controller's heartbeat informer
// (fencedlease.HeartbeatTracker) sights a committed renewTime at most
// Config.HeartbeatLag ticks after its commit, on the controller's clock;
// a decision that asks for the heartbeat live (Step.NeedsLiveHeartbeat)
// reads it as stored, in a step of its own, and decides again with it in a
// later one: a heartbeat may commit in between, and the fencing webhook, which
// reads the lease and then the heartbeat's renewTime, may admit under it.
// A session heartbeat (ClientSpec.Session) is one a process's other
// tenures keep beating: its client beats whether it leads this lease or
// not, and queues again with the same heartbeat.

// hbState is the heartbeat Lease, the update under way and what the
// controller's tracker holds.
type hbState struct {
	// renew is the stored renewTime (zero: none yet), committed at tick at.
	renew time.Time
	at    int
	// flight: an update with stamp flightStamp, sent at tick flightSent
	// (on the client's clock: flightSentAt), is under way.
	flight       bool
	flightStamp  time.Time
	flightSent   int
	flightSentAt time.Time
	// seen and sighted are the tracker's entry: the renewTime it saw and
	// when it first saw it (the controller's clock).
	seen, sighted time.Time
}

// hbClient is the index of the client that renews by a heartbeat (-1:
// none).
func (m *model) hbClient() int {
	for i, c := range m.cfg.Clients {
		if c.Heartbeat {
			return i
		}
	}
	return -1
}

func (m *model) hbName() string {
	return "hb-" + m.cfg.Clients[m.hbClient()].Identity
}

// heartbeatOf is the heartbeat name client i's requests carry.
func (m *model) heartbeatOf(i int) string {
	if i >= 0 && m.cfg.Clients[i].Heartbeat {
		return m.hbName()
	}
	return ""
}

// hbLease is the heartbeat Lease as stored (what the fencing webhook and
// the controller's live read get).
func (m *model) hbLease(s *state) *coordinationv1.Lease {
	c := m.cfg.Clients[m.hbClient()]
	id := c.Identity
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: leaseNamespace, Name: m.hbName(),
			Labels:      map[string]string{coordv1alpha1.HeartbeatLabel: "true"},
			Annotations: map[string]string{coordv1alpha1.HeartbeatUserAnnotation: c.Name}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &id},
	}
	if !s.hb.renew.IsZero() {
		rt := metav1.NewMicroTime(s.hb.renew)
		l.Spec.RenewTime = &rt
	}
	return l
}

// tracked is the heartbeat a decision about the lease version v gets from
// the controller's tracker (fencedlease.HeartbeatName; nil: none).
func (m *model) tracked(s *state, v *version) *fencedlease.Heartbeat {
	if m.hbClient() < 0 {
		return nil
	}
	name := fencedlease.HeartbeatName(v.obj, s.ctrl.mem)
	if name == "" {
		return nil
	}
	c := m.cfg.Clients[m.hbClient()]
	return &fencedlease.Heartbeat{Name: name, Found: true, Holder: c.Identity, User: c.Name, RenewTime: s.hb.seen, Sighted: s.hb.sighted}
}

// readLive is the controller's live read of the heartbeat: the tracker
// records what it read (a renewTime it had not seen is sighted now).
func (m *model) readLive(s *state) *fencedlease.Heartbeat {
	now := s.now(m.cfg, pController)
	t := fencedlease.NewHeartbeatTracker()
	if !s.hb.seen.IsZero() {
		l := m.hbLease(s)
		rt := metav1.NewMicroTime(s.hb.seen)
		l.Spec.RenewTime = &rt
		t.Observe(l, s.hb.sighted)
	}
	h := t.Observe(m.hbLease(s), now)
	h.Live = true
	s.hb.seen, s.hb.sighted = h.RenewTime, h.Sighted
	return &h
}

// sight is the informer delivering the stored heartbeat to the tracker (at
// start: its list).
func (m *model) sight(s *state) {
	if s.hb.seen.Equal(s.hb.renew) && !s.hb.sighted.IsZero() {
		return
	}
	s.hb.seen, s.hb.sighted = s.hb.renew, s.now(m.cfg, pController)
}

// hbBehind tells whether the tracker is behind the stored heartbeat, and
// whether it must catch up before time passes.
func (m *model) hbBehind(s *state) (behind, urgent bool) {
	if m.hbClient() < 0 || !s.ctrl.up || s.hb.seen.Equal(s.hb.renew) {
		return false, false
	}
	return true, s.t-s.hb.at >= m.cfg.HeartbeatLag
}

// beat is client i sending a heartbeat update, stamped with its clock.
func (m *model) beat(s *state, i int) succ {
	n := s.clone()
	n.clients[i].renewals++
	now := n.now(m.cfg, pClient0+i)
	stamp := now
	if stamp.Before(n.hb.renew) {
		stamp = n.hb.renew // never back
	}
	n.hb.flight, n.hb.flightStamp, n.hb.flightSent, n.hb.flightSentAt = true, stamp, n.t, now
	return succ{pClient0 + i, fmt.Sprintf("%s sends a heartbeat (renewTime %s)", m.cfg.Clients[i].Name, m.fmtClock(stamp)), n}
}

// beatCommits is the heartbeat update committing; its answer extends the
// client's deadline if it came before it.
func (m *model) beatCommits(s *state) succ {
	i := m.hbClient()
	n := s.clone()
	n.hb.flight = false
	n.hb.renew, n.hb.at = n.hb.flightStamp, n.t
	c := &n.clients[i]
	label := fmt.Sprintf("%s's heartbeat commits (renewTime %s)", m.cfg.Clients[i].Name, m.fmtClock(n.hb.renew))
	if c.phase != cLeading || !n.now(m.cfg, pClient0+i).Before(c.deadline) {
		return succ{pAPIServer, label + "; answered after the deadline: not counted", n}
	}
	cfg := fence.Config{}
	deadline, err := cfg.Deadline(n.hb.flightSentAt, time.Duration(m.cfg.LeaseSeconds)*time.Second)
	if err != nil {
		return succ{pAPIServer, fmt.Sprintf("%s: %v", label, err), n}
	}
	if deadline.After(c.deadline) {
		c.deadline = deadline
	}
	return succ{pAPIServer, fmt.Sprintf("%s; %s's deadline is %s", label, m.cfg.Clients[i].Name, m.fmtClock(c.deadline)), n}
}

// hbKey adds the heartbeat's part of a state's key.
func (m *model) hbKey(s *state, put func(...int64), putTime func(time.Time)) {
	if m.hbClient() < 0 {
		return
	}
	h := &s.hb
	putTime(h.renew)
	put(int64(min(s.t-h.at, m.cfg.HeartbeatLag+1)), b2i(h.flight))
	if h.flight {
		putTime(h.flightStamp)
		putTime(h.flightSentAt)
		put(int64(s.t - h.flightSent))
	}
	putTime(h.seen)
	putTime(h.sighted)
	if l := s.ctrl.live; l != nil {
		putTime(l.RenewTime)
		putTime(l.Sighted)
	} else {
		put(-5)
	}
	if o, ok := s.ctrl.mem.Observed(); ok {
		b := []byte(o.Heartbeat)
		for _, c := range b {
			put(int64(c))
		}
		putTime(o.HeartbeatRenew)
		put(b2i(o.HeartbeatAcknowledged), b2i(o.HeartbeatAhead))
	}
}
