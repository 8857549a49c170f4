package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/fencedlease"
	"github.com/kubefence/kubefence/pkg/fence"
	"github.com/kubefence/kubefence/test/testenv"
	"github.com/kubefence/kubefence/test/testenv/fault"
)

// Fault 1: the holder's process stalls (GC, SIGSTOP, a suspended VM) past its
// lease. The helper cancels its context at the local deadline; the waiter is
// granted after the controller's expiry; a write the holder had in flight
// lands after the takeover and is refused. One subtest per renewal kind, in
// parallel, with one controller.
func TestFault1HolderPausedPastExpiry(t *testing.T) {
	eachRenewal(t, fault1)
}

func fault1(t *testing.T, r testenv.Renewal) {
	g, ns, mon := jobScenario(t)
	const l = 2 * time.Second
	j := &testenv.Journal{}
	paused := &fault.Gate{}
	aliceCl := wrappedClient(t, "alice", paused.Stall)
	_, tokA := holdWithBobQueued(t, g, ns, "job", r, aliceCl, aliceCl, j)
	t.Cleanup(paused.Open)

	paused.Close()
	pausedAt := time.Now()
	// A write alice prepared with her token just as she stalled.
	late := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(suiteCtx, 30*time.Second)
		defer cancel()
		late <- writeWidget(ctx, aliceCl, ns, "w", "job", tokA, "alice-late")
	}()

	gs := bobGranted(t, g, j, "the pause", pausedAt, recoveryBound(l, 1500*time.Millisecond), "takeover slower than L + allowance + slack")
	tokB := gs[1].Token
	g.Expect(writeWidget(suiteCtx, users["bob"], ns, "w", "job", tokB, "bob")).To(Succeed())

	paused.Open()
	var lateErr error
	g.Eventually(late, 15*time.Second).Should(Receive(&lateErr))
	expectStale(g, lateErr, "alice's write stalled through the takeover")
	expectStale(g, writeWidget(suiteCtx, users["alice"], ns, "w", "job", tokA, "alice-again"), "alice's write with her old token")
	writer, tok := widgetState(g, ns, "w")
	g.Expect(writer).To(Equal("bob"))
	g.Expect(tok).To(Equal(tokB))
	mon.check(g)
}

// writeAttempt is one write a background writer tried.
type writeAttempt struct {
	sent time.Time
	err  error
}

// writer writes the Widget in a loop until stopped.
type writer struct {
	mu       sync.Mutex
	attempts []writeAttempt
	stop     chan struct{}
	done     chan struct{}
}

func startWriter(write func(ctx context.Context) error) *writer {
	w := &writer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(suiteCtx, 5*time.Second)
			sent := time.Now()
			err := write(ctx)
			cancel()
			w.mu.Lock()
			w.attempts = append(w.attempts, writeAttempt{sent, err})
			w.mu.Unlock()
			time.Sleep(40 * time.Millisecond)
		}
	}()
	return w
}

// sentAfter tells whether the writer sent a write after at.
func (w *writer) sentAfter(at time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.attempts) > 0 && w.attempts[len(w.attempts)-1].sent.After(at)
}

func (w *writer) halt() []writeAttempt {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]writeAttempt(nil), w.attempts...)
}

// Fault 2: the holder is cut off from the API server's lease traffic but
// still reaches the guarded resource (two clients, two paths). Its helper
// stops it locally at the deadline; a holder that ignores its deadline and
// keeps writing with its old token is refused from the takeover on. One
// subtest per renewal kind (a heartbeat goes with the lease traffic), in
// parallel, with one controller.
func TestFault2HolderPartitionedFromLeaseButNotFromResource(t *testing.T) {
	eachRenewal(t, fault2)
}

