package policy

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// NamespaceMarker labels every namespace being deleted (outside the
// excluded ones) TerminatingLabel=true, which moves its guarded objects from
// the fencing policy's bindings to TerminatingBinding. A binding cannot see
// a namespace's phase, and its parameterNotFoundAction is decided before any
// CEL runs: without the mark, the namespace controller's deletes of guarded
// objects are refused for good once it has deleted the tenure table, and the
// namespace never finishes terminating (docs/design.md, "A terminating
// namespace"). It runs on the leader only.
type NamespaceMarker struct {
	Client client.Client
	// Excluded namespaces are not fenced: never marked.
	Excluded []string
}

// SetupWithManager watches the metadata of namespaces being deleted.
func (m *NamespaceMarker) SetupWithManager(mgr ctrl.Manager) error {
	unmarked := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return !o.GetDeletionTimestamp().IsZero() && o.GetLabels()[TerminatingLabel] != "true" && !slices.Contains(m.Excluded, o.GetName())
	})
	return ctrl.NewControllerManagedBy(mgr).Named("kubefence-terminating-namespaces").
		For(&corev1.Namespace{}, builder.OnlyMetadata, builder.WithPredicates(unmarked)).
		Complete(m)
}

// Reconcile marks namespace req.Name if it is being deleted.
func (m *NamespaceMarker) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if slices.Contains(m.Excluded, req.Name) {
		return ctrl.Result{}, nil
	}
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err := m.Client.Get(ctx, client.ObjectKey{Name: req.Name}, ns); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if ns.DeletionTimestamp.IsZero() || ns.Labels[TerminatingLabel] == "true" {
		return ctrl.Result{}, nil
	}
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:"true"}}}`, TerminatingLabel)
	if err := m.Client.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: req.Name}}, client.RawPatch(types.MergePatchType, patch)); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("marking namespace %s, which is being deleted, %s=true: %w", req.Name, TerminatingLabel, err)
	}
	logf.FromContext(ctx).Info("Marked a namespace being deleted: only clean-up writes to its guarded objects are accepted now", "namespace", req.Name, "label", TerminatingLabel)
	return ctrl.Result{}, nil
}
