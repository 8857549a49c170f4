package operator_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	autoscalingv1 "k8s.io/api/autoscaling/v1"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence"
	"github.com/kubefence/kubefence/test/testenv"
)

func widget(ns, name, lease string, token string, writer string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(testenv.WidgetGVK)
	u.SetNamespace(ns)
	u.SetName(name)
	if lease != "" {
		u.SetLabels(map[string]string{coordv1alpha1.GuardLeaseLabel: lease})
	}
	if token != "" {
		u.SetAnnotations(map[string]string{coordv1alpha1.FencingTokenAnnotation: token})
	}
	_ = unstructured.SetNestedField(u.Object, writer, "spec", "writer")
	_ = unstructured.SetNestedField(u.Object, int64(1), "spec", "replicas")
	return u
}

func getWidget(ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(testenv.WidgetGVK)
	Expect(k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: name}, u)).To(Succeed())
	return u
}

func writerOf(u *unstructured.Unstructured) string {
	w, _, _ := unstructured.NestedString(u.Object, "spec", "writer")
	return w
}

func tok(n int64) string { return strconv.FormatInt(n, 10) }

// expectRefused asserts a fencing refusal: its HTTP code and message.
func expectRefused(err error, code int32, msg string) {
	GinkgoHelper()
	Expect(err).To(HaveOccurred(), "the write was accepted")
	st, ok := err.(apierrors.APIStatus)
	Expect(ok).To(BeTrue(), "not an API status error: %v", err)
	Expect(st.Status().Message).To(ContainSubstring(msg))
	Expect(st.Status().Code).To(Equal(code), "message: %s", st.Status().Message)
}

// staleAndCurrent sets up the seeds' situation on lease "job": alice held it
// with token stale and stopped renewing; the controller expired her and granted
// bob token current.
func staleAndCurrent(ns string) (stale, current int64) {
	newLease(ns, "job", 2, 0)
	joinRaw("alice", ns, "job", "alice")
	Eventually(func() string { h, _ := holderOf(ns, "job"); return h }, 10*time.Second).Should(Equal("alice"))
	_, stale = holderOf(ns, "job")
	j := &testenv.Journal{}
	b := startElector("bob", ns, "job", "bob", j)
	DeferCleanup(b.stop)
	Eventually(j.Identities, 15*time.Second).Should(Equal([]string{"bob"}))
	current = j.Snapshot()[0].Token
	Expect(current).To(BeNumerically(">", stale))
	return stale, current
}

