package operator_test

import (
	"context"
	"fmt"
	"k8s.io/apimachinery/pkg/api/equality"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/fencedlease"
	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/test/testenv"
	"github.com/kubefence/kubefence/test/testenv/fault"
)

var _ = Describe("FencedLease lifecycle", func() {
	var ns string
	var ctrlProc *controllerProcess

	BeforeEach(func() {
		ns = newNamespace()
		ctrlProc = startController(false)
		DeferCleanup(func() {
			if ctrlProc != nil {
				ctrlProc.stop()
			}
		})
	})

	It("grants in arrival order (FIFO), each grant with a larger token", func() {
		newLease(ns, "fifo", 10, 0)
		j := &testenv.Journal{}
		var electors []*runningElector
		for _, u := range []string{"alice", "bob", "carol"} {
			e := startElector(u, ns, "fifo", u, j)
			DeferCleanup(e.stop)
			waitQueued(ns, "fifo", u)
			electors = append(electors, e)
		}
		for i, want := range []string{"alice", "bob", "carol"} {
			Eventually(j.Identities, 10*time.Second).Should(HaveLen(i + 1))
			Expect(j.Identities()[i]).To(Equal(want))
			Expect(electors[i].Release(suiteCtx)).To(Succeed())
		}
		g := j.Snapshot()
		Expect(g[0].Token).To(BeNumerically("<", g[1].Token))
		Expect(g[1].Token).To(BeNumerically("<", g[2].Token))
	})

	It("keeps the token on renewal (I2) with one API write per renewal", func() {
		counting := &countingClient{WithWatch: users["alice"]}
		_, j, token := aliceLeads(counting, ns, "renew", 1)
		// Every status change the controller writes during the renewals.
		time.Sleep(200 * time.Millisecond) // past the grant's acknowledgement
		w, err := k8sClient.Watch(suiteCtx, &coordv1alpha1.FencedLeaseList{}, client.InNamespace(ns))
		Expect(err).NotTo(HaveOccurred())
		defer w.Stop()
		var statusWrites atomic.Int64
		go func() {
			var last *coordv1alpha1.FencedLeaseStatus
			for ev := range w.ResultChan() {
				l, ok := ev.Object.(*coordv1alpha1.FencedLease)
				if !ok || l.Name != "renew" {
					continue
				}
				if last != nil && !equality.Semantic.DeepEqual(*last, l.Status) {
					statusWrites.Add(1)
				}
				last = l.Status.DeepCopy()
			}
		}()
		before, otherBefore := counting.patches(), counting.writesOtherThanPatch()
		time.Sleep(3 * time.Second) // three lease durations: about nine renewals
		renewals := counting.patches() - before
		// About nine at one every third of the lease; fewer on a loaded machine.
		Expect(renewals).To(BeNumerically(">=", 3))
		// The join is an Update (retried on a conflict with the controller's
		// status write on a loaded machine); renewals are patches only.
		Expect(counting.writesOtherThanPatch()-otherBefore).To(BeZero(), "renewals are patches, never Updates")
		h, tok := holderOf(ns, "renew")
		Expect(h).To(Equal("alice"))
		Expect(tok).To(Equal(token))
		Expect(j.Snapshot()).To(HaveLen(1), "the tenure never broke")
		l := getLease(ns, "renew")
		Expect(l.Spec.Requests[0].RenewSequence).To(BeNumerically(">=", renewals))
		Expect(l.Spec.Requests[0].RenewTime).NotTo(BeNil(), "the helper stamps its renewals")
		// System-wide: the holder's patch is the only write of a renewal; the
		// controller tracks stamped renewals in memory.
		Expect(statusWrites.Load()).To(BeZero(), "the controller wrote status %d times during %d renewals", statusWrites.Load(), renewals)
	})

	It("hands over at once on release", func() {
		a, j, _ := aliceLeads(users["alice"], ns, "handover", 30)
		b := startElector("bob", ns, "handover", "bob", j)
		DeferCleanup(b.stop)
		waitQueued(ns, "handover", "bob")
		released := time.Now()
		Expect(a.Release(suiteCtx)).To(Succeed())
		Eventually(j.Identities, 5*time.Second).Should(Equal([]string{"alice", "bob"}))
		g := j.Snapshot()
		Expect(g[0].Stop).NotTo(BeZero())
		Expect(g[0].Stop.Before(g[1].Start)).To(BeTrue(), "alice stopped before bob started")
		// Far below the 30 s lease: the release, not an expiry, moved the lease.
		Expect(g[1].Start.Sub(released)).To(BeNumerically("<", 5*time.Second))
		l := getLease(ns, "handover")
		Expect(heldCondition(l).Reason).To(Equal(coordv1alpha1.ReasonHandedOver))
		Expect(l.Status.PreviousHolder.Reason).To(Equal(coordv1alpha1.EndReasonReleased))
	})

	It("expires a silent holder on the controller's clock, then grants the next (TakenOver, Superseded)", func() {
		newLease(ns, "expiry", 2, 0)
		joinRaw("alice", ns, "expiry", "alice")
		Eventually(holderName(ns, "expiry"), 10*time.Second).Should(Equal("alice"))
		granted := getLease(ns, "expiry").Status.AcquireTime.Time
		_, tokA := holderOf(ns, "expiry")
		joinRaw("bob", ns, "expiry", "bob")
		Eventually(holderName(ns, "expiry"), 10*time.Second).Should(Equal("bob"))
		l := getLease(ns, "expiry")
		Expect(l.Status.FencingToken).To(BeNumerically(">", tokA))
		Expect(l.Status.AcquireTime.Time.Sub(granted)).To(BeNumerically(">=", 2*time.Second), "not before lease duration")
		Expect(heldCondition(l).Reason).To(Equal(coordv1alpha1.ReasonTakenOver))
		Expect(l.Status.PreviousHolder.HolderIdentity).To(Equal("alice"))
		Expect(l.Status.PreviousHolder.Reason).To(Equal(coordv1alpha1.EndReasonSuperseded))
		// The grant comes first; the expired request is removed after it (bob,
		// who joined without an elector, never acknowledges: L/3 after the grant).
		Eventually(func() []coordv1alpha1.LeaseRequest { return getLease(ns, "expiry").Spec.Requests }, 5*time.Second).
			Should(HaveLen(1), "alice's expired request is removed")
	})

	It("does not lead a tenure again after stepping down on a stale refusal, but once the lease has moved on", func() {
		e, j, token := aliceLeads(users["alice"], ns, "stepdown", 2)
		renewals := func() int64 {
			l := getLease(ns, "stepdown")
			if i := coordv1alpha1.RequestIndex(l.Spec.Requests, "alice"); i >= 0 {
				return l.Spec.Requests[i].RenewSequence
			}
			return -1
		}
		// What a FencedClient does on a stale refusal. The status still names
		// alice with her token (the controller expires her only after L): she
		// must not acknowledge it again (each renewal would push the
		// controller's expiry and grant back; before, she renewed at once and
		// led again, a write every few milliseconds while it lasted).
		e.StepDown()
		Eventually(func() bool { return !j.Snapshot()[0].Stop.IsZero() }, 5*time.Second).Should(BeTrue(), "alice stopped leading")
		before := renewals()
		Consistently(func() bool {
			h, t := holderOf(ns, "stepdown")
			return h != "alice" || t != token || renewals() == before || renewals() == -1
		}, time.Second, 50*time.Millisecond).Should(BeTrue(), "no renewal of the tenure alice stepped down from")
		Expect(j.Len()).To(Equal(1), "alice did not lead token %d again", token)
		// The controller expires her on its clock; she queues again and is
		// granted a new, larger token.
		Eventually(j.Len, 15*time.Second).Should(Equal(2))
		Expect(j.Snapshot()[1].Token).To(BeNumerically(">", token))
	})

	It("says 'expired, nobody waiting' apart from 'superseded'", func() {
		newLease(ns, "lonely", 1, 0)
		joinRaw("alice", ns, "lonely", "alice")
		Eventually(heldReason(ns, "lonely"), 10*time.Second).Should(Equal(coordv1alpha1.ReasonExpired))
		l := getLease(ns, "lonely")
		Expect(l.Status.HolderIdentity).To(BeEmpty())
		Expect(l.Status.PreviousHolder.Reason).To(Equal(coordv1alpha1.EndReasonExpired))
	})

	It("records one Event per tenure change: an expiry and its takeover are one Warning, a release and its hand-over one Event", func() {
		newLease(ns, "events", 2, 0)
		joinRaw("alice", ns, "events", "alice")
		Eventually(holderName(ns, "events"), 10*time.Second).Should(Equal("alice"))
		// alice never renews: she expires and bob takes over in one status
		// write; bob never renews either and expires with nobody waiting.
		joinRaw("bob", ns, "events", "bob")
		Eventually(heldReason(ns, "events"), 15*time.Second).Should(Equal(coordv1alpha1.ReasonExpired))
		// A release handed over in one status write.
		j := &testenv.Journal{}
		carol := startElector("carol", ns, "events", "carol", j)
		DeferCleanup(carol.stop)
		Eventually(j.Identities, 10*time.Second).Should(Equal([]string{"carol"}))
		dave := startElector("dave", ns, "events", "dave", j)
		DeferCleanup(dave.stop)
		waitQueued(ns, "events", "dave")
		Expect(carol.Release(suiteCtx)).To(Succeed())
		Eventually(j.Identities, 10*time.Second).Should(Equal([]string{"carol", "dave"}))

		// Five tenure changes, five Events: none more arrives. carol's grant
		// follows bob's expiry (TakenOver), in a write of its own (Normal).
		want := []string{"Normal Granted", "Warning TakenOver", "Warning Expired", "Normal TakenOver", "Normal HandedOver"}
		Eventually(func() []string { return eventReasons(ns, "events") }, 10*time.Second).Should(Equal(want))
		Consistently(func() []string { return eventReasons(ns, "events") }, 2*time.Second, 200*time.Millisecond).Should(Equal(want))
		notes := eventNotes(ns, "events")
		Expect(notes[1]).To(MatchRegexp(`^granted to bob with fencing token \d+ \(previous holder alice did not renew token \d+ within 2s\)$`))
		Expect(notes[2]).To(MatchRegexp(`^bob did not renew token \d+ within 2s; token expired$`))
		Expect(notes[3]).To(MatchRegexp(`^granted to carol with fencing token \d+ \(previous holder bob, token \d+, expired\)$`))
		Expect(notes[4]).To(MatchRegexp(`^granted to dave with fencing token \d+ \(previous holder carol, token \d+\)$`))
	})

	It("decides expiries falling due together at their due time: timers, not polls, and enough workers", func() {
		const n = 40
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("due-%03d", i)
			newLease(ns, names[i], 5, 0)
		}
		// alice joins every lease at once and never renews: each tenure
		// expires L + allowance after its grant. From the start the test
		// records, per lease, the expiry the grant published
		// (acquireTime + L + allowance; the controller's own falls later by
		// the grant write's latency, as it counts from when the write
		// returned) and previousHolder.endTime, the controller's clock when it
		// ended the tenure (after removing alice's request: she never
		// renewed, so the next token needs the generation to move first).
		due := map[string]time.Time{}
		late := map[string]time.Duration{}
		var mu sync.Mutex
		record := func() int {
			var list coordv1alpha1.FencedLeaseList
			if k8sClient.List(suiteCtx, &list, client.InNamespace(ns)) != nil {
				return -1
			}
			mu.Lock()
			defer mu.Unlock()
			for _, l := range list.Items {
				if l.Status.HolderIdentity == "alice" && l.Status.ExpireTime != nil {
					due[l.Name] = l.Status.ExpireTime.Time
				}
				if p := l.Status.PreviousHolder; p != nil && p.Reason == coordv1alpha1.EndReasonExpired {
					if d, ok := due[l.Name]; ok {
						late[l.Name] = p.EndTime.Sub(d)
					}
				}
			}
			return len(late)
		}
		before := expiryLateness()
		polled := make(chan struct{})
		go func() {
			defer close(polled)
			for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline) && record() < n; {
				time.Sleep(50 * time.Millisecond)
			}
		}()
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for _, name := range names {
			sem <- struct{}{}
			wg.Go(func() {
				defer GinkgoRecover()
				defer func() { <-sem }()
				joinRaw("alice", ns, name, "alice")
			})
		}
		wg.Wait()
		Eventually(polled, 2*time.Minute).Should(BeClosed())
		mu.Lock()
		defer mu.Unlock()
		Expect(late).To(HaveLen(n), "every lease's grant seen before its expiry, and its expiry")
		for name, d := range late {
			Expect(d).To(BeNumerically(">=", 0), "%s expired %v before the expiry its grant published", name, -d)
		}
		// The controller's own lateness (kubefence_expiry_lateness_seconds):
		// from the expiry on its clock to its decision, without the writes. A
		// poll, a rate limiter shared by all keys or too few workers for the
		// writes of n expiries at once shows here as seconds.
		after := expiryLateness()
		Expect(after.count-before.count).To(BeNumerically(">=", n), "one observation per expiry")
		Expect(after.over-before.over).To(BeZero(), "expiries decided more than %v after they fell due (of %d)", lateBound, after.count-before.count)
	})

	It("keeps a lease ungranted during the lock-delay after an expiry", func() {
		newLease(ns, "delay", 1, 3)
		joinRaw("alice", ns, "delay", "alice")
		Eventually(holderName(ns, "delay"), 10*time.Second).Should(Equal("alice"))
		joinRaw("bob", ns, "delay", "bob")
		Eventually(heldReason(ns, "delay"), 10*time.Second).Should(Equal(coordv1alpha1.ReasonLockDelay))
		expiredAt := getLease(ns, "delay").Status.PreviousHolder.EndTime.Time
		Eventually(holderName(ns, "delay"), 10*time.Second).Should(Equal("bob"))
		Expect(getLease(ns, "delay").Status.AcquireTime.Time.Sub(expiredAt)).To(BeNumerically(">=", 3*time.Second))
	})

	It("keeps tokens increasing across a controller restart, and the holder keeps its token", func() {
		a, j, tokA := aliceLeads(users["alice"], ns, "restart", 2)
		ctrlProc.stop()
		ctrlProc = startController(false)
		time.Sleep(3 * time.Second) // longer than the lease: alice must keep it by renewing
		h, tok := holderOf(ns, "restart")
		Expect(h).To(Equal("alice"))
		Expect(tok).To(Equal(tokA))
		b := startElector("bob", ns, "restart", "bob", j)
		DeferCleanup(b.stop)
		waitQueued(ns, "restart", "bob")
		Expect(a.Release(suiteCtx)).To(Succeed())
		Eventually(func() string {
			ids := j.Identities()
			return ids[len(ids)-1]
		}, 10*time.Second).Should(Equal("bob"))
		g := j.Snapshot()
		for _, t := range g[:len(g)-1] {
			// On a loaded machine alice may pass her local deadline and resume the
			// same tenure with her next renewal: same token, never a new one.
			Expect(t.Identity).To(Equal("alice"))
			Expect(t.Token).To(Equal(tokA), "alice's token changed across the controller restart")
		}
		Expect(g[len(g)-1].Token).To(BeNumerically(">", tokA))
	})

	It("issues larger tokens after the lease is deleted and created again (I1)", func() {
		newLease(ns, "phoenix", 5, 0)
		j := &testenv.Journal{}
		a := startElector("alice", ns, "phoenix", "alice", j)
		Eventually(j.Identities, 10*time.Second).Should(HaveLen(1))
		// Push the token up a little so that generation alone would not beat it.
		time.Sleep(2 * time.Second)
		_, old := holderOf(ns, "phoenix")
		a.stop()
		Expect(k8sClient.Delete(suiteCtx, getLease(ns, "phoenix"))).To(Succeed())
		Eventually(func() bool {
			err := k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: "phoenix"}, &coordv1alpha1.FencedLease{})
			return apierrors.IsNotFound(err)
		}, 10*time.Second).Should(BeTrue(), "the epoch finalizer is removed once the token is recorded")
		newLease(ns, "phoenix", 5, 0)
		b := startElector("bob", ns, "phoenix", "bob", j)
		DeferCleanup(b.stop)
		Eventually(j.Identities, 10*time.Second).Should(HaveLen(2))
		Expect(j.Snapshot()[1].Token).To(BeNumerically(">", old))
		Expect(getLease(ns, "phoenix").Status.TokenBase).To(BeNumerically(">=", old))
	})

	It("never shows two holders or a token going down with two controllers running at once", func() {
		extra := startController(false)
		DeferCleanup(extra.stop)
		newLease(ns, "split", 1, 0)
		type seen struct {
			holder string
			token  int64
		}
		recorded, stop, err := testenv.Record(suiteCtx, k8sClient, &coordv1alpha1.FencedLeaseList{}, func(o runtime.Object) (seen, bool) {
			l := o.(*coordv1alpha1.FencedLease)
			return seen{l.Status.HolderIdentity, l.Status.FencingToken}, true
		}, &client.ListOptions{Namespace: ns, FieldSelector: fields.OneTermEqualSelector("metadata.name", "split")})
		Expect(err).NotTo(HaveOccurred())
		defer stop()
		j := &testenv.Journal{}
		var es []*runningElector
		for _, u := range []string{"alice", "bob", "carol"} {
			e := startElector(u, ns, "split", u, j)
			DeferCleanup(e.stop)
			es = append(es, e)
		}
		deadline := time.Now().Add(8 * time.Second)
		for i := 0; time.Now().Before(deadline); i++ {
			_ = es[i%3].Release(suiteCtx)
			time.Sleep(150 * time.Millisecond)
		}
		Expect(len(j.Snapshot())).To(BeNumerically(">=", 5))
		history := recorded()
		holderOfToken := map[int64]string{}
		var last int64
		for _, s := range history {
			Expect(s.token).To(BeNumerically(">=", last), "token went down: %v", history)
			last = s.token
			if s.holder == "" {
				continue
			}
			if prev, ok := holderOfToken[s.token]; ok {
				Expect(prev).To(Equal(s.holder), "token %d granted to two holders", s.token)
			}
			holderOfToken[s.token] = s.holder
		}
		// Holders' own view: tenures never overlap in token order. A holder whose
		// renewal came back after its local deadline (a loaded machine) stops,
		// then leads on with the same token once a renewal succeeds: the same
		// tenure, which the controller never ended. Anything else needs a larger token.
		g := j.Snapshot()
		for i := 1; i < len(g); i++ {
			if g[i].Identity == g[i-1].Identity && g[i].Token == g[i-1].Token {
				Expect(g[i-1].Stop).NotTo(BeZero(), "tenures overlap: %+v", g)
				Expect(g[i-1].Stop.After(g[i].Start)).To(BeFalse(), "tenures overlap: %+v", g)
				continue
			}
			Expect(g[i].Token).To(BeNumerically(">", g[i-1].Token), "tenures %+v", g)
		}
	})

	It("cancels the holder's context before anyone else is granted, under a client pause (I3)", func() {
		paused := &pausableClient{WithWatch: users["alice"]}
		_, j, _ := aliceLeads(paused, ns, "pause", 2)
		b := startElector("bob", ns, "pause", "bob", j)
		DeferCleanup(b.stop)
		waitQueued(ns, "pause", "bob")
		paused.pause() // alice's renewals now hang, as if the network or the process stalled
		DeferCleanup(paused.resume)
		Eventually(j.Identities, 15*time.Second).Should(Equal([]string{"alice", "bob"}))
		g := j.Snapshot()
		Expect(g[0].Stop).NotTo(BeZero(), "alice's context was cancelled")
		Expect(g[0].Stop.Before(g[1].Start)).To(BeTrue(), "alice stopped (%v) before bob started (%v)", g[0].Stop, g[1].Start)
		granted := getLease(ns, "pause").Status.AcquireTime.Time
		Expect(g[0].Stop.Before(granted)).To(BeTrue(), "alice stopped (%v) before the controller granted bob (%v)", g[0].Stop, granted)
		Expect(g[1].Token).To(BeNumerically(">", g[0].Token))
	})
})

