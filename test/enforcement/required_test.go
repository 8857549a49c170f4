package enforcement_test

import (
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/pkg/fence"
	"github.com/kubefence/kubefence/test/testenv"
)

// TestPolicyModeRequiredConfigMapsStillGrant: with
// --required-fencing-kind=configmaps the required binding judges the
// operator's own ConfigMaps in lease namespaces too (the tenure table, the
// epoch store's shards), which carry no guard. The controller users' writes
// of those names are exempt, so the controller still grants a lease in a
// namespace labelled kubefence.io/fencing=required and still lets a deleted
// lease go (its finalizer writes the epoch shard); everyone else's unguarded
// ConfigMaps of those names, and the controller's of other names, are
// refused. Without the exemption the first grant's table write is refused and
// alice never leads.
func TestPolicyModeRequiredConfigMapsStillGrant(t *testing.T) {
	t.Parallel() // a control plane of its own
	h := start(t, operator.EnforcementPolicy)
	h.stopOperator()
	o := h.options()
	o.RequiredKinds = append(o.RequiredKinds, schema.GroupResource{Resource: "configmaps"})
	h.runOperator(t, o)
	required := map[string]string{coordv1alpha1.FencingNamespaceLabel: "required"}
	ns := h.namespace(t, required)
	unguarded := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}
	testenv.Within(t, 20*time.Second, "the required binding covers ConfigMaps", func() error {
		if err := h.admin.Create(h.ctx, unguarded("free"), client.DryRunAll); err == nil {
			return errors.New("an unguarded ConfigMap is still accepted")
		}
		return nil
	})

	h.lease(t, ns, "job", 30)
	alice, token := h.lead(t, "alice", ns, "job")
	check(t, h, "required configmaps: the holder's guarded ConfigMap",
		fence.NewFencedClient(h.users["alice"], "job", fixedToken(token)).Create(h.ctx, unguarded("guarded")), accepted)
	check(t, h, "required configmaps: the controller user's unguarded ConfigMap of another name",
		h.admin.Create(h.ctx, unguarded("free")), plainRefusal("fencing is required for this kind"))
	other := h.namespace(t, required)
	for _, name := range []string{coordv1alpha1.TenureTableName, coordv1alpha1.EpochShardName("job")} {
		err := h.users["alice"].Create(h.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: name}})
		if err == nil || !apierrors.IsForbidden(err) {
			t.Errorf("alice's unguarded ConfigMap %s in a required namespace: %v, want refused", name, err)
		}
	}

	alice.stop()
	must(t, h.admin.Delete(h.ctx, &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "job"}}))
	testenv.Within(t, 20*time.Second, "the deleted lease goes (its epoch is recorded)", func() error {
		err := h.admin.Get(h.ctx, client.ObjectKey{Namespace: ns, Name: "job"}, &coordv1alpha1.FencedLease{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return errors.New("still there")
	})
	must(t, h.admin.Get(h.ctx, client.ObjectKey{Namespace: ns, Name: coordv1alpha1.EpochShardName("job")}, &corev1.ConfigMap{}))
}
