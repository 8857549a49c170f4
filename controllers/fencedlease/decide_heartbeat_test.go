package fencedlease

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// hbSim drives the controller's Step over a lease whose requests renew by a
// heartbeat Lease, as the reconciler does: the heartbeat from the tracker,
// and read live (the API server's version) when the step asks for it. api
// is the heartbeat as the API server has it; deliver hands it to the
// tracker as the informer would.
type hbSim struct {
	*sim
	api       *coordinationv1.Lease
	tracker   *HeartbeatTracker
	liveReads int
	removals  int
	// afterLive, if set, runs after each live read (a renewal committing
	// just after the controller looked).
	afterLive func()
}

func newHBSim(t *testing.T, durationSeconds int32) *hbSim {
	s := &hbSim{sim: newSim(t, durationSeconds, 0), tracker: NewHeartbeatTracker()}
	holder := "a"
	s.api = &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "hb-a", Namespace: "ns",
			Labels:      map[string]string{coordv1alpha1.HeartbeatLabel: "true"},
			Annotations: map[string]string{coordv1alpha1.HeartbeatUserAnnotation: "a"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder},
	}
	s.beat(s.clock.Now())
	s.deliver()
	return s
}

// joinWithHeartbeat appends id's request naming the heartbeat.
func (s *hbSim) joinWithHeartbeat(id string) {
	s.specWrite(func(sp *coordv1alpha1.FencedLeaseSpec) {
		sp.Requests = append(sp.Requests, coordv1alpha1.LeaseRequest{HolderIdentity: id, User: id, Heartbeat: "hb-" + id})
	})
}

// beat commits a heartbeat renewal stamped at in the API server.
func (s *hbSim) beat(at time.Time) {
	t := metav1.NewMicroTime(at)
	s.api.Spec.RenewTime = &t
}

// deliver: the informer hands the API server's heartbeat to the tracker now.
func (s *hbSim) deliver() { s.tracker.Observe(s.api.DeepCopy(), s.clock.Now()) }

// beats: n heartbeat renewals 3 s apart, each stamped when made, delivered
// to the tracker and reconciled.
func (s *hbSim) beats(n int) {
	for range n {
		s.clock.Step(3 * time.Second)
		s.beat(s.clock.Now())
		s.deliver()
		s.reconcile()
	}
}

func (s *hbSim) step() (Step, bool) {
	s.t.Helper()
	mem := Memory{obs: s.obs}
	var hb *Heartbeat
	if name := HeartbeatName(s.lease, mem); name != "" {
		h := s.tracker.Get("ns", name)
		hb = &h
	}
	st, err := Decide(s.lease, mem.WithHeartbeat(hb), s.stored, s.clock.Now(), s.timing)
	if err == nil && st.NeedsLiveHeartbeat() {
		s.liveReads++
		h := s.tracker.Observe(s.api.DeepCopy(), s.clock.Now())
		h.Live = true
		if s.afterLive != nil {
			s.afterLive()
		}
		st, err = Decide(s.lease, mem.WithHeartbeat(&h), s.stored, s.clock.Now(), s.timing)
		if err == nil && st.NeedsLiveHeartbeat() {
			s.t.Fatal("the step asks for the heartbeat read live again after it was")
		}
	}
	if err != nil {
		s.t.Fatalf("decide: %v", err)
	}
	updated, statusWrite := st.Write(s.lease)
	switch {
	case updated == nil:
		s.obs = st.Remember(false, s.clock.Now()).obs
		return st, false
	case statusWrite:
		*s.lease = *updated
		s.statusWrites++
		s.trs = append(s.trs, st.Transitions()...)
	default:
		*s.lease = *updated
		s.lease.Generation++
		s.removals++
	}
	s.obs = st.Remember(true, s.clock.Now()).obs
	return st, true
}

func (s *hbSim) reconcile() time.Duration {
	s.t.Helper()
	for range 6 {
		if st, wrote := s.step(); !wrote {
			return st.RequeueAfter()
		}
	}
	s.t.Fatal("decide did not settle in 6 steps")
	return 0
}

// grantedAndAcknowledged: a (heartbeat hb-a) was granted with b queued
// behind, and acknowledged its grant with a stamped renewal of its request.
func grantedAndAcknowledged(s *hbSim) {
	s.joinWithHeartbeat("a")
	s.join("b")
	s.reconcile()
	s.clock.Step(100 * time.Millisecond)
	s.renewStampedAt("a", s.clock.Now())
	s.reconcile()
}

// A holder that renews only its heartbeat keeps the lease, with no
// controller write, and is expired L + allowance after the last heartbeat
// the controller sighted.
func TestHeartbeatRenewalsKeepTheTenureWithoutWrites(t *testing.T) {
	s := newHBSim(t, 10)
	grantedAndAcknowledged(s)
	writes, gen := s.statusWrites, s.lease.Generation
	s.beats(20) // 60 s of heartbeats
	if h, _ := s.holder(); h != "a" {
		t.Fatalf("holder %q after 60 s of heartbeats, want a", h)
	}
	if s.statusWrites != writes || s.lease.Generation != gen || s.liveReads != 0 {
		t.Fatalf("heartbeat renewals cost %d status writes, %d spec writes and %d live reads; want none",
			s.statusWrites-writes, s.lease.Generation-gen, s.liveReads)
	}
	last := s.clock.Now()
	s.clock.Step(10*time.Second + s.timing.Allowance(10*time.Second) - time.Millisecond)
	s.reconcile()
	if h, _ := s.holder(); h != "a" {
		t.Fatalf("expired before L + allowance after the last heartbeat (%v)", last)
	}
	s.clock.Step(time.Millisecond)
	s.reconcile()
	if h, _ := s.holder(); h != "b" {
		t.Fatalf("holder %q at L + allowance after the last heartbeat, want b", h)
	}
}

