package fencedlease

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// sim drives decide() the way the reconciler does, against an in-memory lease
// and a fake clock, sending each decision's write (decision.apply) as the API
// server would take it: a spec write raises the generation.
type sim struct {
	t      *testing.T
	lease  *coordv1alpha1.FencedLease
	obs    *observation
	clock  *clocktesting.FakeClock
	timing Timing
	stored int64
	trs    []Transition
	// writeTook is how long each status write takes on the fake clock.
	writeTook time.Duration
	// statusWrites counts status writes.
	statusWrites int
}

func newSim(t *testing.T, durationSeconds, lockDelaySeconds int32) *sim {
	return &sim{
		t: t,
		lease: &coordv1alpha1.FencedLease{
			ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "ns", Generation: 1},
			Spec:       coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: durationSeconds, LockDelaySeconds: lockDelaySeconds},
		},
		clock:  clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		timing: DefaultTiming(),
	}
}

// specWrite mimics a client's spec change: generation goes up.
func (s *sim) specWrite(f func(*coordv1alpha1.FencedLeaseSpec)) {
	f(&s.lease.Spec)
	s.lease.Generation++
}

func (s *sim) join(id string) {
	s.specWrite(func(sp *coordv1alpha1.FencedLeaseSpec) {
		sp.Requests = append(sp.Requests, coordv1alpha1.LeaseRequest{HolderIdentity: id, User: id})
	})
}

func (s *sim) renew(id string) {
	s.specWrite(func(sp *coordv1alpha1.FencedLeaseSpec) {
		sp.Requests[coordv1alpha1.RequestIndex(sp.Requests, id)].RenewSequence++
	})
}

func (s *sim) withdraw(id string) {
	s.specWrite(func(sp *coordv1alpha1.FencedLeaseSpec) {
		i := coordv1alpha1.RequestIndex(sp.Requests, id)
		sp.Requests = append(sp.Requests[:i:i], sp.Requests[i+1:]...)
	})
}

// step makes one decision and sends its write, as the API server would take
// it; it returns the decision and whether it wrote.
func (s *sim) step() (decision, bool) {
	s.t.Helper()
	d, err := decide(s.lease, s.obs, nil, s.stored, s.clock.Now(), s.timing)
	if err != nil {
		s.t.Fatalf("decide: %v", err)
	}
	updated, statusWrite := d.apply(s.lease)
	switch {
	case updated == nil:
		s.obs = d.observation
		return d, false
	case statusWrite:
		*s.lease = *updated
		s.statusWrites++
		s.clock.Step(s.writeTook)
		d.written(s.clock.Now())
		s.obs = d.observation
		s.trs = append(s.trs, d.transitions...)
	default:
		// A spec write: the API server raises the generation.
		*s.lease = *updated
		s.lease.Generation++
	}
	return d, true
}

// reconcile runs decide until it has nothing to write, like the reconciler;
// it returns the requeue.
func (s *sim) reconcile() time.Duration {
	s.t.Helper()
	for range 5 {
		if d, wrote := s.step(); !wrote {
			return d.requeueAfter
		}
	}
	s.t.Fatal("decide did not settle in 5 steps")
	return 0
}

// Fixtures: states the simulator brings a lease to, for the tests to start from.

// held: a was granted the lease.
func held(s *sim) {
	s.join("a")
	s.reconcile()
}

// renewedAfterASecond: held, and a renewed (with renew) a second later.
func renewedAfterASecond(s *sim, renew func(id string)) {
	held(s)
	s.clock.Step(time.Second)
	renew("a")
}

// heldWithNext: a was granted the lease (token 3) with b queued at once.
func heldWithNext(s *sim) {
	s.join("a")
	s.join("b")
	s.reconcile()
}

// renewedAnHourAhead: heldWithNext, then 3 s later a renewed with a renewTime
// stamped an hour ahead, and the controller observed it.
func renewedAnHourAhead(s *sim) {
	heldWithNext(s)
	s.clock.Step(3 * time.Second)
	s.renewStampedAt("a", s.clock.Now().Add(time.Hour))
	s.reconcile()
}

// expiredWithNext: a was granted, b queued, and a stopped renewing for longer
// than the lease's duration (10 s).
func expiredWithNext(s *sim) {
	held(s)
	s.join("b")
	s.reconcile()
	s.clock.Step(11 * time.Second)
}

