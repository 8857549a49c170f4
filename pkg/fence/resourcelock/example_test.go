package resourcelock_test

import (
	"context"
	"log"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/leaderelection"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence/resourcelock"
)

// A client-go leaderelection.RunOrDie program that swaps its lock for the
// FencedLease jobs/job-a and writes through the lock's fenced client. The
// platform team first applies the FencedLease and a RoleBinding of the
// program's service account to the ClusterRole
// kubefence-fencedlease-candidate-role in namespace jobs (as in package
// manager's Example_platformTeam). client-go logs a missing lease or missing
// RBAC itself ("error retrieving resource lock jobs/job-a: ..."). It needs an
// API server with kubefence installed, so it only compiles.
func ExampleNew() {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		log.Fatal(err)
	}
	if err := coordv1alpha1.AddToScheme(scheme); err != nil {
		log.Fatal(err)
	}
	c, err := client.New(ctrl.GetConfigOrDie(), client.Options{Scheme: scheme}) // uncached
	if err != nil {
		log.Fatal(err)
	}
	lock, err := resourcelock.New(resourcelock.Config{
		Client: c, Namespace: "jobs", Name: "job-a", Identity: os.Getenv("POD_NAME"),
	})
	if err != nil {
		log.Fatal(err)
	}
	fenced := lock.Client(c) // stamps the token on every write; refuses to send without one
	leaderelection.RunOrDie(ctrl.SetupSignalHandler(), leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   15 * time.Second, // advisory: the FencedLease's spec.leaseDurationSeconds decides
		RenewDeadline:   5 * time.Second,
		RetryPeriod:     2 * time.Second,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				_ = fenced // write guarded objects only through fenced (fence.IsStale: the lease moved on)
				<-ctx.Done()
			},
			OnStoppedLeading: func() {},
		},
	})
}
