package example_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	ctrlmanager "sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence"
	fencemanager "github.com/kubefence/kubefence/pkg/fence/manager"
	"github.com/kubefence/kubefence/test/example"
	"github.com/kubefence/kubefence/test/testenv"
)

// replica is one running copy of the example controller.
type replica struct {
	mgr    *fencemanager.Manager
	pauser *pauser
	stop   func()
	done   chan struct{} // closed when Start returned
	err    error         // what Start returned

	// A leader-election runnable of the replica records when it ran.
	mu                sync.Mutex
	ranFrom, ranUntil time.Time
}

// ran returns when the replica's leader-election runnable started and stopped.
func (r *replica) ran() (from, until time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ranFrom, r.ranUntil
}

// startReplica runs the example controller as user (also its identity), with
// writes that the test can stall.
func startReplica(user, ns, lease string) *replica {
	p := &pauser{}
	mgr, err := example.NewManager(pausableConfig(user, p), ctrl.Options{
		Scheme:                  cluster.Scheme,
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  "0",
		GracefulShutdownTimeout: ptr.To(5 * time.Second),
		Controller:              config.Controller{SkipNameValidation: ptr.To(true)},
	}, fencemanager.LeaseOptions{Namespace: ns, Name: lease, Identity: user})
	Expect(err).NotTo(HaveOccurred())
	ctx, stop := context.WithCancel(suiteCtx)
	r := &replica{mgr: mgr, pauser: p, stop: stop, done: make(chan struct{})}
	Expect(mgr.Add(ctrlmanager.RunnableFunc(func(ctx context.Context) error {
		r.mu.Lock()
		r.ranFrom = time.Now()
		r.mu.Unlock()
		<-ctx.Done()
		r.mu.Lock()
		r.ranUntil = time.Now()
		r.mu.Unlock()
		return nil
	}))).To(Succeed())
	go func() {
		defer close(r.done)
		r.err = mgr.Start(ctx)
	}()
	DeferCleanup(func() {
		p.resume()
		stop()
		Eventually(r.done, 15*time.Second).Should(BeClosed())
	})
	return r
}

func getWidget(ns, name string) *unstructured.Unstructured {
	u := testenv.Widget(ns, name)
	Expect(cluster.Admin.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: name}, u)).To(Succeed())
	return u
}

// widgetView is what the test checks of one version of a Widget.
type widgetView struct {
	Writer, Phase, Token, Lease string
}

func viewOf(u *unstructured.Unstructured) widgetView {
	w, _, _ := unstructured.NestedString(u.Object, "spec", "writer")
	p, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	return widgetView{Writer: w, Phase: p, Token: u.GetAnnotations()[coordv1alpha1.FencingTokenAnnotation],
		Lease: u.GetLabels()[coordv1alpha1.GuardLeaseLabel]}
}

func widgetOf(ns, name string) func() widgetView {
	return func() widgetView { return viewOf(getWidget(ns, name)) }
}

// recordWidgets keeps every version of the Widgets in ns the API server accepted.
func recordWidgets(ns string) func() []widgetView {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(example.WidgetGVK.GroupVersion().WithKind("WidgetList"))
	seen, stop, err := testenv.Record(suiteCtx, cluster.Admin, list, func(o runtime.Object) (widgetView, bool) {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			return widgetView{}, false
		}
		return viewOf(u), true
	}, client.InNamespace(ns))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(stop)
	return seen
}