func (s *sim) holder() (string, int64) {
	return s.lease.Status.HolderIdentity, s.lease.Status.FencingToken
}

func heldReason(l *coordv1alpha1.FencedLease) string {
	for _, c := range l.Status.Conditions {
		if c.Type == coordv1alpha1.ConditionHeld {
			return c.Reason
		}
	}
	return ""
}

func TestGrantsInArrivalOrderWithIncreasingTokens(t *testing.T) {
	s := newSim(t, 10, 0)
	s.reconcile()
	if got := heldReason(s.lease); got != coordv1alpha1.ReasonUnclaimed {
		t.Fatalf("empty lease: Held reason %q, want Unclaimed", got)
	}
	s.join("a")
	s.join("b")
	s.join("c")
	s.reconcile()
	var last int64
	for _, want := range []string{"a", "b", "c"} {
		h, tok := s.holder()
		if h != want {
			t.Fatalf("holder %q, want %q (FIFO)", h, want)
		}
		if tok <= last {
			t.Fatalf("token %d after %d: tokens must increase", tok, last)
		}
		last = tok
		s.withdraw(want)
		s.reconcile()
	}
	if h, _ := s.holder(); h != "" || heldReason(s.lease) != coordv1alpha1.ReasonReleased {
		t.Fatalf("after all released: holder %q reason %q, want none/Released", h, heldReason(s.lease))
	}
	if s.lease.Status.LeaseTransitions != 3 {
		t.Fatalf("leaseTransitions %d, want 3", s.lease.Status.LeaseTransitions)
	}
}

func TestRenewalKeepsTokenAndExtendsExpiry(t *testing.T) {
	s := newSim(t, 10, 0)
	s.join("a")
	s.reconcile()
	_, tok := s.holder()
	for range 5 {
		s.clock.Step(9 * time.Second)
		s.renew("a")
		s.reconcile()
		if h, got := s.holder(); h != "a" || got != tok {
			t.Fatalf("after renewal: holder %q token %d, want a/%d (I2)", h, got, tok)
		}
	}
	want := s.clock.Now().Add(10*time.Second + s.timing.Allowance(10*time.Second))
	if !s.lease.Status.ExpireTime.Time.Equal(want) {
		t.Fatalf("expireTime %v, want %v", s.lease.Status.ExpireTime.Time, want)
	}
}

func TestExpiryExactlyAtDurationPlusAllowance(t *testing.T) {
	s := newSim(t, 10, 0)
	s.join("a")
	s.reconcile()
	s.join("b")
	requeue := s.reconcile()
	total := 10*time.Second + s.timing.Allowance(10*time.Second)
	if requeue != total {
		t.Fatalf("requeueAfter %v, want exactly %v", requeue, total)
	}
	s.clock.Step(total - time.Microsecond)
	s.reconcile()
	if h, _ := s.holder(); h != "a" {
		t.Fatalf("expired early: holder %q 1µs before expiry", h)
	}
	_, tokA := s.holder()
	s.clock.Step(time.Microsecond)
	s.reconcile()
	h, tokB := s.holder()
	if h != "b" || tokB <= tokA {
		t.Fatalf("at expiry: holder %q token %d, want b with token > %d", h, tokB, tokA)
	}
	if heldReason(s.lease) != coordv1alpha1.ReasonTakenOver || s.lease.Status.PreviousHolder.Reason != coordv1alpha1.EndReasonSuperseded {
		t.Fatalf("reason %q previous %+v, want TakenOver/Superseded", heldReason(s.lease), s.lease.Status.PreviousHolder)
	}
}

func TestExpiredWithNobodyWaitingIsToldApartFromSuperseded(t *testing.T) {
	s := newSim(t, 5, 0)
	s.join("a")
	s.reconcile()
	s.clock.Step(time.Minute)
	s.reconcile()
	if h, _ := s.holder(); h != "" {
		t.Fatalf("holder %q after expiry, want none", h)
	}
	if heldReason(s.lease) != coordv1alpha1.ReasonExpired || s.lease.Status.PreviousHolder.Reason != coordv1alpha1.EndReasonExpired {
		t.Fatalf("reason %q previous %+v, want Expired/Expired", heldReason(s.lease), s.lease.Status.PreviousHolder)
	}
	s.join("b")
	s.reconcile()
	if heldReason(s.lease) != coordv1alpha1.ReasonTakenOver || s.lease.Status.PreviousHolder.Reason != coordv1alpha1.EndReasonSuperseded {
		t.Fatalf("reason %q previous %+v, want TakenOver/Superseded", heldReason(s.lease), s.lease.Status.PreviousHolder)
	}
}

