package fence_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence"
)

// One replica competes for the FencedLease jobs/scheduler and, while it
// leads, writes through a client that stamps every write with its fencing
// token. It needs an API server with kubefence installed, so it only compiles.
func Example() {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		log.Fatal(err)
	}
	if err := coordv1alpha1.AddToScheme(scheme); err != nil {
		log.Fatal(err)
	}
	cl, err := client.NewWithWatch(ctrl.GetConfigOrDie(), client.Options{Scheme: scheme})
	if err != nil {
		log.Fatal(err)
	}

	var elector *fence.Elector
	elector, err = fence.New(fence.Config{
		Client: cl, Namespace: "jobs", Name: "scheduler", Identity: "scheduler-0",
		Callbacks: fence.Callbacks{
			// In its own goroutine; ctx ends before the lease could expire.
			OnStartedLeading: func(ctx context.Context, token int64) {
				writes := elector.Client(cl)
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "jobs", Name: "schedule",
					Labels: map[string]string{coordv1alpha1.GuardLeaseLabel: "scheduler"}}}
				if err := writes.Create(ctx, cm); fence.IsStale(err) {
					return // a newer holder exists; the Elector has stepped down
				}
			},
			// On Run's goroutine: return quickly.
			OnStoppedLeading: func(token int64) { log.Printf("stopped leading with token %d", token) },
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	// Run competes until ctx ends, then withdraws the request (releasing the
	// lease at once when it holds it).
	if err := elector.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

// A refusal of the fencing webhook carries typed causes; IsStale reads them,
// so it does not depend on the message's wording. Ordinary conflicts are not
// stale.
func ExampleIsStale() {
	refusal := &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusConflict, Reason: metav1.StatusReasonConflict,
		Message: "admission webhook denied the request: write refused",
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{
			{Type: coordv1alpha1.CauseTypeStaleFencingToken, Field: coordv1alpha1.CauseFieldLease, Message: "jobs/scheduler"},
			{Type: coordv1alpha1.CauseTypeStaleFencingToken, Field: coordv1alpha1.CauseFieldPresentedToken, Message: "41"},
			{Type: coordv1alpha1.CauseTypeStaleFencingToken, Field: coordv1alpha1.CauseFieldCurrentToken, Message: "42"},
		}},
	}}
	conflict := apierrors.NewConflict(corev1.Resource("configmaps"), "schedule", errors.New("the object has been modified"))

	fmt.Println(fence.IsStale(refusal))
	fmt.Println(fence.IsStale(fmt.Errorf("writing the schedule: %w", refusal)))
	fmt.Println(fence.IsStale(conflict))
	// Output:
	// true
	// true
	// false
}
