package enforcement_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/operator"
)

// TestEvictionScope is the eviction webhook's default scope, in both modes:
// only namespaces labelled kubefence.io/fencing. A pod cannot become guarded
// elsewhere (the pod-scope entry refuses its create and the update that adds
// the guard, naming the label), so every guarded pod's eviction stays fenced;
// and with every operator process down, an eviction outside the scope
// succeeds at once, while one inside it fails closed.
func TestEvictionScope(t *testing.T) {
	for _, mode := range []string{operator.EnforcementWebhook, operator.EnforcementPolicy} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel() // a control plane of its own
			h := start(t, mode)
			s := h.situation(t, nil) // labelled kubefence.io/fencing=enabled; bob holds s.ns/job
			other := h.namespace(t, map[string]string{})
			h.lease(t, other, "job", 30)
			// bob holds other/job too: his guarded writes there pass the
			// fencing rule, and only the namespace's scope can refuse them.
			_, otherToken := h.lead(t, "bob", other, "job")
			token := map[string]int64{s.ns: s.current, other: otherToken}
			pod := func(ns, name string, guarded bool) *corev1.Pod {
				p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}}}
				if guarded {
					p.Labels = map[string]string{coordv1alpha1.GuardLeaseLabel: "job"}
					p.Annotations = map[string]string{coordv1alpha1.FencingTokenAnnotation: tok(token[ns])}
				}
				return p
			}
			evict := func(user, ns, name string) error {
				return h.users[user].SubResource("eviction").Create(h.ctx, pod(ns, name, false),
					&policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
			}
			outOfScope := func(what string, err error) {
				t.Helper()
				if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "is not labelled "+coordv1alpha1.FencingNamespaceLabel) {
					t.Errorf("%s: %v, want refused (403) naming the namespace label %s", what, err, coordv1alpha1.FencingNamespaceLabel)
				}
			}

			must(t, h.users["bob"].Create(h.ctx, pod(s.ns, "guarded", true)))
			must(t, h.users["bob"].Create(h.ctx, pod(s.ns, "free", false)))
			outOfScope("a guarded pod created in an unlabelled namespace", h.users["bob"].Create(h.ctx, pod(other, "guarded", true)))
			must(t, h.users["bob"].Create(h.ctx, pod(other, "free", false)))
			must(t, h.users["bob"].Create(h.ctx, pod(other, "later", false)))
			outOfScope("the guard added to a pod of an unlabelled namespace", h.users["bob"].Patch(h.ctx, pod(other, "later", false), client.RawPatch(types.MergePatchType,
				[]byte(`{"metadata":{"labels":{"`+coordv1alpha1.GuardLeaseLabel+`":"job"},"annotations":{"`+coordv1alpha1.FencingTokenAnnotation+`":"`+tok(otherToken)+`"}}}`))))

			check(t, h, "in scope: a non-holder evicts a guarded pod", evict("alice", s.ns, "guarded"), notHolder(s.ns+"/job"))

			h.stopOperator()
			time.Sleep(500 * time.Millisecond) // the API server's webhook client notices the server is gone
			began := time.Now()
			err := evict("alice", other, "free")
			if took := time.Since(began); err != nil || took > time.Second {
				t.Errorf("operator down: evicting an unguarded pod in an unlabelled namespace: %v after %v, want accepted within 1 s", err, took)
			}
			if err := evict("alice", s.ns, "guarded"); err == nil {
				t.Errorf("operator down: a non-holder evicted a guarded pod in a labelled namespace, want refused (the eviction webhook fails closed)")
			}
			if err := h.admin.Get(h.ctx, client.ObjectKey{Namespace: s.ns, Name: "guarded"}, &corev1.Pod{}); err != nil {
				t.Errorf("operator down: the guarded pod: %v, want it still there", err)
			}
		})
	}
}
