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
	"github.com/kubefence/kubefence/pkg/fence"
	"github.com/kubefence/kubefence/test/testenv"
)

func widget(ns, name string) *unstructured.Unstructured {
	return testenv.GuardedWidget(ns, name, "", "", "init")
}

func getWidget(ns, name string) *unstructured.Unstructured {
	u := widget(ns, name)
	Expect(k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: name}, u)).To(Succeed())
	return u
}

func newNamespace() string {
	ns, err := cluster.Namespace(suiteCtx, "tenure")
	Expect(err).NotTo(HaveOccurred())
	return ns
}

func newLease(ns, name string, seconds int32, requests ...coordv1alpha1.LeaseRequest) {
	Expect(k8sClient.Create(suiteCtx, &coordv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: seconds, Requests: requests},
	})).To(Succeed())
}

func getLease(ns, name string) *coordv1alpha1.FencedLease {
	l := &coordv1alpha1.FencedLease{}
	Expect(k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: name}, l)).To(Succeed())
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
				return apierrors.IsNotFound(k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(l), &coordv1alpha1.FencedLease{}))
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
			stale := fence.NewFencedClient(users["alice"], "job", testenv.FixedToken(n))
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
		stale := fence.NewFencedClient(users["alice"], "job", testenv.FixedToken(n))
		const writers = 5
		for i := range writers {
			Expect(stale.Create(suiteCtx, widget(ns, fmt.Sprintf("w%d", i)))).To(Succeed())
		}

		// Record the revision at which bob's grant committed.
		w, err := k8sClient.Watch(suiteCtx, &coordv1alpha1.FencedLeaseList{}, client.InNamespace(ns))
		Expect(err).NotTo(HaveOccurred())
		defer w.Stop()
		grantRV := make(chan int64, 1)
		go func() {
			for ev := range w.ResultChan() {
				if l, ok := ev.Object.(*coordv1alpha1.FencedLease); ok && l.Status.HolderIdentity == "bob" {
					rv, _ := strconv.ParseInt(l.ResourceVersion, 10, 64)
					grantRV <- rv
					return
				}
			}
		}()

		answerDelay.Store(int64(500 * time.Millisecond))
		defer answerDelay.Store(0)
		var mu sync.Mutex
		var ok []int64
		refusedExpired := 0
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
})
