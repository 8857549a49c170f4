package enforcement_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/controllers/policy"
)

// clusterWidget is a ClusterWidget (test/crds, cluster-scoped) called name,
// carrying the guard of lease job with token when guarded.
func clusterWidget(name string, guarded bool, token string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("example.kubefence.io/v1")
	u.SetKind("ClusterWidget")
	u.SetName(name)
	if guarded {
		u.SetLabels(map[string]string{coordv1alpha1.GuardLeaseLabel: "job"})
		u.SetAnnotations(map[string]string{coordv1alpha1.FencingTokenAnnotation: token})
	}
	return u
}

// uncheckableMessage is in both back ends' refusal of a guard on a
// cluster-scoped object.
const uncheckableMessage = "this object is cluster-scoped, so no FencedLease can check its fencing guard"

// TestClusterScopedGuardIsRefused: a cluster-scoped object names no
// namespace, so no FencedLease can check the token its guard carries
// (docs/design.md, I5, "Cluster-scoped objects and other namespaces").
// In both modes a create or update that leaves the guard on a
// ClusterWidget is refused with a message saying what to do, whatever the
// token; unguarded writes of the same kind, and deleting it, still pass.
// Without the cluster-scoped webhook entry (config/webhook/fencing.yaml
// entry 5) and the policy kubefence-fencing-cluster-scoped every guarded
// write here was accepted.
func TestClusterScopedGuardIsRefused(t *testing.T) {
	for _, mode := range []string{operator.EnforcementWebhook, operator.EnforcementPolicy} {
		t.Run(mode, func(t *testing.T) {
			h := start(t, mode)
			refused := func(what string, err error) {
				t.Helper()
				var st apierrors.APIStatus
				switch {
				case err == nil:
					t.Errorf("%s: accepted, want refused (%s)", what, uncheckableMessage)
				case !errors.As(err, &st):
					t.Errorf("%s: not an API status: %v", what, err)
				case !strings.Contains(st.Status().Message, uncheckableMessage) || !strings.Contains(st.Status().Message, "remove the "+coordv1alpha1.GuardLeaseLabel+" label"):
					t.Errorf("%s: message %q does not say the guard cannot be checked and what to do", what, st.Status().Message)
				case mode == operator.EnforcementPolicy && !strings.Contains(st.Status().Message, "ValidatingAdmissionPolicy '"+policy.ClusterScopedPolicyName+"'"):
					t.Errorf("%s: refused, but not by policy %s: %s", what, policy.ClusterScopedPolicyName, st.Status().Message)
				}
			}
			prefix := mode + "-"
			h.eventually(t, 20*time.Second, "the guard on a cluster-scoped object is refused", func() error {
				if err := h.admin.Create(h.ctx, clusterWidget(prefix+"probe", true, "1"), client.DryRunAll); err == nil {
					return fmt.Errorf("a guarded ClusterWidget is accepted")
				}
				return nil
			})
			for _, token := range []string{"0", "1", "999"} {
				refused("create guarded with token "+token, h.admin.Create(h.ctx, clusterWidget(prefix+"guarded-"+token, true, token)))
			}
			refused("create guarded by alice", h.users["alice"].Create(h.ctx, clusterWidget(prefix+"alice", true, "1")))
			// A Namespace is cluster-scoped too, although the API server
			// names it as its own request's namespace.
			refused("create a guarded Namespace", h.admin.Create(h.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: prefix + "guarded",
				Labels: map[string]string{coordv1alpha1.GuardLeaseLabel: "job"}, Annotations: map[string]string{coordv1alpha1.FencingTokenAnnotation: "1"}}}))

			plain := clusterWidget(prefix+"plain", false, "")
			if err := h.admin.Create(h.ctx, plain); err != nil {
				t.Fatalf("an unguarded ClusterWidget: refused, want accepted: %v", err)
			}
			plain.Object["spec"] = map[string]any{"writer": "admin"}
			if err := h.admin.Update(h.ctx, plain); err != nil {
				t.Errorf("an update of an unguarded ClusterWidget: refused, want accepted: %v", err)
			}
			guard := plain.DeepCopy()
			guard.SetLabels(map[string]string{coordv1alpha1.GuardLeaseLabel: "job"})
			guard.SetAnnotations(map[string]string{coordv1alpha1.FencingTokenAnnotation: "1"})
			refused("update adding the guard", h.admin.Update(h.ctx, guard))
			label := plain.DeepCopy()
			label.SetLabels(map[string]string{coordv1alpha1.GuardLeaseLabel: "job"})
			refused("update adding the guard label alone", h.admin.Update(h.ctx, label))
			if err := h.admin.Get(h.ctx, client.ObjectKeyFromObject(plain), plain); err != nil {
				t.Fatal(err)
			}
			if _, ok := plain.GetLabels()[coordv1alpha1.GuardLeaseLabel]; ok {
				t.Errorf("the ClusterWidget carries the guard after the refused updates: %v", plain.GetLabels())
			}
			// A token annotation without the label guards nothing and is not
			// judged (the objectSelector keeps it out).
			tokenOnly := plain.DeepCopy()
			tokenOnly.SetAnnotations(map[string]string{coordv1alpha1.FencingTokenAnnotation: "1"})
			if err := h.admin.Update(h.ctx, tokenOnly); err != nil {
				t.Errorf("an update of an unguarded ClusterWidget with a token annotation only: refused, want accepted: %v", err)
			}
			if err := h.admin.Delete(h.ctx, plain); err != nil {
				t.Errorf("deleting an unguarded ClusterWidget: %v", err)
			}
		})
	}
}