var _ = Describe("Controller high availability", func() {
	It("grants with only the leader-elected replica acting, and fails over without reissuing a token", func() {
		ns := newNamespace()
		first := startController(true)
		second := startController(true)
		DeferCleanup(second.stop)
		newLease(ns, "ha", 2, 0)
		j := &testenv.Journal{}
		a := startElector("alice", ns, "ha", "alice", j)
		DeferCleanup(a.stop)
		Eventually(j.Identities, 20*time.Second).Should(HaveLen(1))
		tokA := j.Snapshot()[0].Token
		first.stop() // the leader (or the standby) goes away; the other takes over
		b := startElector("bob", ns, "ha", "bob", j)
		DeferCleanup(b.stop)
		waitQueued(ns, "ha", "bob")
		Expect(a.Release(suiteCtx)).To(Succeed())
		Eventually(j.Identities, 30*time.Second).Should(Equal([]string{"alice", "bob"}))
		Expect(j.Snapshot()[1].Token).To(BeNumerically(">", tokA))
	})
})

func heldCondition(l *coordv1alpha1.FencedLease) metav1.Condition {
	for _, c := range l.Status.Conditions {
		if c.Type == coordv1alpha1.ConditionHeld {
			return c
		}
	}
	return metav1.Condition{}
}

// lateBound is the expiry lateness the timing spec allows: a bucket bound of
// kubefence_expiry_lateness_seconds.
const lateBound = 1024 * time.Millisecond