func TestRestartedControllerCountsFromItsOwnObservation(t *testing.T) {
	s := newSim(t, 10, 0)
	heldWithNext(s)
	s.clock.Step(8 * time.Second)
	s.obs = nil // a new controller process: nothing in memory
	s.reconcile()
	s.clock.Step(8 * time.Second) // 16 s after the grant, 8 s after the new controller first saw it
	s.reconcile()
	if h, _ := s.holder(); h != "a" {
		t.Fatalf("new controller expired %q early (holder now %q)", "a", h)
	}
}

func TestLockDelayAfterExpiryButNotAfterRelease(t *testing.T) {
	s := newSim(t, 5, 30)
	heldWithNext(s)
	s.clock.Step(6 * time.Second)
	requeue := s.reconcile()
	if h, _ := s.holder(); h != "" || heldReason(s.lease) != coordv1alpha1.ReasonLockDelay {
		t.Fatalf("holder %q reason %q during lock-delay, want none/LockDelay", h, heldReason(s.lease))
	}
	if requeue != 30*time.Second {
		t.Fatalf("requeueAfter %v, want 30s (end of lock-delay)", requeue)
	}
	s.clock.Step(30 * time.Second)
	s.reconcile()
	if h, _ := s.holder(); h != "b" {
		t.Fatalf("holder %q after lock-delay, want b", h)
	}
	s.join("c")
	s.withdraw("b")
	s.reconcile()
	if h, _ := s.holder(); h != "c" || heldReason(s.lease) != coordv1alpha1.ReasonHandedOver {
		t.Fatalf("after release: holder %q reason %q, want c/HandedOver with no lock-delay", h, heldReason(s.lease))
	}
}

func TestTokensContinueAboveStoredEpochAndFloor(t *testing.T) {
	s := newSim(t, 5, 0)
	s.stored = 1000
	s.join("a")
	if requeue := s.reconcile(); requeue != s.timing.CommitLag {
		t.Fatalf("first reconcile of a recreated lease requeues after %v, want the commit lag %v", requeue, s.timing.CommitLag)
	}
	if h, _ := s.holder(); h != "" || heldReason(s.lease) != coordv1alpha1.ReasonLockDelay {
		t.Fatalf("a recreated lease granted %q at once (reason %q): writes of the earlier incarnation may still commit; want a grant CommitLag later", h, heldReason(s.lease))
	}
	s.clock.Step(s.timing.CommitLag)
	s.reconcile()
	if _, tok := s.holder(); tok <= 1000 {
		t.Fatalf("token %d after recreate with stored epoch 1000, want > 1000", tok)
	}
	s.specWrite(func(sp *coordv1alpha1.FencedLeaseSpec) { sp.MinFencingToken = 5000 })
	s.reconcile()
	if _, tok := s.holder(); tok > 1100 {
		t.Fatalf("raising minFencingToken changed the current token to %d (I2)", tok)
	}
	s.join("b")
	s.withdraw("a")
	s.reconcile()
	if h, tok := s.holder(); h != "b" || tok <= 5000 {
		t.Fatalf("holder %q token %d after floor 5000, want b with token > 5000", h, tok)
	}
}

func TestReleaseAndRequeueIsANewTenure(t *testing.T) {
	s := newSim(t, 5, 0)
	s.join("a")
	s.reconcile()
	s.renew("a")
	s.reconcile()
	_, first := s.holder()
	s.withdraw("a")
	s.join("a")
	s.reconcile()
	if h, tok := s.holder(); h != "a" || tok <= first {
		t.Fatalf("re-queued after release: holder %q token %d, want a with token > %d", h, tok, first)
	}
}

