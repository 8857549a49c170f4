package example_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/tools/leaderelection"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence/resourcelock"
	"github.com/kubefence/kubefence/test/testenv"
)

// noToken is the token a tenure is recorded with when the lock had none
// when OnStartedLeading ran.
const noToken = -1

// candidate is one leaderelection.RunOrDie over a FencedLease lock.
type candidate struct {
	lock   *resourcelock.Lock
	pauser *pauser
	cancel context.CancelFunc
	done   chan struct{}
}

// runCandidate runs user's candidate. With releaseOnCancel, note that client-go
// cancels the OnStartedLeading context only after its release attempt, which
// can take another RenewDeadline when the API server does not answer.
func runCandidate(user, ns, lease string, t *testenv.Journal, releaseOnCancel bool) *candidate {
	p := &pauser{}
	lock, err := resourcelock.New(resourcelock.Config{Client: userClient(user, p), Namespace: ns, Name: lease, Identity: user})
	Expect(err).NotTo(HaveOccurred())
	ctx, cancelRun := context.WithCancel(suiteCtx)
	c := &candidate{lock: lock, pauser: p, cancel: cancelRun, done: make(chan struct{})}
	go func() {
		defer GinkgoRecover()
		defer close(c.done)
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock: lock,
			// Advisory: the FencedLease's 3 s decide expiry. RetryPeriod*1.2 +
			// RenewDeadline stays below it, so the elector gives up first.
			LeaseDuration:   3 * time.Second,
			RenewDeadline:   2 * time.Second,
			RetryPeriod:     250 * time.Millisecond,
			ReleaseOnCancel: releaseOnCancel,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					tok, ok := lock.Token()
					if !ok {
						tok = noToken
					}
					i := t.Started(user, tok)
					<-ctx.Done()
					t.Stopped(i)
				},
				OnStoppedLeading: func() {},
			},
		})
	}()
	DeferCleanup(func() {
		p.resume()
		cancelRun()
		Eventually(c.done, 10*time.Second).Should(BeClosed())
	})
	return c
}

var _ = Describe("client-go leader election over a FencedLease (pkg/fence/resourcelock)", func() {
	It("runs OnStartedLeading only for the granted candidate, and takes over with a larger token", func() {
		ns := newNamespace()
		newLease(ns, "clientgo", 3)
		t := &testenv.Journal{}
		a := runCandidate("alice", ns, "clientgo", t, false)
		eventually(t.Identities, 15*time.Second).Should(Equal([]string{"alice"}))
		first := t.Snapshot()[0]
		Expect(first.Token).NotTo(Equal(int64(noToken)), "the token is there when OnStartedLeading runs")
		h, tok := holderOf(ns, "clientgo")
		Expect(h).To(Equal("alice"))
		Expect(first.Token).To(Equal(tok), "the token is the server's")

		b := runCandidate("bob", ns, "clientgo", t, true)
		Consistently(t.Identities, 3*time.Second, 50*time.Millisecond).Should(Equal([]string{"alice"}),
			"bob's OnStartedLeading does not run while alice holds the lease")
		_, tok = holderOf(ns, "clientgo")
		Expect(tok).To(Equal(first.Token), "renewals keep the token")
		_, bobLeads := b.lock.Token()
		Expect(bobLeads).To(BeFalse())

		rec, _, err := b.lock.Get(suiteCtx)
		Expect(err).NotTo(HaveOccurred())
		l := getLease(ns, "clientgo")
		Expect(rec.HolderIdentity).To(Equal("alice"))
		Expect(rec.LeaseDurationSeconds).To(Equal(3))
		Expect(rec.AcquireTime.Time).To(BeTemporally("==", l.Status.AcquireTime.Time), "the controller's clock, not a client's")
		Expect(rec.LeaderTransitions).To(Equal(int(l.Status.LeaseTransitions)))

		By("alice stalls: her renewals hang")
		a.pauser.pause()
		eventually(t.Identities, 20*time.Second).Should(Equal([]string{"alice", "bob"}))
		g := t.Snapshot()
		Expect(g[1].Token).NotTo(Equal(int64(noToken)))
		Expect(g[1].Token).To(BeNumerically(">", g[0].Token), "the takeover has a larger token")
		Expect(g[0].Stop).NotTo(BeZero(), "alice's elector gave up")
		Expect(g[0].Stop.Before(g[1].Start)).To(BeTrue(), "alice stopped (%v) before bob started (%v)", g[0].Stop, g[1].Start)
		_, aliceLeads := a.lock.Token()
		Expect(aliceLeads).To(BeFalse())
		l = getLease(ns, "clientgo")
		Expect(l.Status.HolderIdentity).To(Equal("bob"))
		Expect(l.Status.FencingToken).To(Equal(g[1].Token))

		By("bob's elector releases on cancel: the request is withdrawn")
		cancelAt := time.Now()
		b.cancel()
		Eventually(b.done, 10*time.Second).Should(BeClosed())
		// alice's client-go loop may queue her again meanwhile and be granted
		// the next tenure at once (a hand-over), so bob's end is read from the
		// first status that no longer names him, and only his request must go.
		var end *coordv1alpha1.PreviousHolder
		eventually(func() string {
			l := getLease(ns, "clientgo")
			if l.Status.HolderIdentity != "bob" {
				end = l.Status.PreviousHolder
			}
			return l.Status.HolderIdentity
		}, 10*time.Second).ShouldNot(Equal("bob"))
		Expect(end).NotTo(BeNil())
		Expect(end.HolderIdentity).To(Equal("bob"), "the first status after bob's tenure describes bob's end")
		eventually(func() int {
			return coordv1alpha1.RequestIndex(getLease(ns, "clientgo").Spec.Requests, "bob")
		}, 10*time.Second).Should(BeNumerically("<", 0), "bob's request is withdrawn")
		if bobStop := t.Snapshot()[1].Stop; !bobStop.IsZero() && bobStop.Before(cancelAt) {
			// On a starved machine bob's renewals (a 3 s lease) can lapse
			// before the cancel: his elector gave up first, and the
			// controller expired the tenure; there was nothing to release.
			GinkgoWriter.Printf("bob stopped leading %v before the cancel; the tenure ended %s\n", cancelAt.Sub(bobStop), end.Reason)
			Expect(end.Reason).To(BeElementOf(coordv1alpha1.EndReasonReleased, coordv1alpha1.EndReasonExpired))
		} else {
			Expect(end.Reason).To(Equal(coordv1alpha1.EndReasonReleased))
		}
	})
})
