package cleanup_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/controllers/policy"
	"github.com/kubefence/kubefence/hack/devenv"
	"github.com/kubefence/kubefence/pkg/fence"
	"github.com/kubefence/kubefence/test/testenv"
)

// TestCleanupWithKubeControllerManagerPolicyMode: in policy mode, on a
// control plane of its own (the suite's runs the webhooks), the real
// namespace controller (--use-service-account-credentials) deletes a
// namespace labelled kubefence.io/fencing=required that holds a held
// FencedLease, guarded Widgets and ConfigMaps and the tenure table, and the
// namespace finishes (safety review 2026-12-01, finding 5: the table could
// go first, after which the bindings' parameterNotFoundAction: Deny refused
// every delete of a guarded object; docs/design.md, "A terminating
// namespace").
func TestCleanupWithKubeControllerManagerPolicyMode(t *testing.T) {
	testenv.SkipIfShort(t)
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(suiteCtx)
	pc, err := testenv.Start(ctx, testenv.Input{Root: "../..", CRDs: true, Policy: true, Namespace: operatorNamespace})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() {
		cancel()
		if err := pc.Stop(); err != nil {
			t.Errorf("stopping the policy-mode control plane: %v", err)
		}
	})
	o := pc.Operator()
	o.Enforcement = operator.EnforcementPolicy
	o.RequiredKinds = []schema.GroupResource{{Group: "example.kubefence.io", Resource: "widgets"}}
	_, err = pc.ServeOperator(ctx, o, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() error {
		return pc.Admin.Get(ctx, client.ObjectKey{Name: policy.TerminatingPolicyName}, &admissionv1.ValidatingAdmissionPolicyBinding{})
	}).WithTimeout(20*time.Second).Should(Succeed(), "the policies are not applied")

	// alice, a lease client; kube-controller-manager's own identity.
	g.Expect(pc.Admin.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "cleanup-client"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{coordv1alpha1.GroupVersion.Group}, Resources: []string{"fencedleases"}, Verbs: []string{"get", "list", "watch", "update", "patch"}},
		{APIGroups: []string{"example.kubefence.io"}, Resources: []string{"widgets"}, Verbs: devenv.AllVerbs},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: devenv.AllVerbs},
	}})).To(Succeed())
	g.Expect(pc.Admin.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "cleanup-client"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cleanup-client"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, Name: "kubefence:clients"}}})).To(Succeed())
	alice, _, err := pc.User("alice", "kubefence:clients")
	g.Expect(err).NotTo(HaveOccurred())
	kubeconfig, err := kcmIdentity(ctx, pc, "cleanup-kcm-admin")
	g.Expect(err).NotTo(HaveOccurred())
	k := startKCMOn(t, pc, kubeconfig, true)

	// The namespace: required fencing, a held lease, guarded Widgets and
	// ConfigMaps, the table.
	ns, err := pc.Namespace(ctx, "policy-ns-delete")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pc.Admin.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"kubefence.io/fencing":"required"}}}`)))).To(Succeed())
	el, stopEl := leadJob(ctx, g, pc, alice, ns)
	t.Cleanup(stopEl)
	fa := el.Client(alice)
	for _, name := range []string{"a", "b"} {
		g.Expect(fa.Create(ctx, widget(ns, name))).To(Succeed())
		g.Expect(fa.Create(ctx, configMap(ns, name))).To(Succeed())
	}
	g.Expect(pc.Admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: coordv1alpha1.TenureTableName}, &corev1.ConfigMap{})).To(Succeed())

	start := time.Now()
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	g.Expect(pc.Admin.Delete(ctx, nsObj)).To(Succeed())
	g.Eventually(func(g Gomega) {
		k.running(t)
		err := pc.Admin.Get(ctx, client.ObjectKeyFromObject(nsObj), nsObj)
		g.Expect(err).To(HaveOccurred(), "namespace %s still there: %+v", ns, nsObj.Status.Conditions)
		g.Expect(client.IgnoreNotFound(err)).To(Succeed())
	}).WithTimeout(60*time.Second).WithPolling(100*time.Millisecond).Should(Succeed(), "namespace %s did not finish terminating", ns)
	t.Logf("policy mode: namespace with a held FencedLease, guarded Widgets and ConfigMaps and the tenure table deleted in %v", time.Since(start).Round(time.Millisecond))
}

// leadJob creates FencedLease ns/job (30 s) on c and runs an elector for
// alice (client) on it until she leads; stop ends the elector and waits for
// it to return.
func leadJob(ctx context.Context, g Gomega, c *testenv.Cluster, alice client.WithWatch, ns string) (el *fence.Elector, stop func()) {
	g.Expect(c.Admin.Create(ctx, &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "job"},
		Spec: coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: 30}})).To(Succeed())
	el, err := fence.New(fence.Config{Client: alice, Namespace: ns, Name: "job", Identity: "alice", User: "alice",
		Callbacks: fence.Callbacks{OnStartedLeading: func(ctx context.Context, _ int64) { <-ctx.Done() }}})
	g.Expect(err).NotTo(HaveOccurred())
	elCtx, stopEl := context.WithCancel(ctx)
	elDone := make(chan struct{})
	go func() { defer close(elDone); _ = el.Run(elCtx) }()
	stop = func() { stopEl(); <-elDone }
	g.Eventually(func() bool { _, ok := el.Token(); return ok }).WithTimeout(30*time.Second).WithPolling(20*time.Millisecond).
		Should(BeTrue(), "alice does not lead")
	return el, stop
}