// A released holder's identity, queued again by another user, is a new
// request, not the tenure (docs/design.md, "Which request carries the
// tenure"). a is granted (status.holderUser records its request's user),
// renews with stamps (no status write: status.renewSequence stays the
// grant's, so a request made again from 0 is not below it), withdraws, and
// mallory queues under the identity a before any controller saw the
// withdrawal; meanwhile another controller took over, with no observation
// of the tenure. The tenure ends as a release: b, queued first, is handed
// the lease with a larger token, and mallory's request waits behind it, to
// be granted a tenure of its own later.
func TestHolderIdentityQueuedAgainByAnotherUserEndsTheTenure(t *testing.T) {
	s := newSim(t, 10, 0)
	heldWithNext(s)
	_, granted := s.holder()
	grantedTo := s.lease.Status.HolderUser
	for range 3 {
		s.clock.Step(3 * time.Second)
		s.renewStamped("a")
		s.reconcile()
	}
	if seq := s.lease.Status.RenewSequence; seq != 0 {
		t.Fatalf("status.renewSequence %d after stamped renewals, want the grant's 0 (no status write)", seq)
	}
	s.withdraw("a")
	s.specWrite(func(sp *coordv1alpha1.FencedLeaseSpec) {
		sp.Requests = append(sp.Requests, coordv1alpha1.LeaseRequest{HolderIdentity: "a", User: "mallory"})
	})
	s.obs = nil // another controller took over
	s.reconcile()
	st := &s.lease.Status
	if st.HolderIdentity != "b" || st.FencingToken <= granted {
		t.Fatalf("holder %q token %d after a withdrew and mallory queued as a, want b with a token above a's %d: mallory's request carries a's tenure",
			st.HolderIdentity, st.FencingToken, granted)
	}
	if grantedTo != "a" || st.HolderUser != "b" {
		t.Fatalf("status.holderUser %q at the grant to a, %q at the grant to b; want the user of each granted request", grantedTo, st.HolderUser)
	}
	if p := st.PreviousHolder; p == nil || p.HolderIdentity != "a" || p.FencingToken != granted || p.Reason != coordv1alpha1.EndReasonReleased {
		t.Fatalf("previousHolder %+v, want a's tenure %d Released", p, granted)
	}
	_, handed := s.holder()
	s.withdraw("b")
	s.reconcile()
	if st.HolderIdentity != "a" || st.HolderUser != "mallory" || st.FencingToken <= handed {
		t.Fatalf("after b released: holder %q (user %q) token %d, want mallory's request a granted a tenure of its own above %d",
			st.HolderIdentity, st.HolderUser, st.FencingToken, handed)
	}
}

func TestTimingAllowance(t *testing.T) {
	tm := DefaultTiming()
	for _, c := range []struct {
		l, want time.Duration
	}{{time.Second, 10 * time.Millisecond}, {2 * time.Second, 10 * time.Millisecond}, {15 * time.Second, 75 * time.Millisecond}} {
		if got := tm.Allowance(c.l); got != c.want {
			t.Errorf("Allowance(%v) = %v, want %v", c.l, got, c.want)
		}
	}
	if err := (Timing{DriftRatio: 1}).Validate(); err == nil {
		t.Error("DriftRatio 1 accepted, want an error")
	}
	if err := (Timing{MinDrift: -1}).Validate(); err == nil {
		t.Error("negative MinDrift accepted, want an error")
	}
}

func TestTakeoverGrantsBeforeRemovingTheExpiredRequest(t *testing.T) {
	s := newSim(t, 5, 0)
	heldWithNext(s)
	s.renew("a") // an acknowledged tenure: the generation moved since the grant
	s.reconcile()
	_, tokA := s.holder()
	s.clock.Step(6 * time.Second)
	d, err := decide(s.lease, s.obs, nil, 0, s.clock.Now(), s.timing)
	if err != nil {
		t.Fatal(err)
	}
	if d.removeRequest != "" || d.status == nil || d.status.HolderIdentity != "b" {
		t.Fatalf("first write of a take-over: remove %q, status holder %v; want the grant to b first", d.removeRequest, d.status)
	}
	if d.status.FencingToken <= tokA {
		t.Fatalf("token %d after %d", d.status.FencingToken, tokA)
	}
	s.reconcile() // grant; a's expired request waits for b's acknowledgement
	if i := coordv1alpha1.RequestIndex(s.lease.Spec.Requests, "a"); i < 0 {
		t.Fatalf("a's expired request was removed before b acknowledged: the removal would shift b's acknowledging patch")
	}
	for _, w := range s.lease.Status.Waiting {
		if w.HolderIdentity == "a" {
			t.Fatalf("a listed as waiting after its expiry: %+v", s.lease.Status.Waiting)
		}
	}
	s.renew("b") // b acknowledges
	s.reconcile()
	if i := coordv1alpha1.RequestIndex(s.lease.Spec.Requests, "a"); i >= 0 {
		t.Fatalf("a's expired request is still queued after b acknowledged: %+v", s.lease.Spec.Requests)
	}
	s.join("a") // a queues afresh: this request must stay
	s.reconcile()
	if i := coordv1alpha1.RequestIndex(s.lease.Spec.Requests, "a"); i < 0 {
		t.Fatalf("a's new request was removed as if it were the expired one")
	}
}

