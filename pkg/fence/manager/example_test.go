package manager_test

import (
	"errors"
	"fmt"
	"log"
	"os"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence"
	fencemanager "github.com/kubefence/kubefence/pkg/fence/manager"
)

// A controller-runtime manager whose leader election is the FencedLease
// team-a/widget-controller. Its reconcilers write through GetFencedClient;
// /readyz fails with "lease never seen: <reason>" until the lease has been
// read (no lease, no RoleBinding, the webhook down), and the log and
// kubefence_client_lease_errors_total say why. It needs an API server with
// kubefence installed and the objects of Example_platformTeam, so it only
// compiles.
func ExampleNew() {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		log.Fatal(err)
	}
	metrics, err := fence.NewMetrics(crmetrics.Registry) // opt-in client metrics on /metrics
	if err != nil {
		log.Fatal(err)
	}
	mgr, err := fencemanager.New(ctrl.GetConfigOrDie(),
		ctrl.Options{Scheme: scheme, HealthProbeBindAddress: ":8081"}, // LeaderElection stays off
		fencemanager.LeaseOptions{Namespace: "team-a", Name: "widget-controller", Metrics: metrics})
	if err != nil {
		log.Fatal(err)
	}
	_ = mgr.GetFencedClient() // give it to the reconcilers: every write carries the token
	// ... ctrl.NewControllerManagedBy(mgr).For(&Widget{}).Complete(reconciler)
	if err := mgr.Start(ctrl.SetupSignalHandler()); errors.Is(err, fencemanager.ErrLeaseLost) {
		os.Exit(1) // controllers cannot start twice: let Kubernetes restart the pod
	} else if err != nil {
		log.Fatal(err)
	}
}

// What the platform team applies before the controller of ExampleNew starts:
// the FencedLease (its duration and lock-delay are theirs to choose) and a
// RoleBinding of the controller's service account to the candidate role
// kubefence installs (get, list, watch, update and patch FencedLeases; no
// create, no delete). With LeaseOptions.CreateIfMissing the controller creates
// a missing lease itself, with the API's defaults, if a Role also grants it
// create on fencedleases.
func Example_platformTeam() {
	lease := &coordv1alpha1.FencedLease{
		TypeMeta:   metav1.TypeMeta{APIVersion: coordv1alpha1.GroupVersion.String(), Kind: "FencedLease"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "widget-controller"},
		Spec:       coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: 15},
	}
	binding := &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "RoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "widget-controller-lease"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kubefence-fencedlease-candidate-role"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "team-a", Name: "widget-controller"}},
	}
	for _, obj := range []any{lease, binding} {
		out, err := yaml.Marshal(obj)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("---\n%s", strings.Replace(string(out), "status: {}\n", "", 1))
	}
	// Output:
	// ---
	// apiVersion: coordination.kubefence.io/v1alpha1
	// kind: FencedLease
	// metadata:
	//   name: widget-controller
	//   namespace: team-a
	// spec:
	//   leaseDurationSeconds: 15
	// ---
	// apiVersion: rbac.authorization.k8s.io/v1
	// kind: RoleBinding
	// metadata:
	//   name: widget-controller-lease
	//   namespace: team-a
	// roleRef:
	//   apiGroup: rbac.authorization.k8s.io
	//   kind: ClusterRole
	//   name: kubefence-fencedlease-candidate-role
	// subjects:
	// - kind: ServiceAccount
	//   name: widget-controller
	//   namespace: team-a
}