// lateness is the controller's expiry-lateness histogram: observations, and
// those above lateBound.
type lateness struct{ count, over uint64 }

// expiryLateness reads kubefence_expiry_lateness_seconds from the registry
// the test managers serve (this process's).
func expiryLateness() lateness {
	fams, err := ctrlmetrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	for _, f := range fams {
		if f.GetName() != "kubefence_expiry_lateness_seconds" {
			continue
		}
		h := f.GetMetric()[0].GetHistogram()
		l := lateness{count: h.GetSampleCount(), over: h.GetSampleCount()}
		for _, b := range h.GetBucket() {
			if math.Abs(b.GetUpperBound()-lateBound.Seconds()) < 1e-9 {
				l.over -= b.GetCumulativeCount()
			}
		}
		return l
	}
	return lateness{}
}

// leaseEvents are the controller's Events regarding the lease, oldest first.
func leaseEvents(ns, lease string) []eventsv1.Event {
	var list eventsv1.EventList
	Expect(k8sClient.List(suiteCtx, &list, client.InNamespace(ns))).To(Succeed())
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == lease && e.ReportingController == operator.RecorderName {
			out = append(out, e)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].EventTime.Before(&out[j].EventTime) })
	return out
}

// eventReasons are the lease's Events as "<type> <reason>", oldest first.
func eventReasons(ns, lease string) []string {
	var out []string
	for _, e := range leaseEvents(ns, lease) {
		out = append(out, e.Type+" "+e.Reason)
	}
	return out
}

