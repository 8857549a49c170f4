package tenure_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/hack/devenv"
	"github.com/kubefence/kubefence/pkg/fence"
	"github.com/kubefence/kubefence/test/testenv"
)

func widget(ns, name string) *unstructured.Unstructured {
	return testenv.GuardedWidget(ns, name, "", "", "init")
}

func getWidget(ns, name string) *unstructured.Unstructured {
	u := widget(ns, name)
	Expect(cluster.Admin.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: name}, u)).To(Succeed())
	return u
}

func newNamespace() string {
	ns, err := cluster.Namespace(suiteCtx, "tenure")
	Expect(err).NotTo(HaveOccurred())
	return ns
}

func newLease(ns, name string, seconds int32, requests ...coordv1alpha1.LeaseRequest) {
	Expect(cluster.Admin.Create(suiteCtx, &coordv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: seconds, Requests: requests},
	})).To(Succeed())
}

func getLease(ns, name string) *coordv1alpha1.FencedLease {
	l := &coordv1alpha1.FencedLease{}
	Expect(cluster.Admin.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: name}, l)).To(Succeed())
	return l
}

// runningElector is a pkg/fence Elector of one user, running until stopped.
type runningElector struct {
	el     *fence.Elector
	cancel context.CancelFunc
	done   chan struct{}
}

// leadsNew makes user lead lease "job" (30 s) in a new namespace: it
// returns the namespace, user's elector and its token.
func leadsNew(user string) (string, *runningElector, int64) {
	ns := newNamespace()
	newLease(ns, "job", 30)
	e := startElector(user, ns, "job")
	return ns, e, e.leading()
}