// A heartbeat tenure is ended only on a live read: a renewal the informer
// has not delivered yet keeps it. Fails without the live read at expiry
// (expireHeartbeat's needLive).
func TestHeartbeatExpiryReadsTheHeartbeatLive(t *testing.T) {
	s := newHBSim(t, 10)
	grantedAndAcknowledged(s)
	s.clock.Step(9 * time.Second)
	s.beat(s.clock.Now()) // committed, not delivered
	s.clock.Step(2 * time.Second)
	s.reconcile()
	if h, _ := s.holder(); h != "a" || s.liveReads != 1 {
		t.Fatalf("holder %q after %d live reads; want a, renewed by the heartbeat the live read found", h, s.liveReads)
	}
}

// At expiry the request is removed before the grant, and with the
// heartbeat silent between the two live reads the next holder is granted at
// once.
func TestHeartbeatExpiryRemovesFirst(t *testing.T) {
	s := newHBSim(t, 10)
	grantedAndAcknowledged(s)
	s.clock.Step(11 * time.Second)
	s.reconcile()
	if h, _ := s.holder(); h != "b" {
		t.Fatalf("holder %q, want b granted at once", h)
	}
	if s.removals != 1 || s.liveReads != 2 || s.lease.Status.LockDelayUntil != nil {
		t.Fatalf("%d request removals, %d live reads, lockDelayUntil %v; want the removal first, two live reads, no wait",
			s.removals, s.liveReads, s.lease.Status.LockDelayUntil)
	}
	if s.lease.Status.PreviousHolder == nil || s.lease.Status.PreviousHolder.Reason != coordv1alpha1.EndReasonSuperseded {
		t.Fatalf("previous holder %+v, want a superseded", s.lease.Status.PreviousHolder)
	}
}

// A heartbeat renewal that commits after the controller's look before the
// removal moves the fencing webhook's cut-off past the expiry (no write
// conflict tells the controller): the grant waits the commit lag after the
// removal. Fails without heartbeatLagged.
func TestHeartbeatExpiryWaitsTheCommitLagAfterALateRenewal(t *testing.T) {
	s := newHBSim(t, 10)
	grantedAndAcknowledged(s)
	s.clock.Step(11 * time.Second)
	s.afterLive = func() {
		if s.liveReads == 1 { // after the first look: a renewal sent before the holder's deadline arrives
			s.beat(s.clock.Now().Add(-2 * time.Second))
		}
	}
	s.reconcile()
	if h, _ := s.holder(); h == "b" {
		t.Fatal("b granted at once after a heartbeat renewal committed between the controller's look and its removal")
	}
	if lu := s.lease.Status.LockDelayUntil; lu == nil || lu.Sub(s.clock.Now()) < s.timing.CommitLag {
		t.Fatalf("lockDelayUntil %v, want the commit lag (%v) from now", lu, s.timing.CommitLag)
	}
	s.clock.Step(s.timing.CommitLag)
	s.reconcile()
	if h, _ := s.holder(); h != "b" {
		t.Fatalf("holder %q after the commit lag, want b", h)
	}
}

// A counted stamp more than the skew after the controller's sighting (the
// holder's clock ahead): the fencing webhook's cut-off from it may fall
// after the controller's expiry, so the grant waits the commit lag. Fails
// without hbAhead.
func TestHeartbeatAheadWaitsTheCommitLag(t *testing.T) {
	s := newHBSim(t, 10)
	grantedAndAcknowledged(s)
	s.clock.Step(3 * time.Second)
	s.beat(s.clock.Now().Add(s.timing.Skew + time.Second))
	s.deliver()
	s.reconcile()
	s.clock.Step(11 * time.Second)
	s.reconcile()
	if h, _ := s.holder(); h == "b" {
		t.Fatal("b granted at once after the holder's heartbeat stamp ran ahead of the controller's clock")
	}
	if lu := s.lease.Status.LockDelayUntil; lu == nil {
		t.Fatal("no commit-lag wait after an ahead stamp")
	}
}

// A heartbeat renews a tenure only once it is acknowledged: a session that
// keeps beating does not hold a lease its process never took up.
func TestHeartbeatDoesNotRenewAnUnacknowledgedGrant(t *testing.T) {
	s := newHBSim(t, 10)
	s.joinWithHeartbeat("a")
	s.join("b")
	s.reconcile()
	s.beats(4)
	if h, _ := s.holder(); h != "b" {
		t.Fatalf("holder %q 12 s after a grant never acknowledged, want b", h)
	}
}

// A heartbeat made by another user than the granted request's renews
// nothing.
func TestHeartbeatOfAnotherUserDoesNotRenew(t *testing.T) {
	s := newHBSim(t, 10)
	s.api.Annotations[coordv1alpha1.HeartbeatUserAnnotation] = "mallory"
	grantedAndAcknowledged(s)
	s.beats(4)
	if h, _ := s.holder(); h != "b" {
		t.Fatalf("holder %q: renewed by a heartbeat mallory made; want b", h)
	}
}