// eventNotes are the notes of the lease's Events, oldest first.
func eventNotes(ns, lease string) []string {
	var out []string
	for _, e := range leaseEvents(ns, lease) {
		out = append(out, e.Note)
	}
	return out
}

// joinRaw queues a request without the helper: the client never renews.
func joinRaw(user, ns, lease, identity string) {
	Eventually(func() error {
		var l coordv1alpha1.FencedLease
		if err := users[user].Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: lease}, &l); err != nil {
			return err
		}
		l.Spec.Requests = append(l.Spec.Requests, coordv1alpha1.LeaseRequest{HolderIdentity: identity, User: user})
		return users[user].Update(suiteCtx, &l)
	}, 10*time.Second).Should(Succeed())
}

// countingClient counts writes.
type countingClient struct {
	client.WithWatch
	mu             sync.Mutex
	patchCount     int
	otherWriteSeen int
}

func (c *countingClient) Patch(ctx context.Context, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
	c.mu.Lock()
	c.patchCount++
	c.mu.Unlock()
	return c.WithWatch.Patch(ctx, obj, p, opts...)
}

func (c *countingClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	c.mu.Lock()
	c.otherWriteSeen++
	c.mu.Unlock()
	return c.WithWatch.Update(ctx, obj, opts...)
}

func (c *countingClient) patches() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.patchCount
}

