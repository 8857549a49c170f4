// Package example is a controller written the way a controller author would
// use kubefence: one option (pkg/fence/manager) makes a FencedLease its leader
// election, and every write goes through the manager's fenced client.
//
// It reconciles Widgets (example.kubefence.io/v1, test/crds) as unstructured
// objects: it writes its own identity into spec.writer and a phase into
// status.phase. Two replicas run it in example_test.go.
package example

import (
	"context"
	"errors"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence"
	fencemanager "github.com/kubefence/kubefence/pkg/fence/manager"
)

// WidgetGVK is the kind the example reconciles.
var WidgetGVK = schema.GroupVersionKind{Group: "example.kubefence.io", Version: "v1", Kind: "Widget"}

// PhasePrefix starts the status.phase the example writes; the writer's
// identity follows it.
const PhasePrefix = "ReconciledBy:"

// NewManager is the example's main: a manager whose leader election is the
// FencedLease of lease, with the Widget reconciler writing through the fenced
// client.
func NewManager(cfg *rest.Config, opts ctrl.Options, lease fencemanager.LeaseOptions) (*fencemanager.Manager, error) {
	mgr, err := fencemanager.New(cfg, opts, lease) // the one line that fences the controller
	if err != nil {
		return nil, err
	}
	r := &Reconciler{Client: mgr.GetFencedClient(), Identity: mgr.Elector().Identity()}
	if err := r.SetupWithManager(mgr); err != nil {
		return nil, err
	}
	return mgr, nil
}

// Reconciler makes every Widget say who reconciled it.
type Reconciler struct {
	// Client must be a fenced client (Manager.GetFencedClient): it stamps the
	// guard label and the token on every write.
	Client client.Client
	// Identity is written into spec.writer and status.phase.
	Identity string
}

// SetupWithManager registers the reconciler for Widgets.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	w := &unstructured.Unstructured{}
	w.SetGroupVersionKind(WidgetGVK)
	return ctrl.NewControllerManagedBy(mgr).For(w).Named("widget").Complete(r)
}

// Reconcile writes spec.writer (which also guards the Widget with the lease)
// and then status.phase.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	w := &unstructured.Unstructured{}
	w.SetGroupVersionKind(WidgetGVK)
	if err := r.Client.Get(ctx, req.NamespacedName, w); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	writer, _, _ := unstructured.NestedString(w.Object, "spec", "writer")
	if writer != r.Identity || w.GetLabels()[coordv1alpha1.GuardLeaseLabel] == "" {
		orig := w.DeepCopy()
		if err := unstructured.SetNestedField(w.Object, r.Identity, "spec", "writer"); err != nil {
			return ctrl.Result{}, err
		}
		if err := r.Client.Patch(ctx, w, client.MergeFrom(orig)); err != nil {
			return r.failed(ctx, err)
		}
	}
	phase, _, _ := unstructured.NestedString(w.Object, "status", "phase")
	if want := PhasePrefix + r.Identity; phase != want {
		orig := w.DeepCopy()
		if err := unstructured.SetNestedField(w.Object, want, "status", "phase"); err != nil {
			return ctrl.Result{}, err
		}
		if err := r.Client.Status().Patch(ctx, w, client.MergeFrom(orig)); err != nil {
			return r.failed(ctx, err)
		}
	}
	return ctrl.Result{}, nil
}

// failed handles a refused write. A stale refusal means another replica holds
// the lease now: the fenced client has already ended the tenure, so retrying
// is pointless.
func (r *Reconciler) failed(ctx context.Context, err error) (ctrl.Result, error) {
	if fence.IsStale(err) || errors.Is(err, fence.ErrNotLeading) {
		logf.FromContext(ctx).Info("Write not accepted: this replica does not lead", "identity", r.Identity, "error", err.Error())
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, err
}
