package tenure_test

import (
	"fmt"
	"strconv"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/hack/devenv"
	"github.com/kubefence/kubefence/pkg/fence"
)

func mergePatch(format string, args ...any) client.Patch {
	return client.RawPatch(types.MergePatchType, fmt.Appendf(nil, format, args...))
}

var _ = Describe("A non-holder cannot depose the holder", func() {
	It("refuses a client's ownerReferences, finalizers and the deletion of a held lease, and leases where nothing is fenced", func() {
		ns, _, _ := leadsNew("alice")
		l := getLease(ns, "job")
		m := users["mallory"] // may get, update, patch, create and delete FencedLeases (RBAC)
		err := m.Patch(suiteCtx, l.DeepCopy(), mergePatch(`{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"gone","uid":"6f1c6e0e-0000-4000-8000-000000000000"}]}}`))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a dangling ownerReference was accepted (the garbage collector would delete the lease): %v", err)
		Expect(err.Error()).To(ContainSubstring("ownerReferences"))
		err = m.Patch(suiteCtx, l.DeepCopy(), jsonPatch(map[string]any{"op": "add", "path": "/metadata/finalizers/-", "value": "x.example/never"}))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a foreign finalizer was accepted: %v", err)
		err = m.Delete(suiteCtx, l.DeepCopy())
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a client deleted a held lease: %v", err)
		Expect(err.Error()).To(ContainSubstring("is held by alice"))
		Expect(getLease(ns, "job").Status.HolderIdentity).To(Equal("alice"))

		// A lease nobody holds may be deleted by whoever RBAC allows.
		newLease(ns, "idle", 30)
		Expect(m.Delete(suiteCtx, &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "idle"}})).To(Succeed())

		// An operator must revoke with the annotation, so the controller waits
		// for the holder's admitted writes.
		l = getLease(ns, "job")
		err = users["operator"].Patch(suiteCtx, l.DeepCopy(), jsonPatch(
			map[string]any{"op": "test", "path": "/spec/requests/0/holderIdentity", "value": "alice"},
			map[string]any{"op": "remove", "path": "/spec/requests/0"}))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "an operator removed the holder's request without revoking: %v", err)
		Expect(err.Error()).To(ContainSubstring("coordination.kubefence.io/revoked=alice/"))

		// Where the fencing webhooks never look, a lease is refused outright.
		err = users["operator"].Create(suiteCtx, &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "job"},
			Spec: coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: 15}})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a FencedLease in kube-system was accepted: %v", err)
		Expect(err.Error()).To(ContainSubstring("never look at it"))
	})
})

var _ = Describe("Built-in kinds keep metadata on their subresources", func() {
	It("puts pods/status and deployments/status under the token and holder rules", func() {
		ns, fb, pod := leadsWithPod("bob")
		// The holder, on the identity path, cannot rewrite the token through /status.
		for _, t := range []string{"999999999999", "0"} {
			err := users["bob"].Status().Patch(suiteCtx, pod.DeepCopy(), mergePatch(`{"metadata":{"annotations":{%q:%q}}}`, coordv1alpha1.FencingTokenAnnotation, t))
			Expect(err).To(HaveOccurred(), "pods/status set the token to %s without a token check", t)
		}
		// A non-holder cannot remove the guard through /status.
		err := users["alice"].Status().Patch(suiteCtx, pod.DeepCopy(), mergePatch(`{"metadata":{"labels":{%q:null}}}`, coordv1alpha1.GuardLeaseLabel))
		Expect(err).To(HaveOccurred(), "a non-holder removed the guard through pods/status")
		// The holder's ordinary status write is accepted.
		Expect(fb.Status().Patch(suiteCtx, pod.DeepCopy(), mergePatch(`{"status":{"message":"ok"}}`))).To(Succeed())

		dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "d"},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "d"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "d"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}}}}}
		Expect(fb.Create(suiteCtx, dep)).To(Succeed())
		err = users["bob"].Status().Patch(suiteCtx, dep.DeepCopy(), mergePatch(`{"metadata":{"annotations":{%q:"999999999999"}}}`, coordv1alpha1.FencingTokenAnnotation))
		Expect(err).To(HaveOccurred(), "deployments/status set the token without a token check")
		Expect(fb.Status().Patch(suiteCtx, dep.DeepCopy(), mergePatch(`{"status":{"observedGeneration":1}}`))).To(Succeed())

	})
})