func TestGrantCountsFromWhenItsWriteReturnedWithOneWrite(t *testing.T) {
	const slow = 300 * time.Millisecond
	s := newSim(t, 10, 0)
	s.writeTook = slow
	l := 10 * time.Second
	total := l + s.timing.Allowance(l)
	s.join("a")
	grantedAt := s.clock.Now()
	s.reconcile()
	if s.statusWrites != 1 {
		t.Fatalf("a grant took %d status writes, want 1", s.statusWrites)
	}
	if h, _ := s.holder(); h != "a" {
		t.Fatalf("holder %q, want a", h)
	}
	// expireTime in status counts from the decision; the controller counts
	// from when the write returned: the persisted expiry is never the later one.
	if got, want := s.lease.Status.ExpireTime.Time, grantedAt.Add(total); !got.Equal(want) {
		t.Fatalf("expireTime %v, want %v", got, want)
	}
	s.writeTook = 0
	s.join("b")
	s.reconcile()
	s.clock.Step(total - slow)
	s.reconcile()
	if h, _ := s.holder(); h != "a" {
		t.Fatalf("expired at the persisted expireTime, before the controller's own expiry: holder %q", h)
	}
	s.clock.Step(slow)
	s.reconcile()
	if h, _ := s.holder(); h != "b" {
		t.Fatalf("holder %q at grant return + L + allowance, want b", h)
	}

	// b acknowledges: a's expired request is removed after that.
	s.renew("b")
	s.reconcile()
	// A renewal is recorded in one write and counts from its observation.
	s.writeTook = slow
	writes := s.statusWrites
	s.clock.Step(time.Second)
	s.renew("b")
	observedAt := s.clock.Now()
	s.reconcile()
	if n := s.statusWrites - writes; n != 1 {
		t.Fatalf("a renewal took %d status writes, want 1", n)
	}
	s.writeTook = 0
	s.join("c")
	s.reconcile()
	s.clock.Step(observedAt.Add(total).Sub(s.clock.Now()))
	s.reconcile()
	if h, _ := s.holder(); h != "c" {
		t.Fatalf("holder %q at renewal observation + L + allowance, want c", h)
	}
}

func TestExpiredRequestRemovedAfterAckGraceWithoutAcknowledgement(t *testing.T) {
	s := newSim(t, 3, 0)
	heldWithNext(s)
	s.renew("a")
	s.reconcile()
	l := 3 * time.Second
	s.clock.Step(l + s.timing.Allowance(l))
	requeue := s.reconcile() // b granted, never acknowledges
	if h, _ := s.holder(); h != "b" {
		t.Fatalf("holder %q, want b", h)
	}
	if requeue != ackGrace(l) {
		t.Fatalf("requeueAfter %v, want the acknowledgement grace %v", requeue, ackGrace(l))
	}
	if coordv1alpha1.RequestIndex(s.lease.Spec.Requests, "a") < 0 {
		t.Fatal("a's request removed before the grace ended")
	}
	s.clock.Step(requeue)
	s.reconcile()
	if coordv1alpha1.RequestIndex(s.lease.Spec.Requests, "a") >= 0 {
		t.Fatalf("a's expired request still queued after the grace: %+v", s.lease.Spec.Requests)
	}
	if h, _ := s.holder(); h != "b" {
		t.Fatalf("holder %q after the removal, want b still", h)
	}
}