func (c *countingClient) writesOtherThanPatch() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.otherWriteSeen
}

// pausableClient blocks writes while paused, like a stalled network path.
type pausableClient struct {
	client.WithWatch
	gate fault.Gate
}

func (c *pausableClient) pause()  { c.gate.Close() }
func (c *pausableClient) resume() { c.gate.Open() }

func (c *pausableClient) Patch(ctx context.Context, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
	_ = c.gate.Wait(ctx) // a cancelled write fails in the API call
	return c.WithWatch.Patch(ctx, obj, p, opts...)
}

// laggingClient serves one lease from a frozen, older copy, as an informer
// cache does while its watch is down after an API server outage; every other
// call goes to the API server.
type laggingClient struct {
	client.Client
	stale *coordv1alpha1.FencedLease
}

func (c laggingClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if l, ok := obj.(*coordv1alpha1.FencedLease); ok && key == client.ObjectKeyFromObject(c.stale) {
		c.stale.DeepCopyInto(l)
		return nil
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

var _ = Describe("FencedLease controller with a cache that lags", func() {
	It("decides again on a fresh read after its write conflicts, instead of waiting for the watch", func() {
		ns := newNamespace()
		newLease(ns, "lag", 600, 0)
		// The finalizer is in place, as a running controller would have put it.
		l := getLease(ns, "lag")
		l.Finalizers = append(l.Finalizers, coordv1alpha1.EpochFinalizer)
		Expect(k8sClient.Update(suiteCtx, l)).To(Succeed())

		j := &testenv.Journal{}
		alice := startElector("alice", ns, "lag", "alice", j)
		DeferCleanup(alice.stop)
		waitQueued(ns, "lag", "alice")
		stale := getLease(ns, "lag") // what the cache still shows below
		bob := startElector("bob", ns, "lag", "bob", j)
		DeferCleanup(bob.stop)
		waitQueued(ns, "lag", "bob")

		r := &fencedlease.FencedLeaseReconciler{
			Client:    laggingClient{Client: k8sClient, stale: stale},
			APIReader: k8sClient,
			Clock:     clock.RealClock{},
			Recorder:  events.NewFakeRecorder(100),
			Epochs:    &fencedlease.EpochStore{Reader: k8sClient, Writer: k8sClient},
			Timing:    fencedlease.DefaultTiming(),
		}
		// The stale copy has no bob: the grant written from it conflicts. One
		// reconcile must still grant alice, with bob waiting (read afresh).
		_, err := r.Reconcile(suiteCtx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "lag"}})
		Expect(err).NotTo(HaveOccurred())
		got := getLease(ns, "lag")
		Expect(got.Status.HolderIdentity).To(Equal("alice"))
		Expect(got.Status.Waiting).To(HaveLen(1))
		Expect(got.Status.Waiting[0].HolderIdentity).To(Equal("bob"))
		Eventually(j.Identities).Should(Equal([]string{"alice"}))
	})
})