// leadsWithPod is leadsNew, and pod ns/p (one container) created through
// the holder's fenced client, guarded by its lease; it returns the
// namespace, the holder's fenced client and the pod.
func leadsWithPod(user string) (string, client.Client, *corev1.Pod) {
	ns, e, _ := leadsNew(user)
	// Guarded pods live only in namespaces labelled kubefence.io/fencing,
	// where their evictions are fenced (the pod-scope webhook entry).
	Expect(cluster.Admin.Patch(suiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, client.RawPatch(types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"`+coordv1alpha1.FencingNamespaceLabel+`":"enabled"}}}`)))).To(Succeed())
	fc := e.el.Client(users[user])
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}}}
	Expect(fc.Create(suiteCtx, pod)).To(Succeed())
	return ns, fc, pod
}

// startElector runs an Elector of user (its identity too) for ns/lease,
// its Config changed by configure, if given.
func startElector(user, ns, lease string, configure ...func(*fence.Config)) *runningElector {
	cfg := fence.Config{
		Client: users[user], Namespace: ns, Name: lease, Identity: user, User: user,
		Callbacks: fence.Callbacks{OnStartedLeading: func(ctx context.Context, _ int64) { <-ctx.Done() }},
	}
	for _, c := range configure {
		c(&cfg)
	}
	el, err := fence.New(cfg)
	Expect(err).NotTo(HaveOccurred())
	return runElector(el)
}

// renewing makes an Elector renew by r, as a process of its own: its
// session heartbeat (testenv.Session) is named session.
func renewing(r testenv.Renewal, session string) func(*fence.Config) {
	return func(c *fence.Config) { c.Heartbeat = r.Process(c.Client, c.Namespace, session, c.Identity) }
}

// runElector runs el until the returned runningElector is stopped (or the
// spec ends).
func runElector(el *fence.Elector) *runningElector {
	ctx, cancelRun := context.WithCancel(suiteCtx)
	r := &runningElector{el: el, cancel: cancelRun, done: make(chan struct{})}
	go func() {
		defer GinkgoRecover()
		defer close(r.done)
		_ = el.Run(ctx)
	}()
	DeferCleanup(r.stop)
	return r
}

func (r *runningElector) stop() {
	r.cancel()
	Eventually(r.done, 30*time.Second).Should(BeClosed())
}

func (r *runningElector) leading() int64 {
	var tok int64
	Eventually(func() bool { t, ok := r.el.Token(); tok = t; return ok }).Should(BeTrue())
	return tok
}

func jsonPatch(ops ...map[string]any) client.Patch {
	b, err := json.Marshal(ops)
	Expect(err).NotTo(HaveOccurred())
	return client.RawPatch(types.JSONPatchType, b)
}

// revoke is kubectl fence release (to == "") or handover, as the operator:
// the holder's request goes with the revoked annotation in one JSON patch.
func revoke(ns, name, to string) {
	l := getLease(ns, name)
	h := l.Status.HolderIdentity
	var ops []map[string]any
	ops = append(ops, map[string]any{"op": "test", "path": "/status/holderIdentity", "value": h})
	if l.Annotations == nil {
		ops = append(ops, map[string]any{"op": "add", "path": "/metadata/annotations", "value": map[string]string{}})
	}
	ops = append(ops, map[string]any{"op": "add", "path": "/metadata/annotations/coordination.kubefence.io~1revoked",
		"value": h + "/" + strconv.FormatInt(l.Status.FencingToken, 10)})
	hi, ti := -1, -1
	for i, r := range l.Spec.Requests {
		if r.HolderIdentity == h {
			hi = i
		}
		if r.HolderIdentity == to {
			ti = i
		}
	}
	Expect(hi).To(BeNumerically(">=", 0))
	if to != "" && ti > 0 {
		ops = append(ops, map[string]any{"op": "move", "from": fmt.Sprintf("/spec/requests/%d", ti), "path": "/spec/requests/0"})
		if hi < ti {
			hi++
		}
	}
	ops = append(ops, map[string]any{"op": "remove", "path": fmt.Sprintf("/spec/requests/%d", hi)})
	Expect(users["operator"].Patch(suiteCtx, l, jsonPatch(ops...))).To(Succeed())
}

var _ = Describe("The old holder's writes after its tenure ended, whatever the webhook's cache shows", func() {
	type ending struct {
		name string
		end  func(ns string, alice, bob *runningElector)
	}
	endings := []ending{
		{"released by the holder (Elector.Release)", func(ns string, alice, _ *runningElector) {
			Expect(alice.el.Release(suiteCtx)).To(Succeed())
		}},
		{"released by an operator (kubectl fence release)", func(ns string, _, _ *runningElector) { revoke(ns, "job", "") }},
		{"handed over by an operator (kubectl fence handover)", func(ns string, _, _ *runningElector) { revoke(ns, "job", "bob") }},
		{"ended by deleting the lease and creating it again", func(ns string, alice, _ *runningElector) {
			alice.stop() // the old holder's process is gone from the queue; its writes are not
			l := getLease(ns, "job")
			Expect(users["operator"].Delete(suiteCtx, l)).To(Succeed())
			Eventually(func() bool {
				return apierrors.IsNotFound(cluster.Admin.Get(suiteCtx, client.ObjectKeyFromObject(l), &coordv1alpha1.FencedLease{}))
			}).Should(BeTrue())
			newLease(ns, "job", 30)
		}},
	}
	for _, e := range endings {
		It("refuses them, and accepts the new holder's, when the tenure was "+e.name, func() {
			ns, alice, n := leadsNew("alice")
			bob := startElector("bob", ns, "job")
			Eventually(func() int { return len(getLease(ns, "job").Spec.Requests) }).Should(Equal(2))
			fa := alice.el.Client(users["alice"])
			for _, name := range []string{"x", "y", "z"} {
				Expect(fa.Create(suiteCtx, widget(ns, name))).To(Succeed())
			}

			freeze.set(true) // the webhook manager's cache now shows alice holding n
			DeferCleanup(freeze.set, false)
			e.end(ns, alice, bob)
			nb := bob.leading()
			Expect(nb).To(BeNumerically(">", n))

			// The new holder's writes, on the token path and the tokenless
			// paths, are accepted: no refusal comes from a lagging cache.
			fb := bob.el.Client(users["bob"])
			x := getWidget(ns, "x")
			_ = unstructured.SetNestedField(x.Object, "bob", "spec", "writer")
			Expect(fb.Update(suiteCtx, x)).To(Succeed())
			x = getWidget(ns, "x")
			_ = unstructured.SetNestedField(x.Object, "bob", "status", "observedWriter")
			Expect(fb.Status().Update(suiteCtx, x)).To(Succeed())
			Expect(fb.Delete(suiteCtx, getWidget(ns, "z"))).To(Succeed())
			if t, ok := bob.el.Token(); !ok || t != nb {
				Fail(fmt.Sprintf("bob stepped down (token %d, leading %v) after a write: a lagging cache refused the live holder", t, ok))
			}

			// The old holder's write with its old token, on an object the new
			// holder has not written: refused as stale.
			stale := fence.NewFencedClient(users["alice"], "job", devenv.FixedToken(n))
			y := getWidget(ns, "y")
			_ = unstructured.SetNestedField(y.Object, "alice", "spec", "writer")
			err := stale.Update(suiteCtx, y)
			Expect(err).To(HaveOccurred(), "token %d accepted after token %d was granted", n, nb)
			Expect(fence.IsStale(err)).To(BeTrue(), "refusal not recognised as stale: %v", err)
			// And its tokenless delete.
			err = users["alice"].Delete(suiteCtx, getWidget(ns, "y"))
			Expect(err).To(HaveOccurred(), "alice's tokenless DELETE accepted after bob was granted")
			Expect(getWidget(ns, "y").GetAnnotations()[coordv1alpha1.FencingTokenAnnotation]).To(Equal(strconv.FormatInt(n, 10)))
		})
	}
})

var _ = Describe("A write admitted before the cut-off commits before the next grant", func() {
	It("orders every accepted old-token write before the grant, with webhook answers delayed 500 ms after the decision", func() {
		ns := newNamespace()
		// alice is granted and never renews: the controller expires her at
		// expireTime and grants bob; nobody's clock but the controller's decides.
		// L = 10 s: the cut-off margin is min(skew + commit lag, L/10) = 1 s,
		// more than the 500 ms the answers are delayed.
		newLease(ns, "job", 10,
			coordv1alpha1.LeaseRequest{HolderIdentity: "alice", User: "alice"},
			coordv1alpha1.LeaseRequest{HolderIdentity: "bob", User: "bob"})
		Eventually(func() string { return getLease(ns, "job").Status.HolderIdentity }).Should(Equal("alice"))
		n := getLease(ns, "job").Status.FencingToken
		stale := fence.NewFencedClient(users["alice"], "job", devenv.FixedToken(n))
		const writers = 5
		for i := range writers {
			Expect(stale.Create(suiteCtx, widget(ns, fmt.Sprintf("w%d", i)))).To(Succeed())
		}

		// Record the revision at which bob's grant committed.
		grantRV := grantRevision(ns, "job", "bob")

		answerDelay.Store(int64(500 * time.Millisecond))
		defer answerDelay.Store(0)
		var mu sync.Mutex
		var ok []int64
		refusedExpired := 0
		retryUntil := time.Now().Add(30 * time.Second) // the 10 s lease expires well before
		var wg sync.WaitGroup
		for i := range writers {
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				for j := 0; ; j++ {
					obj := widget(ns, fmt.Sprintf("w%d", i))
					p := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"writer":"alice-%d"}}`, j))
					err := stale.Patch(suiteCtx, obj, p)
					mu.Lock()
					if err == nil {
						rv, _ := strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
						ok = append(ok, rv)
					} else if fence.IsStale(err) {
						refusedExpired++
						mu.Unlock()
						return
					} else if apierrors.IsServiceUnavailable(err) && time.Now().Before(retryUntil) {
						// The webhook failed closed (its decision took over
						// C/2 on a loaded machine): a retry, as the 2 s
						// lease's spec below takes it; nothing was admitted.
						mu.Unlock()
						continue
					} else {
						mu.Unlock()
						Fail(fmt.Sprintf("unexpected refusal: %v", err))
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		var g int64
		Eventually(grantRV, 30*time.Second).Should(Receive(&g))
		GinkgoWriter.Printf("grant of bob at revision %d; accepted token-%d writes at %v\n", g, n, ok)
		Expect(ok).NotTo(BeEmpty(), "no write was accepted: the test shows nothing")
		Expect(refusedExpired).To(Equal(writers))
		for _, rv := range ok {
			Expect(rv).To(BeNumerically("<", g), "a write with token %d committed at revision %d, after bob's grant at %d", n, rv, g)
		}
	})

	// Review of 1 December 2026, finding 2: with L = 2 s the cut-off margin
	// is L/10 = 200 ms, less than the C/2 = 500 ms a decision may take. A
	// decision that starts 300 ms before expireTime (before the cut-off),
	// whose live read shows alice and is held 400 ms, was admitted and
	// answered about 100 ms after expireTime, and its write committed after
	// bob's grant. The webhook now refuses it (503: it ends after the
	// tenure's AnswerBy), and the retry is refused as stale.
	It("orders every accepted old-token write before the grant on a 2 s lease, with the webhook's live lease reads held 400 ms", func() {
		ns := newNamespace()
		// Created by an operator (a lease admin; the suite's admin is the
		// controller user, which the FencedLease webhook does not check).
		_, cfg, err := cluster.User("operator", "system:masters")
		Expect(err).NotTo(HaveOccurred())
		operator, warned, err := cluster.Warned(cfg)
		Expect(err).NotTo(HaveOccurred())
		lease := &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "job"},
			Spec: coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: 2}}
		Expect(operator.Create(suiteCtx, lease)).To(Succeed())
		Expect(warned.All()).To(ContainElement(ContainSubstring("commit-lag bound shrinks to L/10 = 200ms")),
			"creating a 2 s lease gave no warning that its commit-lag bound shrinks")
		// alice, then bob, queue (written as the controller, in one step).
		Expect(cluster.Admin.Patch(suiteCtx, lease, client.RawPatch(types.MergePatchType,
			[]byte(`{"spec":{"requests":[{"holderIdentity":"alice","user":"alice"},{"holderIdentity":"bob","user":"bob"}]}}`)))).To(Succeed())
		// alice is granted and never renews: the controller expires her at
		// expireTime E and grants bob.
		Eventually(func() string { return getLease(ns, "job").Status.HolderIdentity }).Should(Equal("alice"))
		l := getLease(ns, "job")
		n, e := l.Status.FencingToken, l.Status.ExpireTime.Time
		stale := fence.NewFencedClient(users["alice"], "job", devenv.FixedToken(n))
		Expect(stale.Create(suiteCtx, widget(ns, "w"))).To(Succeed())

		grantRV := grantRevision(ns, "job", "bob")

		slowReads.set(ns, 400*time.Millisecond)
		defer slowReads.set("", 0)
		// write patches w with alice's token from the instant before E on:
		// it returns the revision of an accepted write, or 0 and whether the
		// refusal is final (stale) rather than a retry (503).
		write := func(before time.Duration) (rv int64, final bool) {
			time.Sleep(time.Until(e.Add(-before)))
			started := time.Since(e)
			obj := widget(ns, "w")
			err := stale.Patch(suiteCtx, obj, client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"writer":"alice-%d"}}`, before.Milliseconds())))
			GinkgoWriter.Printf("write started at expireTime%+v, answered at expireTime%+v: %v\n", started.Round(time.Millisecond), time.Since(e).Round(time.Millisecond), err)
			switch {
			case err == nil:
				rv, _ = strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
				return rv, false
			case fence.IsStale(err):
				return 0, true
			case apierrors.IsServiceUnavailable(err):
				return 0, false
			}
			Fail(fmt.Sprintf("unexpected refusal: %v", err))
			return 0, false
		}
		Expect(time.Until(e)).To(BeNumerically(">", 1500*time.Millisecond), "the grant took too long to set up the writes before the cut-off")
		var ok []int64
		// Long before the cut-off: accepted (answered 1.1 s before E). A 503
		// (the held read on a loaded machine took over C/2) is retried once,
		// 1.1 s before E (answered about 700 ms before it); a stale refusal
		// there is a bug.
		for before := 1500 * time.Millisecond; len(ok) == 0 && before >= 1100*time.Millisecond; before -= 400 * time.Millisecond {
			rv, final := write(before)
			if final {
				Fail(fmt.Sprintf("alice's token %d refused as stale %v before her tenure's expiry", n, before))
			}
			if rv != 0 {
				ok = append(ok, rv)
			}
		}
		Expect(ok).NotTo(BeEmpty(), "no write was accepted: the test shows nothing")
		Expect(time.Until(e)).To(BeNumerically(">", 300*time.Millisecond), "the writes long before the cut-off ended too late to start one just before it")
		// Started before the cut-off (E - 200 ms), answered after E; then
		// retried until refused as stale.
		for before, done := 300*time.Millisecond, false; !done; before = -time.Since(e) {
			var rv int64
			if rv, done = write(before); rv != 0 {
				ok = append(ok, rv)
			}
		}
		var g int64
		Eventually(grantRV, 30*time.Second).Should(Receive(&g))
		GinkgoWriter.Printf("grant of bob at revision %d; accepted token-%d writes at %v\n", g, n, ok)
		for _, rv := range ok {
			Expect(rv).To(BeNumerically("<", g), "a write with token %d committed at revision %d, after bob's grant at %d", n, rv, g)
		}
	})
})