func fault2(t *testing.T, r testenv.Renewal) {
	g, ns, mon := jobScenario(t)
	const l = 2 * time.Second
	j := &testenv.Journal{}
	partition := &fault.Gate{}
	leaseCl := wrappedClient(t, "alice", partition.Stall) // lease traffic and heartbeats: will be cut
	writeCl := users["alice"]                             // the guarded resource's path: stays up
	a, tokA := holdWithBobQueued(t, g, ns, "job", r, leaseCl, writeCl, j)
	t.Cleanup(partition.Open)

	// An honest writer stamps the elector's token (and sends nothing once the
	// helper says it no longer leads); a stubborn one keeps its old token.
	honestCl := fence.NewFencedClient(writeCl, "job", a.Elector)
	honest := startWriter(func(ctx context.Context) error {
		return honestCl.Patch(ctx, testenv.Widget(ns, "w"), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"writer":"alice"}}`)))
	})
	stubborn := startWriter(func(ctx context.Context) error {
		return writeWidget(ctx, writeCl, ns, "w", "job", tokA, "alice-stubborn")
	})
	time.Sleep(300 * time.Millisecond)

	partition.Close()
	cutAt := time.Now()
	gs := bobGranted(t, g, j, "the partition", cutAt, recoveryBound(l, 1500*time.Millisecond), "takeover slower than L + allowance + slack")
	tokB := gs[1].Token
	g.Expect(writeWidget(suiteCtx, users["bob"], ns, "w", "job", tokB, "bob")).To(Succeed())
	// Both writers try again after bob's grant (a write in flight then may
	// take long on a loaded machine: wait for it rather than a fixed time).
	g.Eventually(func() bool { return honest.sentAfter(gs[0].Stop) && stubborn.sentAfter(gs[1].Start) }, 10*time.Second, 20*time.Millisecond).
		Should(BeTrue(), "the writers sent nothing after bob's grant")
	honestAttempts, stubbornAttempts := honest.halt(), stubborn.halt()

	aliceStop := gs[0].Stop
	var honestBefore, honestAfter, stubbornAfter int
	for _, at := range honestAttempts {
		switch {
		case at.sent.Before(cutAt):
			g.Expect(at.err).NotTo(HaveOccurred(), "alice's honest write while she led")
			honestBefore++
		case at.sent.After(aliceStop):
			g.Expect(errors.Is(at.err, fence.ErrNotLeading)).To(BeTrue(), "after her deadline the helper must not send alice's write: %v", at.err)
			honestAfter++
		}
	}
	for _, at := range stubbornAttempts {
		if at.sent.After(gs[1].Start) {
			expectStale(g, at.err, "alice's write with her old token after bob's grant")
			stubbornAfter++
		}
	}
	g.Expect(honestBefore).To(BeNumerically(">", 0))
	g.Expect(honestAfter).To(BeNumerically(">", 0))
	g.Expect(stubbornAfter).To(BeNumerically(">", 0), func() string {
		return fmt.Sprintf("no stubborn write sent after bob's grant at %v; attempts %+v", gs[1].Start, stubbornAttempts)
	})
	expectStale(g, writeWidget(suiteCtx, writeCl, ns, "w", "job", tokA, "alice-again"), "alice's write with her old token")
	writer, tok := widgetState(g, ns, "w")
	g.Expect(writer).To(Equal("bob"))
	g.Expect(tok).To(Equal(tokB))

	// The partition heals: alice's helper learns it lost and queues again.
	partition.Open()
	g.Eventually(func() []string { return queued(ns, "job") }, 10*time.Second, 50*time.Millisecond).Should(ContainElement("alice"))
	h, tok := holderOf(ns, "job")
	g.Expect(h).To(Equal("bob"))
	g.Expect(tok).To(Equal(tokB))
	mon.check(g)
}

// Fault 3: the operator crashes in the middle of an expiry-and-grant: between
// the spec write that removes the expired request and the status write that
// grants the waiter (that write lost, or committed with its answer lost), or
// after the grant but before the removal. A fresh controller finishes the job:
// the waiter is granted a token above the expired one, and the expired
// holder's write is refused.
func TestFault3OperatorCrashBetweenGrantAndStatusWrite(t *testing.T) {
	for _, tc := range []struct {
		name  string
		point crashPoint
	}{
		{"grant status write lost", grantRequestLost},
		{"grant status answer lost", grantResponseLost},
		{"removal of the expired request lost", removalLost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ns := newNamespace(t)
			const l = 2 * time.Second
			newLease(g, ns, "job", 2)
			mon := startMonitor(t, ns)
			j := &testenv.Journal{}
			// Alice never renews. For the spec-first sequence bob queues before alice's
			// grant, so that nothing raises the generation during her tenure and the
			// controller must remove her request (a spec write) before granting.
			joinRaw(g, "alice", ns, "job", "alice")
			if tc.point != removalLost {
				startElector(t, users["bob"], "bob", ns, "job", "bob", j)
				waitQueued(g, ns, "job", "bob")
			}
			crash := newCrashingTransport(ns, "job", tc.point)
			first := startController(t, controllerOptions{wrap: crash.wrap})
			g.Eventually(func() string { h, _ := holderOf(ns, "job"); return h }, 10*time.Second, 10*time.Millisecond).Should(Equal("alice"))
			leaseA := getLease(g, ns, "job")
			tokA, grantedA := leaseA.Status.FencingToken, leaseA.Status.AcquireTime.Time
			g.Expect(createWidget(users["alice"], ns, "w", "job", tokA, "alice")).To(Succeed())
			if tc.point == removalLost {
				startElector(t, users["bob"], "bob", ns, "job", "bob", j)
				waitQueued(g, ns, "job", "bob")
			}
			crash.armed.Store(true)

			g.Eventually(crash.died, recoveryBound(l, 5*time.Second)).Should(BeClosed(), "the crash point was never reached")
			kill(t, first)
			crashed := getLease(g, ns, "job")
			switch tc.point {
			case grantRequestLost:
				// The crash window: expired in spec, still granted to alice in status.
				g.Expect(crashed.Status.HolderIdentity).To(Equal("alice"))
				g.Expect(crashed.Status.FencingToken).To(Equal(tokA))
				g.Expect(crashed.Spec.Requests).To(HaveLen(1))
				g.Expect(crashed.Annotations).To(HaveKeyWithValue(coordv1alpha1.ExpiredAnnotation, "alice/"+itoa(tokA)))
			case grantResponseLost, removalLost:
				g.Expect(crashed.Status.HolderIdentity).To(Equal("bob"))
				g.Expect(crashed.Status.FencingToken).To(BeNumerically(">", tokA))
			}
			if tc.point == removalLost {
				g.Expect(slices.ContainsFunc(crashed.Spec.Requests, func(r coordv1alpha1.LeaseRequest) bool { return r.HolderIdentity == "alice" })).
					To(BeTrue(), "the removal was lost: alice's expired request is still queued")
			}

			restartedAt := time.Now()
			startController(t, controllerOptions{})
			bound := recoveryBound(l, 4*time.Second)
			g.Eventually(j.Len, bound, 10*time.Millisecond).Should(Equal(1), "bob was never granted")
			bobT := j.Snapshot()[0]
			g.Expect(bobT.Identity).To(Equal("bob"))
			g.Expect(bobT.Token).To(BeNumerically(">", tokA))
			t.Logf("takeover %v after alice's grant, %v after the restart (bound %v)", bobT.Start.Sub(grantedA).Round(time.Millisecond), bobT.Start.Sub(restartedAt).Round(time.Millisecond), bound)
			g.Expect(bobT.Start.Sub(grantedA)).To(BeNumerically("<=", bound), "takeover slower than L + allowance + restart slack")
			if tc.point == grantRequestLost {
				g.Expect(getLease(g, ns, "job").Status.AcquireTime.Time).To(BeTemporally(">=", restartedAt.Truncate(time.Microsecond)),
					"the grant is the new controller's")
			}
			// The new controller keeps bob's tenure alive: it acknowledges his renewals
			// and finishes the removal of alice's request.
			seq := holderRenewSequence(getLease(g, ns, "job"))
			g.Eventually(func() int64 { return holderRenewSequence(getLease(g, ns, "job")) }, 5*time.Second, 50*time.Millisecond).Should(BeNumerically(">", seq))
			g.Eventually(func() []string { return queued(ns, "job") }, 5*time.Second, 50*time.Millisecond).Should(Equal([]string{"bob"}))
			final := getLease(g, ns, "job")
			g.Expect(final.Status.HolderIdentity).To(Equal("bob"))
			g.Expect(final.Status.FencingToken).To(Equal(bobT.Token))
			g.Expect(final.Status.PreviousHolder).NotTo(BeNil())
			g.Expect(final.Status.PreviousHolder.HolderIdentity).To(Equal("alice"))
			g.Expect(final.Status.PreviousHolder.FencingToken).To(Equal(tokA))
			g.Expect(final.Status.PreviousHolder.Reason).To(Equal(coordv1alpha1.EndReasonSuperseded))

			g.Expect(writeWidget(suiteCtx, users["bob"], ns, "w", "job", bobT.Token, "bob")).To(Succeed())
			expectStale(g, writeWidget(suiteCtx, users["alice"], ns, "w", "job", tokA, "alice-again"), "alice's write with her expired token")
			mon.check(g)
		})
	}
}

// Fault 4: the operator's leader dies (no release of its leader-election
// Lease) with a takeover or a hand-over pending. The standby is elected once
// the Lease expires and completes it; tokens increase. Holders of every
// renewal kind (a namespace each) live through one fail-over, each checked
// in a subtest of its own, in parallel.
func TestFault4OperatorFailover(t *testing.T) {
	const l = 2 * time.Second
	for _, tc := range []struct {
		name     string
		takeover bool
	}{
		{"pending takeover of a silent holder", true},
		{"pending hand-over after a release", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			le := controllerOptions{leaderElection: true}
			leader := startController(t, le)
			// A leader of an earlier test may still hold the Lease until it expires.
			g.Eventually(leader.Elected(), 10*time.Second).Should(BeClosed())
			standby := startController(t, le)
			g.Consistently(standby.Elected(), time.Second).ShouldNot(BeClosed(), "two leaders")

			type holding struct {
				ns   string
				mon  *monitor
				j    *testenv.Journal
				a    *runningElector
				tokA int64
			}
			held := map[testenv.Renewal]*holding{}
			silent := &fault.Gate{}
			t.Cleanup(silent.Open)
			for _, r := range testenv.Renewals {
				h := &holding{ns: newNamespace(t), j: &testenv.Journal{}}
				newLease(g, h.ns, "job", 2)
				h.mon = startMonitor(t, h.ns)
				h.a, h.tokA = holdWithBobQueued(t, g, h.ns, "job", r, wrappedClient(t, "alice", silent.Stall), users["alice"], h.j)
				held[r] = h
			}

			var bound time.Duration
			if tc.takeover {
				silent.Close() // alice stops renewing ...
			}
			kill(t, leader) // ... and the operator's leader dies with it
			killedAt := time.Now()
			if tc.takeover {
				// The standby has no memory of alice's renewals: it counts L from its
				// own first observation, after its election.
				bound = leLeaseDuration + leRetryPeriod + recoveryBound(l, 2*time.Second)
			} else {
				for _, r := range testenv.Renewals {
					g.Expect(held[r].a.Release(suiteCtx)).To(Succeed())
				}
				bound = leLeaseDuration + leRetryPeriod + 2*time.Second
			}
			g.Eventually(standby.Elected(), leLeaseDuration+leRetryPeriod+3*time.Second).Should(BeClosed(), "the standby was never elected")
			for _, r := range testenv.Renewals {
				h := held[r]
				t.Run(string(r), func(t *testing.T) {
					t.Parallel()
					g := NewWithT(t)
					gs := bobGranted(t, g, h.j, "the leader died", killedAt, bound, "fail-over slower than the leader-election lease + L + allowance + slack")
					lease := getLease(g, h.ns, "job")
					g.Expect(lease.Status.HolderIdentity).To(Equal("bob"))
					if tc.takeover {
						g.Expect(heldReason(lease)).To(Equal(coordv1alpha1.ReasonTakenOver))
					} else {
						g.Expect(heldReason(lease)).To(Equal(coordv1alpha1.ReasonHandedOver))
					}
					g.Expect(writeWidget(suiteCtx, users["bob"], h.ns, "w", "job", gs[1].Token, "bob")).To(Succeed())
					expectStale(g, writeWidget(suiteCtx, users["alice"], h.ns, "w", "job", h.tokA, "alice-again"), "alice's write with her old token")
					h.mon.check(g)
				})
			}
		})
	}
}

// heldReason returns the reason of the lease's Held condition.
func heldReason(l *coordv1alpha1.FencedLease) string {
	for _, c := range l.Status.Conditions {
		if c.Type == coordv1alpha1.ConditionHeld {
			return c.Reason
		}
	}
	return ""
}

// restartScenario runs one control-plane restart (stop, stay down at least
// 3 s, start) while alice holds three leases and bob waits on each, in a
// namespace of each renewal kind of renewals (both renew by it; alice's
// "dead" process has a session of its own):
//   - "dead" (2 s): alice's process stalls with the outage and never comes
//     back; bob must take over within L + allowance + slack of the restart;
//   - "either" (2 s): alice lives on; she keeps her token if her renewal after
//     the restart beats the controller's expiry, otherwise bob takes over with
//     a larger token;
//   - "long" (30 s, longer than the outage): alice keeps it with her token.
//
// Stale writes are refused throughout. Each renewal kind is checked in a
// subtest of its own, in parallel.
func restartScenario(t *testing.T, what string, renewals []testenv.Renewal, stop, start func() error, persisted func(g Gomega, ns string, tokens map[string]int64)) {
	g := NewWithT(t)
	// client-go backs its watches off for up to a minute after an outage, and
	// keeps that backoff for two minutes: later tests get operator webhooks
	// whose cache starts afresh.
	t.Cleanup(func() { restartWebhooks(t) })
	startController(t, controllerOptions{})
	leases := []string{"dead", "either", "long"}
	type holdings struct {
		ns       string
		mon      *monitor
		journals map[string]*testenv.Journal
		tokens   map[string]int64
		markLong string
	}
	kinds := map[testenv.Renewal]*holdings{}
	stall := &fault.Gate{}
	t.Cleanup(stall.Open)
	stalled := wrappedClient(t, "alice", stall.Stall)
	for _, r := range renewals {
		h := &holdings{ns: newNamespace(t), journals: map[string]*testenv.Journal{}, tokens: map[string]int64{}}
		kinds[r] = h
		ns := h.ns
		h.mon = startMonitor(t, ns)
		alive, dead := r.Process(users["alice"], ns, "alice-session", "alice"), r.Process(stalled, ns, "alice-dead-session", "alice")
		bob := r.Process(users["bob"], ns, "bob-session", "bob")
		for _, name := range leases {
			newLease(g, ns, name, map[bool]int32{true: 30, false: 2}[name == "long"])
			h.journals[name] = &testenv.Journal{}
			cl, hb := users["alice"], alive
			if name == "dead" {
				cl, hb = stalled, dead
			}
			startRenewingElector(t, cl, "alice", ns, name, "alice", hb, h.journals[name])
		}
		for _, name := range leases {
			g.Eventually(h.journals[name].Len, 10*time.Second, 10*time.Millisecond).Should(Equal(1))
			h.tokens[name] = h.journals[name].Snapshot()[0].Token
			g.Eventually(func() error {
				return createWidget(users["alice"], ns, "w-"+name, name, h.tokens[name], "alice")
			}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
			startRenewingElector(t, users["bob"], "bob", ns, name, "bob", bob, h.journals[name])
			waitQueued(g, ns, name, "bob")
		}
		h.markLong = renewalMark(ns, "long")
	}

	stoppedAt := time.Now()
	stall.Close()
	g.Expect(stop()).To(Succeed(), "stopping %s", what)
	stopTook := time.Since(stoppedAt)
	time.Sleep(time.Until(stoppedAt.Add(3 * time.Second)))
	startAt := time.Now()
	g.Expect(start()).To(Succeed(), "starting %s", what)
	upAt := time.Now()
	downtime := upAt.Sub(stoppedAt)
	t.Logf("%s: stop took %v, start took %v, down for %v", what, stopTook.Round(time.Millisecond), upAt.Sub(startAt).Round(time.Millisecond), downtime.Round(time.Millisecond))
	if persisted != nil {
		for _, r := range renewals {
			persisted(g, kinds[r].ns, kinds[r].tokens)
		}
	}

	for _, r := range renewals {
		h := kinds[r]
		t.Run(string(r), func(t *testing.T) {
			t.Parallel()
			checkRestart(t, what, upAt, downtime, h.ns, h.mon, h.journals, h.tokens, h.markLong)
		})
	}
}

// checkRestart checks one namespace of restartScenario after the restart
// (up again at upAt, after downtime): the leases' journals, alice's tokens
// and the renewal mark of "long" before the outage.
func checkRestart(t *testing.T, what string, upAt time.Time, downtime time.Duration, ns string, mon *monitor, journals map[string]*testenv.Journal, tokens map[string]int64, markLong string) {
	g := NewWithT(t)
	const lShort, lLong = 2 * time.Second, 30 * time.Second
	// "dead": bob takes over within the bound, counted from the restart.
	bound := recoveryBound(lShort, 5*time.Second)
	jd := journals["dead"]
	g.Eventually(jd.Len, bound+30*time.Second, 10*time.Millisecond).Should(BeNumerically(">=", 2), "bob was never granted the lease of the dead holder")
	gs := jd.Snapshot()
	g.Expect(gs[1].Identity).To(Equal("bob"))
	takeover := gs[1].Start.Sub(upAt)
	t.Logf("%s: takeover %v after the restart (bound %v)", what, takeover.Round(time.Millisecond), bound)
	// After bob's takeover only bob's tenure, which he may lead again with
	// the same token after his local deadline passed (renewals are slow
	// right after the restart).
	expectTenures(g, jd.Snapshot())
	for _, gr := range jd.Snapshot()[1:] {
		g.Expect(gr.Identity == "bob" && gr.Token == gs[1].Token).To(BeTrue(), "the dead holder's lease went through another tenure after bob's takeover: %+v", jd.Snapshot())
	}
	// The new holder leads (its helper says so): its writes must be accepted.
	if err := retryFor(bound, func() error {
		return writeWidget(suiteCtx, users["bob"], ns, "w-dead", "dead", gs[1].Token, "bob")
	}); err != nil {
		t.Errorf("recovery: bob leads with token %d, yet his write was still refused %v later: %v", gs[1].Token, bound, err)
	}
	expectStale(g, writeWidget(suiteCtx, users["alice"], ns, "w-dead", "dead", tokens["dead"], "alice-again"), "the dead holder's write with its old token")

	// "either": whoever holds it now acknowledged its grant; one holder at a
	// time; a token is only ever reused by the same holder renewing in time.
	je := journals["either"]
	g.Eventually(func() error {
		h, tok := holderOf(ns, "either")
		ge := je.Snapshot()
		if last := ge[len(ge)-1]; h != "" && last.Identity == h && last.Token == tok && last.Stop.IsZero() {
			return nil
		}
		return fmt.Errorf("lease held by %q with token %d; tenures %+v", h, tok, ge)
	}, bound+30*time.Second, 50*time.Millisecond).Should(Succeed())
	ge := je.Snapshot()
	expectTenures(g, ge)
	last := ge[len(ge)-1]
	t.Logf("%s: lease \"either\" is held by %s with token %d (alice's was %d)", what, last.Identity, last.Token, tokens["either"])
	g.Expect(last.Token).To(BeNumerically(">=", tokens["either"]))
	g.Eventually(func() error {
		return writeWidget(suiteCtx, users[last.Identity], ns, "w-either", "either", last.Token, last.Identity)
	}, 5*time.Second, 50*time.Millisecond).Should(Succeed())
	if last.Token > tokens["either"] {
		expectStale(g, writeWidget(suiteCtx, users["alice"], ns, "w-either", "either", tokens["either"], "alice-again"), "a write with alice's expired token")
	}

	// "long": the outage was shorter than alice's deadline; she renews again and
	// keeps her token, and bob keeps waiting.
	margin, renewEvery := lLong/10, lLong/3
	g.Expect(downtime+renewEvery).To(BeNumerically("<", lLong-margin), "the outage outlasted the long lease: the test cannot check that a holder keeps it")
	g.Eventually(func() string { return renewalMark(ns, "long") }, lLong, 100*time.Millisecond).
		ShouldNot(Or(BeEmpty(), Equal(markLong)), "alice's renewals land again")
	l := getLease(g, ns, "long")
	g.Expect(l.Status.HolderIdentity).To(Equal("alice"))
	g.Expect(l.Status.FencingToken).To(Equal(tokens["long"]))
	jl := journals["long"].Snapshot()
	g.Expect(jl).To(HaveLen(1))
	g.Expect(jl[0].Stop).To(BeZero(), "alice's context on the long lease was cancelled")
	g.Expect(writeWidget(suiteCtx, users["alice"], ns, "w-long", "long", tokens["long"], "alice-2")).To(Succeed(), "alice's token is still current")
	mon.check(g)

	// Recovery, checked last so that every safety check above runs first.
	if takeover > bound {
		t.Errorf("recovery: bob took the dead holder's lease over %v after %s was back, more than L + allowance + slack (%v)", takeover, what, bound)
	}
	// Bob took "dead" over from alice's tenure, with nothing in between: no
	// tenure was granted that its holder had no chance to acknowledge.
	dead := getLease(g, ns, "dead")
	if p := dead.Status.PreviousHolder; dead.Status.FencingToken != gs[1].Token || p == nil || p.HolderIdentity != "alice" || p.FencingToken != tokens["dead"] {
		t.Errorf("BUG: bob holds %q with token %d, taken over from %+v, not from alice's token %d: a tenure was granted in between "+
			"and expired before its holder could acknowledge it (the controller stamps a grant with the time it decided it, "+
			"not when the write landed; TestFault9 reproduces it deterministically)", "dead", dead.Status.FencingToken, p, tokens["dead"])
	}
}

// Fault 5: kube-apiserver restarts (same port, same certificates) while a
// holder holds and a waiter waits.
func TestFault5APIServerRestart(t *testing.T) {
	api := cluster.Env.ControlPlane.GetAPIServer()
	port := api.SecureServing.Port
	persisted := func(g Gomega, _ string, _ map[string]int64) {
		g.Expect(api.SecureServing.Port).To(Equal(port), "kube-apiserver came back on another port")
	}
	// Classic holders alone (as before heartbeats: three namespaces through
	// one restart stretched the classic takeover past its bound), then
	// per-lease and session heartbeat holders through a second restart.
	t.Run("classic", func(t *testing.T) {
		restartScenario(t, "kube-apiserver", []testenv.Renewal{testenv.Classic}, api.Stop, api.Start, persisted)
	})
	t.Run("heartbeats", func(t *testing.T) {
		restartScenario(t, "kube-apiserver", []testenv.Renewal{testenv.PerLease, testenv.Session}, api.Stop, api.Start, persisted)
	})
}

// Fault 6: etcd restarts with its data kept while a holder holds and a waiter
// waits: the leases' tokens, holders and generations survive.
func TestFault6EtcdRestartKeepsData(t *testing.T) {
	etcd := cluster.Env.ControlPlane.Etcd
	// Classic holders only: the heartbeat kinds' restart is Fault 5's.
	restartScenario(t, "etcd", []testenv.Renewal{testenv.Classic}, etcd.Stop, etcd.Start, func(g Gomega, ns string, tokens map[string]int64) {
		g.Expect(etcd.DataDir).To(Equal(etcdDir))
		// Read straight after the restart: nothing was lost.
		for name, tok := range tokens {
			g.Eventually(func() int64 { _, t := holderOf(ns, name); return t }, 30*time.Second, 50*time.Millisecond).
				Should(BeNumerically(">=", tok), "lease %s lost its token", name)
		}
		h, tok := holderOf(ns, "long")
		g.Expect(h).To(Equal("alice"))
		g.Expect(tok).To(Equal(tokens["long"]))
	})
}

// Fault 7: the FencedLease is deleted and created again while a holder holds
// and a waiter waits. The epoch finalizer records the highest token in the
// epoch store first; the new incarnation's tokens exceed every earlier one.
func TestFault7LeaseDeletedAndRecreated(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	startController(t, controllerOptions{})
	const l = 2 * time.Second
	newLease(g, ns, "phoenix", 2)
	// Raise the generation well above what a new incarnation starts with, so
	// that only the epoch store can keep the new tokens above the old ones.
	for i := range 11 {
		g.Eventually(func() error {
			lease := getLease(g, ns, "phoenix")
			lease.Spec.LeaseDurationSeconds = int32(2 + (i+1)%2) // ends at 2
			return cluster.Admin.Update(suiteCtx, lease)
		}, 5*time.Second, 20*time.Millisecond).Should(Succeed())
	}
	mon := startMonitor(t, ns)

	j := &testenv.Journal{}
	_, tokA := holdWithBobQueued(t, g, ns, "phoenix", testenv.Classic, users["alice"], users["alice"], j)
	g.Expect(tokA).To(BeNumerically(">", 10))
	highest := getLease(g, ns, "phoenix").Status.FencingToken

	g.Expect(cluster.Admin.Delete(suiteCtx, getLease(g, ns, "phoenix"))).To(Succeed())
	g.Eventually(func() bool {
		return isNotFound(cluster.Admin.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: "phoenix"}, &coordv1alpha1.FencedLease{}))
	}, 10*time.Second, 20*time.Millisecond).Should(BeTrue(), "the epoch finalizer is removed once the token is recorded")
	var epochs corev1.ConfigMap
	g.Expect(cluster.Admin.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: coordv1alpha1.EpochShardName("phoenix")}, &epochs)).To(Succeed())
	g.Expect(fencedlease.EpochShardEntries(&epochs)).To(HaveKeyWithValue(fencedlease.EpochKey("phoenix"), highest))
	// Alice's tenure ends with the lease that granted it.
	g.Eventually(func() time.Time { return j.Snapshot()[0].Stop }, l, 10*time.Millisecond).ShouldNot(BeZero())

	newLease(g, ns, "phoenix", 2)
	recreatedAt := time.Now()
	bound := recoveryBound(l, 3*time.Second)
	g.Eventually(j.Len, bound, 10*time.Millisecond).Should(Equal(2), "nobody was granted the recreated lease")
	gs := j.Snapshot()
	t.Logf("%s granted token %d %v after the lease was recreated (tokens before: %d)", gs[1].Identity, gs[1].Token, gs[1].Start.Sub(recreatedAt).Round(time.Millisecond), highest)
	g.Expect(gs[1].Start.Sub(recreatedAt)).To(BeNumerically("<=", bound))
	g.Expect(gs[1].Token).To(BeNumerically(">", highest), "the new incarnation's first token does not exceed every earlier one")
	g.Expect(getLease(g, ns, "phoenix").Status.TokenBase).To(BeNumerically(">=", highest))
	expectIncreasing(g, j)

	cur := gs[1]
	g.Expect(writeWidget(suiteCtx, users[cur.Identity], ns, "w", "phoenix", cur.Token, cur.Identity)).To(Succeed())
	expectStale(g, writeWidget(suiteCtx, users["alice"], ns, "w", "phoenix", tokA, "alice-old"), "a write with the first incarnation's token")
	_, tok := widgetState(g, ns, "w")
	g.Expect(tok).To(Equal(cur.Token))
	mon.check(g)
}

// Fault 8: etcd is restored from a snapshot taken before some grants. The
// restore rolls back the leases' generations, status and the epoch store
// together, so, without the documented recovery, tokens issued after the
// backup are issued again (the hazard docs/design.md describes). With the
// recovery (raise spec.minFencingToken above every token issued before the
// disaster), every new token exceeds them and a holder from before the
// disaster is refused.
func TestFault8EtcdSnapshotRestore(t *testing.T) {
	g := NewWithT(t)
	t.Cleanup(func() { restartWebhooks(t) })
	ns := newNamespace(t)
	operator := startController(t, controllerOptions{})
	newLease(g, ns, "hazard", 2)
	newLease(g, ns, "recovered", 2)

	// cycle issues n grants on lease through one elector (grant, release, grant
	// ...), writes the Widget guarded by it with each token, and withdraws, so
	// that the lease is idle afterwards. It returns the tokens in order.
	cycle := func(lease string, n int) []int64 {
		j := &testenv.Journal{}
		e := startElector(t, users["alice"], "alice", ns, lease, "alice", j)
		var tokens []int64
		for i := range n {
			g.Eventually(j.Len, 10*time.Second, 10*time.Millisecond).Should(Equal(i + 1))
			tok := j.Snapshot()[i].Token
			tokens = append(tokens, tok)
			if i == 0 && !widgetExists(ns, "w-"+lease) {
				g.Expect(createWidget(users["alice"], ns, "w-"+lease, lease, tok, "alice")).To(Succeed())
			} else {
				g.Eventually(func() error { return writeWidget(suiteCtx, users["alice"], ns, "w-"+lease, lease, tok, "alice") }, 10*time.Second, 50*time.Millisecond).Should(Succeed())
			}
			if i < n-1 {
				g.Expect(e.Release(suiteCtx)).To(Succeed())
			}
		}
		e.stop()
		g.Eventually(func() []string { return queued(ns, lease) }, 10*time.Second, 20*time.Millisecond).Should(BeEmpty())
		g.Eventually(func() string { h, _ := holderOf(ns, lease); return h }, 10*time.Second, 20*time.Millisecond).Should(BeEmpty())
		return tokens
	}
	api, etcd := cluster.Env.ControlPlane.GetAPIServer(), cluster.Env.ControlPlane.Etcd
	backup := t.TempDir()

	before := map[string][]int64{"hazard": cycle("hazard", 1), "recovered": cycle("recovered", 1)}
	// The backup: a copy of etcd's data directory taken while it is stopped.
	g.Expect(api.Stop()).To(Succeed())
	g.Expect(etcd.Stop()).To(Succeed())
	g.Expect(copyDir(etcdDir, backup)).To(Succeed())
	g.Expect(etcd.Start()).To(Succeed())
	g.Expect(api.Start()).To(Succeed())

	after := map[string][]int64{"hazard": cycle("hazard", 3), "recovered": cycle("recovered", 3)}
	highest := map[string]int64{}
	for lease, toks := range after {
		highest[lease] = slices.Max(toks)
		g.Expect(highest[lease]).To(BeNumerically(">", slices.Max(before[lease])))
		_, tok := widgetState(g, ns, "w-"+lease)
		g.Expect(tok).To(Equal(highest[lease]), "the Widget accepted the highest token before the disaster")
	}
	t.Logf("tokens before the backup %v, after it (to be lost) %v", before, after)

	// The disaster and the restore: etcd comes back with the backup's data;
	// kube-apiserver and the operator restart (their caches are ahead of the
	// restored store).
	kill(t, operator)
	g.Expect(api.Stop()).To(Succeed())
	g.Expect(etcd.Stop()).To(Succeed())
	g.Expect(os.RemoveAll(etcdDir)).To(Succeed())
	g.Expect(copyDir(backup, etcdDir)).To(Succeed())
	g.Expect(etcd.Start()).To(Succeed())
	g.Expect(api.Start()).To(Succeed())
	restartWebhooks(t)
	for lease, toks := range before {
		g.Eventually(func() int64 { _, tok := holderOf(ns, lease); return tok }, 30*time.Second, 50*time.Millisecond).
			Should(Equal(slices.Max(toks)), "lease %s is back at its state at the backup", lease)
		_, tok := widgetState(g, ns, "w-"+lease)
		g.Expect(tok).To(Equal(slices.Max(toks)), "the Widget is back at its state at the backup")
	}

	// The documented recovery, on "recovered" only: raise minFencingToken above
	// any token issued before the disaster (current token plus 1,000,000).
	rec := getLease(g, ns, "recovered")
	floor := rec.Status.FencingToken + 1_000_000
	rec.Spec.MinFencingToken = floor
	g.Expect(cluster.Admin.Update(suiteCtx, rec)).To(Succeed())
	startController(t, controllerOptions{})

	hazard := cycle("hazard", 1)[0]
	recovered := cycle("recovered", 1)[0]
	t.Logf("after the restore: hazard lease issued %d (issued before the restore: %v); recovered lease issued %d", hazard, after["hazard"], recovered)

	// Without the recovery: a token issued before the restore is issued again.
	g.Expect(hazard).To(BeNumerically(">", slices.Max(before["hazard"])), "tokens still increase over the restored state")
	g.Expect(hazard).To(BeNumerically("<=", highest["hazard"]),
		"the hazard of docs/design.md did not show: the lease issued %d after the restore, above every token issued before it (%v); update the design", hazard, after["hazard"])

	// With the recovery: above every token ever issued, and a holder from before
	// the disaster, still holding the highest token, is refused.
	g.Expect(recovered).To(BeNumerically(">", floor))
	g.Expect(recovered).To(BeNumerically(">", highest["recovered"]))
	for _, tok := range append(before["recovered"], after["recovered"]...) {
		expectStale(g, writeWidget(suiteCtx, users["bob"], ns, "w-recovered", "recovered", tok, "zombie"),
			"a write with token "+itoa(tok)+" issued before the disaster")
	}
	_, tok := widgetState(g, ns, "w-recovered")
	g.Expect(tok).To(Equal(recovered))
}

// Fault 9 (found by faults 5 and 6, here made deterministic): the API server
// commits the status write that expires a silent holder and grants the waiter
// later than the lease duration (etcd or the API server is slow, or just back).
// The waiter must get a whole tenure from that grant: it is not expired before
// it could acknowledge, and the lease does not pass through other grants first.
func TestFault9GrantWriteCommittedLate(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	const l = 2 * time.Second
	newLease(g, ns, "job", 2)
	mon := startMonitor(t, ns)
	slow := &delayingTransport{
		statusPath: "/apis/coordination.kubefence.io/v1alpha1/namespaces/" + ns + "/fencedleases/job/status",
		delay:      l + time.Second, sentAt: make(chan time.Time, 1),
	}
	startController(t, controllerOptions{wrap: slow.wrap})
	joinRaw(g, "alice", ns, "job", "alice") // never renews
	g.Eventually(func() string { h, _ := holderOf(ns, "job"); return h }, 10*time.Second, 10*time.Millisecond).Should(Equal("alice"))
	tokA := getLease(g, ns, "job").Status.FencingToken
	g.Expect(createWidget(users["alice"], ns, "w", "job", tokA, "alice")).To(Succeed())
	j := &testenv.Journal{}
	startElector(t, wrappedClient(t, "bob", slowWrites(200*time.Millisecond)), "bob", ns, "job", "bob", j)
	g.Eventually(func() []coordv1alpha1.WaitingRequest { return getLease(g, ns, "job").Status.Waiting }, 10*time.Second, 10*time.Millisecond).
		Should(ContainElement(HaveField("HolderIdentity", "bob")))
	slow.armed.Store(true) // the next status write is alice's expiry and bob's grant

	var sent time.Time
	g.Eventually(slow.sentAt, recoveryBound(l, 5*time.Second)).Should(Receive(&sent))
	g.Eventually(j.Len, 15*time.Second, 10*time.Millisecond).Should(BeNumerically(">=", 1), "bob was never granted")
	time.Sleep(l) // let any further tenure show
	gs := j.Snapshot()
	expectIncreasing(g, j)
	g.Expect(gs[0].Identity).To(Equal("bob"))
	g.Expect(gs[0].Token).To(BeNumerically(">", tokA))
	g.Expect(writeWidget(suiteCtx, users["bob"], ns, "w", "job", gs[len(gs)-1].Token, "bob")).To(Succeed())
	expectStale(g, writeWidget(suiteCtx, users["alice"], ns, "w", "job", tokA, "alice-again"), "alice's write with her expired token")
	mon.check(g)

	lease := getLease(g, ns, "job")
	g.Expect(lease.Status.HolderIdentity).To(Equal("bob"))
	p := lease.Status.PreviousHolder
	g.Expect(p).NotTo(BeNil())
	t.Logf("bob holds token %d, taken over from %s's token %d; bob's tenures %+v", lease.Status.FencingToken, p.HolderIdentity, p.FencingToken, gs)
	g.Expect(p.HolderIdentity == "alice" && p.FencingToken == tokA).To(BeTrue(),
		"BUG: bob holds token %d, taken over from %s's token %d instead of alice's %d: the grant committed %v late was expired at once "+
			"(it was stamped with the time the controller decided it), and the lease passed through another grant first",
		lease.Status.FencingToken, p.HolderIdentity, p.FencingToken, tokA, slow.delay)
	g.Expect(gs).To(HaveLen(1), "bob's tenure from the late grant was not the one he kept")
}

func widgetExists(ns, name string) bool {
	return cluster.Admin.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: name}, testenv.Widget(ns, name)) == nil
}

// copyDir copies the directory tree src into dst (created if missing).
func copyDir(src, dst string) error {
	return filepath.Walk(src, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if info.IsDir() {
			return os.MkdirAll(target, info.Mode().Perm()|0o700)
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, info.Mode().Perm())
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			_ = out.Close()
			return err
		}
		return out.Close()
	})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// retryFor calls f until it returns nil or d has passed, and returns its last
// error.
func retryFor(d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// holderRenewSequence is the renewSequence of the holder's request: the
// holder's renewals, which the controller tracks in memory (a stamped renewal
// is not acknowledged in status).
func holderRenewSequence(l *coordv1alpha1.FencedLease) int64 {
	if i := coordv1alpha1.RequestIndex(l.Spec.Requests, l.Status.HolderIdentity); i >= 0 {
		return l.Spec.Requests[i].RenewSequence
	}
	return -1
}

// expectTenures asserts that the tenures gs follow one another without
// overlap, their tokens increasing, a token only ever led again by the same
// holder (it stopped at its local deadline, then renewed the same tenure in
// time).
func expectTenures(g Gomega, gs []testenv.Grant) {
	for i := 1; i < len(gs); i++ {
		g.Expect(gs[i-1].Stop).NotTo(BeZero())
		g.Expect(gs[i-1].Stop.Before(gs[i].Start)).To(BeTrue(), "tenures overlap: %+v", gs)
		if gs[i].Identity == gs[i-1].Identity && gs[i].Token == gs[i-1].Token {
			continue
		}
		g.Expect(gs[i].Token).To(BeNumerically(">", gs[i-1].Token), "tenures %+v", gs)
	}
}

// renewalMark is what the holder's last renewal left on lease ns/name: its
// request's renewSequence or, renewing by heartbeat, its heartbeat Lease's
// renewTime ("" when unreadable).
func renewalMark(ns, name string) string {
	var l coordv1alpha1.FencedLease
	if err := cluster.Admin.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: name}, &l); err != nil {
		return ""
	}
	i := coordv1alpha1.RequestIndex(l.Spec.Requests, l.Status.HolderIdentity)
	if i < 0 {
		return ""
	}
	req := l.Spec.Requests[i]
	if req.Heartbeat == "" {
		return "renewSequence " + itoa(req.RenewSequence)
	}
	var hb coordinationv1.Lease
	if err := cluster.Admin.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: req.Heartbeat}, &hb); err != nil || hb.Spec.RenewTime == nil {
		return ""
	}
	return "heartbeat " + req.Heartbeat + " renewed " + hb.Spec.RenewTime.Format(time.RFC3339Nano)
}