var _ = Describe("FencedClient.Apply stamps server-side apply configurations", func() {
	It("applies typed and unstructured apply configurations with the guard and the token, and refuses a stale token as stale", func() {
		ns, alice, n := leadsNew("alice")
		fa := alice.el.Client(users["alice"])

		// A client-go apply configuration (typed), and a Widget through
		// client.ApplyConfigurationFromUnstructured.
		cm := corev1ac.ConfigMap("applied", ns).WithData(map[string]string{"writer": "alice"})
		Expect(fa.Apply(suiteCtx, cm, client.FieldOwner("alice"))).To(Succeed())
		Expect(cm.UID).NotTo(BeNil(), "the API server's answer was not written back into the apply configuration")
		var gotCM corev1.ConfigMap
		Expect(cluster.Admin.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: "applied"}, &gotCM)).To(Succeed())
		Expect(gotCM.Labels).To(HaveKeyWithValue(coordv1alpha1.GuardLeaseLabel, "job"))
		Expect(gotCM.Annotations).To(HaveKeyWithValue(coordv1alpha1.FencingTokenAnnotation, strconv.FormatInt(n, 10)))
		Expect(gotCM.Data).To(HaveKeyWithValue("writer", "alice"))

		w := widget(ns, "applied")
		Expect(fa.Apply(suiteCtx, client.ApplyConfigurationFromUnstructured(w), client.FieldOwner("alice"))).To(Succeed())
		Expect(getWidget(ns, "applied").GetAnnotations()).To(HaveKeyWithValue(coordv1alpha1.FencingTokenAnnotation, strconv.FormatInt(n, 10)))

		// Bob takes over and applies with his token.
		bob := startElector("bob", ns, "job")
		Eventually(func() int { return len(getLease(ns, "job").Spec.Requests) }).Should(Equal(2))
		Expect(alice.el.Release(suiteCtx)).To(Succeed())
		nb := bob.leading()
		Expect(nb).To(BeNumerically(">", n))
		fb := bob.el.Client(users["bob"])
		Expect(fb.Apply(suiteCtx, corev1ac.ConfigMap("applied", ns).WithData(map[string]string{"writer": "bob"}), client.FieldOwner("alice"))).To(Succeed())
		Expect(cluster.Admin.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: "applied"}, &gotCM)).To(Succeed())
		Expect(gotCM.Annotations).To(HaveKeyWithValue(coordv1alpha1.FencingTokenAnnotation, strconv.FormatInt(nb, 10)))

		// Alice's apply with her old token is refused as stale, on both objects.
		stale := fence.NewFencedClient(users["alice"], "job", devenv.FixedToken(n))
		err := stale.Apply(suiteCtx, corev1ac.ConfigMap("applied", ns).WithData(map[string]string{"writer": "alice"}), client.FieldOwner("alice"))
		Expect(err).To(HaveOccurred(), "token %d applied after token %d was granted", n, nb)
		Expect(fence.IsStale(err)).To(BeTrue(), "refusal not recognised as stale: %v", err)
		w = widget(ns, "applied")
		_ = unstructured.SetNestedField(w.Object, "alice-again", "spec", "writer")
		err = stale.Apply(suiteCtx, client.ApplyConfigurationFromUnstructured(w), client.FieldOwner("alice"))
		Expect(fence.IsStale(err)).To(BeTrue(), "stale apply of a Widget: %v", err)
		Expect(cluster.Admin.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: "applied"}, &gotCM)).To(Succeed())
		Expect(gotCM.Data).To(HaveKeyWithValue("writer", "bob"))
		Expect(getWidget(ns, "applied").Object["spec"]).To(HaveKeyWithValue("writer", "init"))
	})
})

var _ = Describe("Pod evictions are fenced", func() {
	It("refuses a non-holder's eviction of a guarded pod as stale and accepts the holder's", func() {
		ns, _, pod := leadsWithPod("bob")
		evict := func(user string) error {
			return users[user].SubResource("eviction").Create(suiteCtx, pod.DeepCopy(),
				&policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}})
		}
		err := evict("alice")
		Expect(err).To(HaveOccurred(), "a non-holder evicted a guarded pod")
		Expect(fence.IsStale(err)).To(BeTrue(), "refusal not recognised as stale: %v", err)
		Expect(err.Error()).To(ContainSubstring("alice is not the holder of lease " + ns + "/job"))
		Expect(cluster.Admin.Get(suiteCtx, client.ObjectKeyFromObject(pod), &corev1.Pod{})).To(Succeed())

		Expect(evict("bob")).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(cluster.Admin.Get(suiteCtx, client.ObjectKeyFromObject(pod), &corev1.Pod{}))
		}).Should(BeTrue(), "the holder's eviction did not delete the pod")
		// An unguarded pod is not fenced: anyone RBAC allows evicts it.
		free := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "free"}, Spec: pod.Spec}
		Expect(users["alice"].Create(suiteCtx, free)).To(Succeed())
		Expect(users["alice"].SubResource("eviction").Create(suiteCtx, free,
			&policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "free"}})).To(Succeed())
	})
})