// An operator's revocation (kubectl fence release/handover: the holder's
// request removed with the revoked annotation) ends the tenure at once, but
// the next grant waits the commit lag: the revoked holder's admitted writes
// may still commit. A voluntary release hands over at once
// (TestLockDelayAfterExpiryButNotAfterRelease).
func TestRevokedTenureGrantsOnlyAfterTheCommitLag(t *testing.T) {
	s := newSim(t, 15, 0)
	heldWithNext(s)
	_, tok := s.holder()
	s.lease.Annotations = map[string]string{coordv1alpha1.RevokedAnnotation: coordv1alpha1.ExpiredMark("a", tok)}
	s.withdraw("a")
	if requeue := s.reconcile(); requeue != s.timing.CommitLag {
		t.Fatalf("requeue after a revocation %v, want the commit lag %v", requeue, s.timing.CommitLag)
	}
	if h, _ := s.holder(); h != "" {
		t.Fatalf("granted %q at once after a revocation, want nobody for the commit lag", h)
	}
	s.clock.Step(s.timing.CommitLag - time.Millisecond)
	s.reconcile()
	if h, _ := s.holder(); h != "" {
		t.Fatalf("granted %q before the commit lag passed", h)
	}
	s.clock.Step(time.Millisecond)
	s.reconcile()
	if h, next := s.holder(); h != "b" || next <= tok {
		t.Fatalf("holder %q token %d after the commit lag, want b above %d", h, next, tok)
	}
}

// A controller never expires a tenure before the persisted expireTime,
// whoever wrote it: an old leader that wakes up from a pause, or a second
// controller, counts from an earlier observation than the expireTime its peer
// wrote, and the fencing webhook accepts the token until just before that.
func TestNeverExpiresBeforeThePersistedExpireTime(t *testing.T) {
	s := newSim(t, 10, 0)
	heldWithNext(s)
	s.renew("a")
	zombie := &observation{holder: "a", token: s.lease.Status.FencingToken, renewSequence: 1, at: s.clock.Now(), recorded: s.clock.Now(), acked: true}
	s.clock.Step(5 * time.Second)
	s.reconcile() // the leader observes the renewal 5 s later: expireTime moves to now+L+a
	persisted := s.lease.Status.ExpireTime.Time
	renewTime := s.lease.Status.RenewTime.Time
	s.clock.Step(6 * time.Second) // past the zombie's own expiry, 4 s before the persisted one
	s.obs = zombie
	writes := s.statusWrites
	s.reconcile()
	if h, _ := s.holder(); h != "a" {
		t.Fatalf("a controller counting from an older observation expired a at %v, before the persisted expireTime %v (holder now %q)", s.clock.Now(), persisted, h)
	}
	if !s.lease.Status.RenewTime.Time.Equal(renewTime) || !s.lease.Status.ExpireTime.Time.Equal(persisted) || s.statusWrites != writes {
		t.Fatalf("the older observation moved status back (renewTime %v, expireTime %v, %d writes), want it untouched",
			s.lease.Status.RenewTime.Time, s.lease.Status.ExpireTime.Time, s.statusWrites-writes)
	}
	s.clock.Step(persisted.Sub(s.clock.Now()))
	s.reconcile()
	if h, _ := s.holder(); h != "b" {
		t.Fatalf("holder %q at the persisted expireTime, want b", h)
	}
}

// renewStamped is the current helper's renewal: renewSequence + 1 and
// renewTime = the holder's send time (the sim's clock).
func (s *sim) renewStamped(id string) { s.renewStampedAt(id, s.clock.Now()) }

// renewStampedAt is a renewal stamped with renewTime = at.
func (s *sim) renewStampedAt(id string, at time.Time) {
	s.specWrite(func(sp *coordv1alpha1.FencedLeaseSpec) {
		i := coordv1alpha1.RequestIndex(sp.Requests, id)
		sp.Requests[i].RenewSequence++
		t := metav1.NewMicroTime(at)
		sp.Requests[i].RenewTime = &t
	})
}

// One API write per renewal: a stamped renewal is tracked in memory, with no
// status write, and expiry still counts from the controller's observation.
func TestStampedRenewalsNeedNoStatusWrite(t *testing.T) {
	s := newSim(t, 10, 0)
	heldWithNext(s)
	grantWrites := s.statusWrites
	for range 6 {
		s.clock.Step(3 * time.Second)
		s.renewStamped("a")
		s.reconcile()
	}
	if s.statusWrites != grantWrites {
		t.Fatalf("%d status writes for 6 stamped renewals, want 0 (one API write per renewal: the holder's)", s.statusWrites-grantWrites)
	}
	if h, _ := s.holder(); h != "a" {
		t.Fatalf("holder %q after 6 renewals 3 s apart on a 10 s lease, want a", h)
	}
	// Silent from now: expired at the last observation + L + allowance.
	last := s.clock.Now()
	s.clock.Step(10*time.Second + s.timing.Allowance(10*time.Second) - time.Millisecond)
	s.reconcile()
	if h, _ := s.holder(); h != "a" {
		t.Fatalf("expired %v after the last renewal, before L + allowance", s.clock.Since(last))
	}
	s.clock.Step(time.Millisecond)
	s.reconcile()
	if h, _ := s.holder(); h != "b" {
		t.Fatalf("holder %q at L + allowance after the last renewal, want b", h)
	}
}

