package operator_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1 "k8s.io/api/autoscaling/v1"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/hack/devenv"
	"github.com/kubefence/kubefence/pkg/fence"
	"github.com/kubefence/kubefence/test/testenv"
)

// widget is a Widget to create: testenv.GuardedWidget.
var widget = testenv.GuardedWidget

func getWidget(ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(devenv.WidgetGVK)
	Expect(k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: name}, u)).To(Succeed())
	return u
}

func writerOf(u *unstructured.Unstructured) string {
	w, _, _ := unstructured.NestedString(u.Object, "spec", "writer")
	return w
}

func tok(n int64) string { return strconv.FormatInt(n, 10) }

var _ = Describe("The seeds' scenario with the client helper", func() {
	It("refuses a paused holder's writes after a takeover on every path; the object keeps the new holder's data", func() {
		ns := newNamespace()
		p := startController(false)
		DeferCleanup(p.stop)
		pausedA := &pausableClient{WithWatch: users["alice"]}
		a, _, tokenA := aliceLeads(pausedA, ns, "job", 2)
		jB := &testenv.Journal{}
		fa := a.Client(users["alice"])
		Expect(fa.Create(suiteCtx, widget(ns, "w", "", "", "alice"))).To(Succeed())

		// A pauses (its renewals hang) past the lease; B takes over.
		b := startElector("bob", ns, "job", "bob", jB)
		DeferCleanup(b.stop)
		pausedA.pause()
		Eventually(jB.Identities, 15*time.Second).Should(HaveLen(1))
		tokenB := jB.Snapshot()[0].Token
		Expect(tokenB).To(BeNumerically(">", tokenA))
		fb := b.Client(users["bob"])
		w := getWidget(ns, "w")
		_ = unstructured.SetNestedField(w.Object, "bob", "spec", "writer")
		Expect(fb.Update(suiteCtx, w)).To(Succeed())

		// The helper stopped A locally: its fenced client sends nothing.
		Expect(fa.Update(suiteCtx, getWidget(ns, "w"))).To(MatchError(fence.ErrNotLeading))
		// A buggy or paused A that writes anyway with its old token is refused by the API server.
		staleA := fence.NewFencedClient(users["alice"], "job", devenv.FixedToken(tokenA))
		w = getWidget(ns, "w")
		_ = unstructured.SetNestedField(w.Object, "alice", "spec", "writer")
		Expect(fence.IsStale(staleA.Update(suiteCtx, w))).To(BeTrue(), "update")
		Expect(fence.IsStale(staleA.Patch(suiteCtx, getWidget(ns, "w"), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"writer":"alice"}}`))))).To(BeTrue(), "merge patch")
		Expect(fence.IsStale(staleA.Patch(suiteCtx, getWidget(ns, "w"), client.RawPatch(types.JSONPatchType, []byte(`[{"op":"replace","path":"/spec/writer","value":"alice"}]`))))).To(BeTrue(), "JSON patch")
		Expect(fence.IsStale(staleA.Status().Update(suiteCtx, getWidget(ns, "w")))).To(BeTrue(), "status")
		Expect(fence.IsStale(staleA.SubResource("scale").Update(suiteCtx, getWidget(ns, "w"),
			client.WithSubResourceBody(&autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 9}})))).To(BeTrue(), "scale")
		Expect(fence.IsStale(staleA.Delete(suiteCtx, getWidget(ns, "w")))).To(BeTrue(), "delete")
		final := getWidget(ns, "w")
		Expect(writerOf(final)).To(Equal("bob"))
		Expect(final.GetAnnotations()).To(HaveKeyWithValue(coordv1alpha1.FencingTokenAnnotation, tok(tokenB)))
		pausedA.resume()
	})

	It("never lets the object's accepted token go down with A's writes in flight during takeovers", func() {
		ns := newNamespace()
		p := startController(false)
		DeferCleanup(p.stop)
		newLease(ns, "race", 1, 0)
		Expect(k8sClient.Create(suiteCtx, widget(ns, "w", "", "", "nobody"))).To(Succeed())

		// Record every accepted version of the object.
		recorded, stopRecording, err := testenv.Record(suiteCtx, k8sClient, &unstructured.UnstructuredList{Object: map[string]any{
			"apiVersion": "example.kubefence.io/v1", "kind": "WidgetList"}}, func(o runtime.Object) (int64, bool) {
			u, ok := o.(*unstructured.Unstructured)
			if !ok {
				return 0, false
			}
			t, err := strconv.ParseInt(u.GetAnnotations()[coordv1alpha1.FencingTokenAnnotation], 10, 64)
			return t, err == nil
		}, client.InNamespace(ns))
		Expect(err).NotTo(HaveOccurred())
		defer stopRecording()

		ctx, stop := context.WithTimeout(suiteCtx, 12*time.Second)
		defer stop()
		var wg sync.WaitGroup
		writes, refusals := 0, 0
		var cmu sync.Mutex
		for _, user := range []string{"alice", "bob", "carol"} {
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				// Each worker remembers the last token it was granted and keeps writing
				// with it even after losing the lease (a stale holder), while
				// releasing now and then so that the lease moves.
				var last int64
				var mine int64
				onStart := func(c context.Context, t int64) {
					cmu.Lock()
					last = t
					cmu.Unlock()
					select {
					case <-c.Done():
					case <-time.After(300 * time.Millisecond):
					}
				}
				e, err := fence.New(fence.Config{Client: users[user], Namespace: ns, Name: "race", Identity: user,
					Callbacks: fence.Callbacks{OnStartedLeading: onStart}})
				Expect(err).NotTo(HaveOccurred())
				go func() { _ = e.Run(ctx) }()
				for ctx.Err() == nil {
					cmu.Lock()
					mine = last
					cmu.Unlock()
					if mine > 0 {
						err := fence.NewFencedClient(users[user], "race", devenv.FixedToken(mine)).Patch(ctx, widget(ns, "w", "", "", ""),
							client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"writer":%q}}`, user))))
						cmu.Lock()
						writes++
						if fence.IsStale(err) {
							refusals++
						}
						cmu.Unlock()
					}
					if _, leading := e.Token(); leading && time.Now().UnixNano()%4 == 0 {
						_ = e.Release(ctx)
					}
					time.Sleep(5 * time.Millisecond)
				}
			}()
		}
		wg.Wait()
		time.Sleep(500 * time.Millisecond)
		accepted := recorded()
		GinkgoWriter.Printf("writes %d, refused as stale %d, accepted versions %d\n", writes, refusals, len(accepted))
		Expect(refusals).To(BeNumerically(">", 0), "stale writes were attempted and refused")
		Expect(len(accepted)).To(BeNumerically(">=", 5), "writes were accepted while the lease moved")
		for i := 1; i < len(accepted); i++ {
			Expect(accepted[i]).To(BeNumerically(">=", accepted[i-1]), "accepted tokens went down: %v", accepted)
		}
	})
})