var _ = Describe("Fencing at the write boundary (I4, I5)", func() {
	var ns string
	var stale, current int64

	BeforeEach(func() {
		ns = newNamespace()
		p := startController(false)
		DeferCleanup(p.stop)
		stale, current = staleAndCurrent(ns)
	})

	It("refuses a stale token on create and accepts the current one", func() {
		err := users["alice"].Create(suiteCtx, widget(ns, "w", "job", tok(stale), "alice"))
		expectRefused(err, 409, fmt.Sprintf("stale fencing token %d for lease %s/job: current token is %d", stale, ns, current))
		Expect(fence.IsStale(err)).To(BeTrue())
		Expect(staleCauses(err)).To(Equal(map[string]string{
			"lease": ns + "/job", "presentedToken": tok(stale), "currentToken": tok(current), "reason": "stale",
		}), "the API server passes the webhook's typed causes on to the client")
		Expect(users["bob"].Create(suiteCtx, widget(ns, "w", "job", tok(current), "bob"))).To(Succeed())
	})

	Context("on an object that accepted the current token", func() {
		BeforeEach(func() {
			Expect(users["bob"].Create(suiteCtx, widget(ns, "w", "job", tok(current), "bob"))).To(Succeed())
		})

		It("refuses a stale UPDATE, comparing with the object's own token, and keeps bob's data", func() {
			w := getWidget(ns, "w")
			w.SetAnnotations(map[string]string{coordv1alpha1.FencingTokenAnnotation: tok(stale)})
			_ = unstructured.SetNestedField(w.Object, "alice", "spec", "writer")
			err := users["alice"].Update(suiteCtx, w)
			expectRefused(err, 409, fmt.Sprintf("stale fencing token %d for lease %s/job: the object already accepted token %d", stale, ns, current))
			Expect(writerOf(getWidget(ns, "w"))).To(Equal("bob"))
			w = getWidget(ns, "w")
			_ = unstructured.SetNestedField(w.Object, "bob-2", "spec", "writer")
			Expect(users["bob"].Update(suiteCtx, w)).To(Succeed())
		})

		DescribeTable("refuses every patch type with a stale token and accepts it with the current one",
			func(pt types.PatchType, body func(token int64, writer string) string) {
				patch := func(user string, token int64) error {
					w := getWidget(ns, "w")
					opts := []client.PatchOption{}
					if pt == types.ApplyPatchType {
						opts = append(opts, client.FieldOwner(user), client.ForceOwnership)
					}
					return users[user].Patch(suiteCtx, w, client.RawPatch(pt, []byte(body(token, user))), opts...)
				}
				expectRefused(patch("alice", stale), 409, "stale fencing token")
				Expect(writerOf(getWidget(ns, "w"))).To(Equal("bob"))
				Expect(patch("bob", current)).To(Succeed())
				Expect(writerOf(getWidget(ns, "w"))).To(Equal("bob"))
			},
			Entry("JSON patch", types.JSONPatchType, func(t int64, wr string) string {
				return fmt.Sprintf(`[{"op":"replace","path":"/metadata/annotations/kubefence.io~1fencing-token","value":"%d"},{"op":"replace","path":"/spec/writer","value":%q}]`, t, wr)
			}),
			Entry("merge patch", types.MergePatchType, func(t int64, wr string) string {
				return fmt.Sprintf(`{"metadata":{"annotations":{"kubefence.io/fencing-token":"%d"}},"spec":{"writer":%q}}`, t, wr)
			}),
			Entry("server-side apply", types.ApplyPatchType, func(t int64, wr string) string {
				return fmt.Sprintf(`{"apiVersion":"example.kubefence.io/v1","kind":"Widget","metadata":{"name":"w","labels":{"kubefence.io/lease":"job"},"annotations":{"kubefence.io/fencing-token":"%d"}},"spec":{"writer":%q}}`, t, wr)
			}),
		)

		It("refuses a stale holder's DELETE, which carries no object, and accepts the holder's", func() {
			err := users["alice"].Delete(suiteCtx, widget(ns, "w", "", "", ""))
			expectRefused(err, 403, fmt.Sprintf("alice is not the holder of lease %s/job (held by bob with token %d)", ns, current))
			Expect(fence.IsStale(err)).To(BeTrue())
			Expect(staleCauses(err)).To(Equal(map[string]string{
				"lease": ns + "/job", "presentedToken": "0", "currentToken": tok(current), "reason": "not-holder",
			}))
			Expect(users["bob"].Delete(suiteCtx, widget(ns, "w", "", "", ""))).To(Succeed())
		})

		It("lets the namespace controller and the garbage collector DELETE it without the lease, and nothing else", func() {
			nsController := cleanupUser("system:serviceaccount:kube-system:namespace-controller")
			w := getWidget(ns, "w")
			w.SetAnnotations(map[string]string{coordv1alpha1.FencingTokenAnnotation: tok(current)})
			_ = unstructured.SetNestedField(w.Object, "namespace-controller", "spec", "writer")
			expectRefused(nsController.Update(suiteCtx, w), 403, "is not the holder of lease")
			Expect(writerOf(getWidget(ns, "w"))).To(Equal("bob"))
			Expect(nsController.Delete(suiteCtx, widget(ns, "w", "", "", ""))).To(Succeed())

			Expect(users["bob"].Create(suiteCtx, widget(ns, "w2", "job", tok(current), "bob"))).To(Succeed())
			gc := cleanupUser("system:serviceaccount:kube-system:generic-garbage-collector")
			// Finishing a cascade: only finalizers and ownerReferences change.
			Expect(gc.Patch(suiteCtx, widget(ns, "w2", "", "", ""), client.RawPatch(types.MergePatchType,
				[]byte(`{"metadata":{"finalizers":["example.kubefence.io/cascade"]}}`)))).To(Succeed())
			Expect(gc.Patch(suiteCtx, widget(ns, "w2", "", "", ""), client.RawPatch(types.MergePatchType,
				[]byte(`{"metadata":{"finalizers":null}}`)))).To(Succeed())
			expectRefused(gc.Patch(suiteCtx, widget(ns, "w2", "", "", ""), client.RawPatch(types.MergePatchType,
				[]byte(`{"spec":{"writer":"gc"}}`))), 403, "is not the holder of lease")
			Expect(gc.Delete(suiteCtx, widget(ns, "w2", "", "", ""))).To(Succeed())
			// Not a default any more: without --use-service-account-credentials
			// every controller of kube-controller-manager runs as this user.
			kcm := cleanupUser("system:kube-controller-manager")
			Expect(users["bob"].Create(suiteCtx, widget(ns, "w3", "job", tok(current), "bob"))).To(Succeed())
			expectRefused(kcm.Delete(suiteCtx, widget(ns, "w3", "", "", "")), 403, "is not the holder of lease")
		})

		It("refuses a stale holder's /status write, whose metadata the API server drops", func() {
			w := getWidget(ns, "w")
			_ = unstructured.SetNestedField(w.Object, "alice-was-here", "status", "phase")
			// The token annotation would be discarded on /status: identity decides.
			expectRefused(users["alice"].Status().Update(suiteCtx, w), 403, "writes to /status")
			w = getWidget(ns, "w")
			_ = unstructured.SetNestedField(w.Object, "running", "status", "phase")
			Expect(users["bob"].Status().Update(suiteCtx, w)).To(Succeed())
			phase, _, _ := unstructured.NestedString(getWidget(ns, "w").Object, "status", "phase")
			Expect(phase).To(Equal("running"))
		})

		It("refuses a stale holder's /scale write, whose Scale object has no labels", func() {
			scale := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 5}}
			err := users["alice"].SubResource("scale").Update(suiteCtx, getWidget(ns, "w"), client.WithSubResourceBody(scale))
			expectRefused(err, 403, "writes to /scale")
			Expect(users["bob"].SubResource("scale").Update(suiteCtx, getWidget(ns, "w"),
				client.WithSubResourceBody(&autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 3}}))).To(Succeed())
			r, _, _ := unstructured.NestedInt64(getWidget(ns, "w").Object, "spec", "replicas")
			Expect(r).To(Equal(int64(3)))
		})

		It("refuses removing the guard unless the current holder does it", func() {
			w := getWidget(ns, "w")
			w.SetLabels(nil)
			expectRefused(users["alice"].Update(suiteCtx, w), 403, "is not the holder of lease")
			w = getWidget(ns, "w")
			w.SetLabels(nil)
			Expect(users["bob"].Update(suiteCtx, w)).To(Succeed())
		})

		It("refuses re-pointing the object at another lease unless the current holder does it", func() {
			newLease(ns, "other", 30, 0)
			j := &testenv.Journal{}
			e := startElector("bob", ns, "other", "bob", j)
			DeferCleanup(e.stop)
			Eventually(j.Identities, 10*time.Second).Should(HaveLen(1))
			other := j.Snapshot()[0].Token
			repoint := func(user string) error {
				w := getWidget(ns, "w")
				w.SetLabels(map[string]string{coordv1alpha1.GuardLeaseLabel: "other"})
				w.SetAnnotations(map[string]string{coordv1alpha1.FencingTokenAnnotation: tok(other)})
				return users[user].Update(suiteCtx, w)
			}
			expectRefused(repoint("alice"), 403, fmt.Sprintf("is not the holder of lease %s/job", ns))
			Expect(repoint("bob")).To(Succeed())
			Expect(getWidget(ns, "w").GetLabels()).To(HaveKeyWithValue(coordv1alpha1.GuardLeaseLabel, "other"))
		})
	})

	It("refuses a stale strategic-merge patch on a built-in kind (ConfigMap)", func() {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm",
			Labels:      map[string]string{coordv1alpha1.GuardLeaseLabel: "job"},
			Annotations: map[string]string{coordv1alpha1.FencingTokenAnnotation: tok(current)}},
			Data: map[string]string{"writer": "bob"}}
		Expect(users["bob"].Create(suiteCtx, cm)).To(Succeed())
		smp := func(user string, t int64) error {
			body := fmt.Sprintf(`{"metadata":{"annotations":{"kubefence.io/fencing-token":"%d"}},"data":{"writer":%q}}`, t, user)
			return users[user].Patch(suiteCtx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}},
				client.RawPatch(types.StrategicMergePatchType, []byte(body)))
		}
		expectRefused(smp("alice", stale), 409, "stale fencing token")
		Expect(smp("bob", current)).To(Succeed())
	})

	DescribeTable("refuses malformed tokens and unknown leases with a specific message",
		func(lease, token string, withToken bool, code int32, msg string) {
			w := widget(ns, "bad", lease, "", "bob")
			if withToken {
				w.SetAnnotations(map[string]string{coordv1alpha1.FencingTokenAnnotation: token})
			}
			expectRefused(users["bob"].Create(suiteCtx, w), code, msg)
		},
		Entry("missing token", "job", "", false, int32(400), "missing fencing token"),
		Entry("empty token", "job", "", true, int32(400), "is empty"),
		Entry("non-numeric", "job", "abc", true, int32(400), `"abc" is not a decimal integer`),
		Entry("negative", "job", "-1", true, int32(400), "is negative"),
		Entry("overflowing int64", "job", "9223372036854775808", true, int32(400), "overflows int64"),
		Entry("unknown lease", "nope", "1", true, int32(404), "does not exist"),
		Entry("a token never issued", "job", "999999", true, int32(409), "was never issued"),
	)

	It("never matches coordination.k8s.io Leases, FencedLeases, or the operator's namespace (I7)", func() {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain",
			Labels:      map[string]string{coordv1alpha1.GuardLeaseLabel: "job"},
			Annotations: map[string]string{coordv1alpha1.FencingTokenAnnotation: "garbage"}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("x")}}
		Expect(users["alice"].Create(suiteCtx, l)).To(Succeed())
		Expect(k8sClient.Create(suiteCtx, widget(operatorNamespace, "own", "job", "garbage", "operator"))).To(Succeed())
	})
})