// A controller that never observed the latest stamped renewal (a new leader,
// or a second controller) still never expires before renewTime + L +
// allowance: the fencing webhook counts the tenure from that stamp.
func TestNeverExpiresBeforeTheHoldersRenewTime(t *testing.T) {
	s := newSim(t, 10, 0)
	heldWithNext(s)
	stale := s.obs
	s.clock.Step(6 * time.Second)
	s.renewStamped("a") // renewTime = grant + 6 s; this controller does not observe it
	stamp := s.clock.Now()
	s.obs = &observation{holder: stale.holder, token: stale.token, renewSequence: 1, at: stale.at, recorded: stale.recorded, acked: true}
	s.clock.Step(5 * time.Second) // 11 s after the grant: past the stale observation's expiry
	s.obs.renewSequence = 1       // it has seen renewSequence 1 (the stamped one) only now, from an older view
	s.reconcile()
	if h, _ := s.holder(); h != "a" {
		t.Fatalf("expired a at %v, before its renewTime %v + L + allowance", s.clock.Now(), stamp)
	}
}

// A waiter joining the queue costs one status write (the waiting list), once:
// the renewals that follow it cost none, and the time it was first seen stays.
// (The scale benchmark's 563 "other" status writes in a steady window were
// waiters still joining; see docs/benchmarks.md.)
func TestAJoiningWaiterCostsOneStatusWriteOnce(t *testing.T) {
	s := newSim(t, 15, 0)
	s.join("a")
	s.reconcile()
	if s.statusWrites != 1 {
		t.Fatalf("%d status writes for the grant, want 1", s.statusWrites)
	}
	s.clock.Step(time.Second)
	s.join("b")
	s.reconcile()
	if s.statusWrites != 2 {
		t.Fatalf("%d status writes after b joined, want 2 (the grant, the waiting list)", s.statusWrites)
	}
	w := s.lease.Status.Waiting
	if len(w) != 1 || w[0].HolderIdentity != "b" || !w[0].Since.Time.Equal(s.clock.Now()) {
		t.Fatalf("waiting = %+v, want b since %v", w, s.clock.Now())
	}
	since := w[0].Since
	for range 10 {
		s.clock.Step(5 * time.Second)
		s.renewStamped("a")
		s.reconcile()
	}
	if s.statusWrites != 2 {
		t.Fatalf("%d status writes for 10 stamped renewals with b waiting, want 0", s.statusWrites-2)
	}
	if w := s.lease.Status.Waiting; len(w) != 1 || !w[0].Since.Equal(&since) {
		t.Fatalf("waiting = %+v after the renewals, want b since %v", w, since)
	}
	s.join("c")
	s.reconcile()
	if s.statusWrites != 3 || len(s.lease.Status.Waiting) != 2 {
		t.Fatalf("%d status writes, waiting %+v after c joined, want 3 and [b c]", s.statusWrites, s.lease.Status.Waiting)
	}
}

// A grant publishes the operator's commit lag and skew, in whole
// milliseconds rounded up, for the holder's deadline (timing.Margin).
func TestGrantPublishesCommitLagAndSkew(t *testing.T) {
	s := newSim(t, 10, 0)
	s.timing.CommitLag, s.timing.Skew = 2500*time.Millisecond, 150*time.Millisecond+time.Microsecond
	s.join("a")
	s.reconcile()
	if h, _ := s.holder(); h != "a" {
		t.Fatalf("holder %q, want a", h)
	}
	if st := s.lease.Status; st.MaxCommitLagMilliseconds != 2500 || st.ClockSkewMilliseconds != 151 {
		t.Fatalf("published commit lag %d ms and skew %d ms, want 2500 and 151", st.MaxCommitLagMilliseconds, st.ClockSkewMilliseconds)
	}
}