var _ = Describe("A controller fenced with one option (pkg/fence/manager)", func() {
	It("lets only the leader write, fails over with a larger token, and the deposed leader's writes are refused", func() {
		ns := newNamespace()
		newLease(ns, "widgets", 2)
		w := testenv.Widget(ns, "w")
		Expect(unstructured.SetNestedField(w.Object, "nobody", "spec", "writer")).To(Succeed())
		Expect(cluster.Admin.Create(suiteCtx, w)).To(Succeed(), "an unguarded Widget; the controller guards it")
		history := recordWidgets(ns)

		a := startReplica("replica-a", ns, "widgets")
		Eventually(a.mgr.Elected(), 15*time.Second).Should(BeClosed())
		tokA, ok := a.mgr.Token()
		Expect(ok).To(BeTrue())
		b := startReplica("replica-b", ns, "widgets")
		eventually(func() []string { return queued(ns, "widgets") }, 15*time.Second).Should(ContainElement("replica-b"))

		leaderA := widgetView{Writer: "replica-a", Phase: example.PhasePrefix + "replica-a", Token: strconv.FormatInt(tokA, 10), Lease: "widgets"}
		eventually(widgetOf(ns, "w"), 15*time.Second).Should(Equal(leaderA))

		By("only the leader runs its reconciler")
		Consistently(func() bool {
			_, leads := b.mgr.Token()
			select {
			case <-b.mgr.Elected():
				return true
			default:
				return leads
			}
		}, 2*time.Second, 50*time.Millisecond).Should(BeFalse(), "replica-b never led, so its controller never started")
		Expect(viewOf(getWidget(ns, "w"))).To(Equal(leaderA))
		_, tok := holderOf(ns, "widgets")
		Expect(tok).To(Equal(tokA), "renewals kept the token")

		By("stalling the leader: its renewals and writes hang")
		before := getWidget(ns, "w")
		a.pauser.pause()
		// A write replica-a had already sent when it stalled: stamped with its
		// token now, delivered after the takeover. (A reconcile's own write would
		// be abandoned instead: its context ends with the tenure.)
		late := make(chan error, 1)
		go func() {
			defer GinkgoRecover()
			u := before.DeepCopy()
			Expect(unstructured.SetNestedField(u.Object, "replica-a-late", "spec", "writer")).To(Succeed())
			late <- a.mgr.GetFencedClient().Patch(suiteCtx, u, client.MergeFrom(before))
		}()

		By("replica-b takes over with a larger token and rewrites the Widget")
		eventually(func() string { h, _ := holderOf(ns, "widgets"); return h }, 20*time.Second).Should(Equal("replica-b"))
		Eventually(b.mgr.Elected(), 10*time.Second).Should(BeClosed())
		tokB, ok := b.mgr.Token()
		Expect(ok).To(BeTrue())
		Expect(tokB).To(BeNumerically(">", tokA))
		leaderB := widgetView{Writer: "replica-b", Phase: example.PhasePrefix + "replica-b", Token: strconv.FormatInt(tokB, 10), Lease: "widgets"}
		eventually(widgetOf(ns, "w"), 15*time.Second).Should(Equal(leaderB))
		_, stillA := a.mgr.Token()
		Expect(stillA).To(BeFalse(), "replica-a's tenure ended at its local deadline")
		_, aUntil := a.ran()
		bFrom, _ := b.ran()
		granted := getLease(ns, "widgets").Status.AcquireTime.Time
		Expect(aUntil).NotTo(BeZero(), "replica-a's leader-election runnables were stopped")
		Expect(aUntil.Before(granted)).To(BeTrue(), "replica-a stopped (%v) before the controller granted replica-b (%v)", aUntil, granted)
		Expect(aUntil.Before(bFrom)).To(BeTrue(), "replica-a stopped (%v) before replica-b started (%v)", aUntil, bFrom)

		By("the deposed replica's late write reaches the API server and is refused as stale")
		a.pauser.resume()
		var err error
		Eventually(late, 10*time.Second).Should(Receive(&err))
		Expect(err).To(HaveOccurred())
		Expect(fence.IsStale(err)).To(BeTrue(), "refused by the fencing webhook: %v", err)
		Expect(err.Error()).To(ContainSubstring("stale fencing token " + strconv.FormatInt(tokA, 10)))

		By("and so is a /status write of replica-a (it is not the holder any more)")
		stale := fence.NewFencedClient(userClient("replica-a", &pauser{}), "widgets", staticToken(tokA))
		u := getWidget(ns, "w")
		orig := u.DeepCopy()
		Expect(unstructured.SetNestedField(u.Object, example.PhasePrefix+"replica-a", "status", "phase")).To(Succeed())
		err = stale.Status().Patch(suiteCtx, u, client.MergeFrom(orig))
		Expect(fence.IsStale(err)).To(BeTrue(), "refused by the fencing webhook: %v", err)

		By("replica-a's own fenced client no longer sends anything")
		u = getWidget(ns, "w")
		orig = u.DeepCopy()
		Expect(unstructured.SetNestedField(u.Object, "replica-a", "spec", "writer")).To(Succeed())
		Expect(errors.Is(a.mgr.GetFencedClient().Patch(suiteCtx, u, client.MergeFrom(orig)), fence.ErrNotLeading)).To(BeTrue())

		By("the Widget keeps the new leader's data")
		Consistently(widgetOf(ns, "w"), time.Second, 50*time.Millisecond).Should(Equal(leaderB))

		By("replica-a's manager stopped: its tenure was lost")
		Eventually(a.done, 15*time.Second).Should(BeClosed())
		Expect(errors.Is(a.err, fencemanager.ErrLeaseLost)).To(BeTrue(), "Start returned %v", a.err)

		By("every accepted version was written by the holder of the token it carries")
		Expect(history()).To(ContainElements(leaderA, leaderB))
		var last int64
		for _, v := range history() {
			Expect(v.Writer).NotTo(Equal("replica-a-late"))
			if v.Token == "" {
				Expect(v.Writer).To(Equal("nobody"))
				continue
			}
			t, err := strconv.ParseInt(v.Token, 10, 64)
			Expect(err).NotTo(HaveOccurred())
			Expect(t).To(BeNumerically(">=", last), "token went down: %v", history())
			last = t
			want := map[int64]string{tokA: "replica-a", tokB: "replica-b"}[t]
			Expect(v.Writer).To(Equal(want), "version %+v", v)
		}
	})

	It("withdraws the request on a normal stop, so the other replica is granted at once", func() {
		ns := newNamespace()
		newLease(ns, "handover", 30)
		w := testenv.Widget(ns, "w")
		Expect(cluster.Admin.Create(suiteCtx, w)).To(Succeed())
		a := startReplica("replica-a", ns, "handover")
		Eventually(a.mgr.Elected(), 15*time.Second).Should(BeClosed())
		tokA, _ := a.mgr.Token()
		b := startReplica("replica-b", ns, "handover")
		eventually(func() []string { return queued(ns, "handover") }, 15*time.Second).Should(ContainElement("replica-b"))
		stopped := time.Now()
		a.stop()
		Eventually(a.done, 15*time.Second).Should(BeClosed())
		Expect(a.err).NotTo(HaveOccurred(), "a normal stop is not a lost lease")
		Eventually(b.mgr.Elected(), 10*time.Second).Should(BeClosed())
		Expect(time.Since(stopped)).To(BeNumerically("<", 10*time.Second), "far below the 30 s lease: handed over, not expired")
		tokB, _ := b.mgr.Token()
		Expect(tokB).To(BeNumerically(">", tokA))
		eventually(widgetOf(ns, "w"), 15*time.Second).Should(HaveField("Writer", "replica-b"))
		Expect(getLease(ns, "handover").Status.PreviousHolder.Reason).To(Equal(coordv1alpha1.EndReasonReleased))
	})
})