var _ = Describe("Mandatory fencing for a kind in a namespace", func() {
	It("refuses unguarded writes and guard removal, and accepts guarded ones", func() {
		ns := newNamespace()
		nsObj := &corev1.Namespace{}
		Expect(k8sClient.Get(suiteCtx, types.NamespacedName{Name: ns}, nsObj)).To(Succeed())
		nsObj.Labels[coordv1alpha1.FencingNamespaceLabel] = "required"
		Expect(k8sClient.Update(suiteCtx, nsObj)).To(Succeed())
		p := startController(false)
		DeferCleanup(p.stop)
		_, current := staleAndCurrent(ns)
		expectRefused(users["bob"].Create(suiteCtx, widget(ns, "free", "", "", "bob")), 403, "fencing is required for this kind")
		Expect(users["bob"].Create(suiteCtx, widget(ns, "w", "job", tok(current), "bob"))).To(Succeed())
		w := getWidget(ns, "w")
		w.SetLabels(nil)
		expectRefused(users["bob"].Update(suiteCtx, w), 403, "cannot be removed")
		// Other kinds in the namespace are not affected.
		Expect(users["bob"].Create(suiteCtx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "free"}})).To(Succeed())
	})
})

var _ = Describe("The seeds' scenario with the client helper", func() {
	It("refuses a paused holder's writes after a takeover on every path; the object keeps the new holder's data", func() {
		ns := newNamespace()
		p := startController(false)
		DeferCleanup(p.stop)
		newLease(ns, "job", 2, 0)
		jA, jB := &testenv.Journal{}, &testenv.Journal{}
		pausedA := &pausableClient{WithWatch: users["alice"]}
		a := startElectorWithClient(pausedA, ns, "job", "alice", jA)
		DeferCleanup(a.stop)
		Eventually(jA.Identities, 10*time.Second).Should(HaveLen(1))
		tokenA := jA.Snapshot()[0].Token
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
		staleA := fence.NewFencedClient(users["alice"], "job", testenv.FixedToken(tokenA))
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
		w, err := k8sClient.Watch(suiteCtx, &unstructured.UnstructuredList{Object: map[string]any{
			"apiVersion": "example.kubefence.io/v1", "kind": "WidgetList"}},
			client.InNamespace(ns))
		Expect(err).NotTo(HaveOccurred())
		defer w.Stop()
		var mu sync.Mutex
		var accepted []int64
		go func() {
			for ev := range w.ResultChan() {
				u, ok := ev.Object.(*unstructured.Unstructured)
				if !ok {
					continue
				}
				if t, err := strconv.ParseInt(u.GetAnnotations()[coordv1alpha1.FencingTokenAnnotation], 10, 64); err == nil {
					mu.Lock()
					accepted = append(accepted, t)
					mu.Unlock()
				}
			}
		}()

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
						err := fence.NewFencedClient(users[user], "race", testenv.FixedToken(mine)).Patch(ctx, widget(ns, "w", "", "", ""),
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
		mu.Lock()
		defer mu.Unlock()
		GinkgoWriter.Printf("writes %d, refused as stale %d, accepted versions %d\n", writes, refusals, len(accepted))
		Expect(refusals).To(BeNumerically(">", 0), "stale writes were attempted and refused")
		Expect(len(accepted)).To(BeNumerically(">=", 5), "writes were accepted while the lease moved")
		for i := 1; i < len(accepted); i++ {
			Expect(accepted[i]).To(BeNumerically(">=", accepted[i-1]), "accepted tokens went down: %v", accepted)
		}
	})
})

// cleanupUser is a client authenticated as one of the cluster's clean-up
// controllers (fencing.DefaultCleanupUsers), with the lease clients' rights.
func cleanupUser(name string) client.Client {
	GinkgoHelper()
	c, _, err := testenv.UserClient(cluster.Env, cluster.Scheme, envtest.User{Name: name, Groups: []string{"kubefence:clients"}})
	Expect(err).NotTo(HaveOccurred())
	return c
}

// staleCauses returns the typed causes of a stale refusal, field by field.
func staleCauses(err error) map[string]string {
	var st apierrors.APIStatus
	ExpectWithOffset(1, errors.As(err, &st)).To(BeTrue(), "an API status: %v", err)
	ExpectWithOffset(1, st.Status().Details).NotTo(BeNil(), "status details: %v", err)
	out := map[string]string{}
	for _, c := range st.Status().Details.Causes {
		if c.Type == coordv1alpha1.CauseTypeStaleFencingToken {
			out[c.Field] = c.Message
		}
	}
	return out
}
