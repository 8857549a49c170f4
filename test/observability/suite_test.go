// Package observability_test checks that the alerts (config/prometheus/
// prometheus_rule.yaml) and the Grafana dashboard (config/prometheus/
// grafana_dashboard.json) only use metrics that exist: it drives grants,
// renewals and stale refusals through the real webhooks of a real
// kube-apiserver, then reads the API server's /metrics, the operator's
// registry (controller-runtime's metrics.Registry, which the manager serves)
// and pkg/fence's opt-in client metrics.
package observability_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/test/testenv"
)

const (
	operatorNamespace = "kubefence-system"
	// leaderElectionID is cmd/main.go's LeaderElectionID.
	leaderElectionID = "controller.coordination.kubefence.io"
)

var (
	testEnv   *envtest.Environment
	cfg       *rest.Config
	k8sClient client.WithWatch
	adminUser string
	scheme    = runtime.NewScheme()
	suiteCtx  context.Context
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, testenv.Input{Root: "../..", CRDs: true, Webhooks: true}, setup))
}

// setup starts one manager as cmd/main.go runs it: the webhooks, the
// reconciler, and controller-runtime's leader election.
func setup(env *envtest.Environment, c *rest.Config) error {
	logf.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	testEnv, cfg = env, c
	suiteCtx = context.Background()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := coordv1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	var err error
	if k8sClient, err = client.NewWithWatch(cfg, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	if adminUser, err = testenv.AdminUser(suiteCtx, k8sClient); err != nil {
		return err
	}
	if err := k8sClient.Create(suiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}}); err != nil {
		return err
	}
	opts := testenv.WebhookManagerOptions(env, scheme)
	opts.LeaderElection = true
	opts.LeaderElectionID = leaderElectionID
	opts.LeaderElectionNamespace = operatorNamespace
	opts.LeaderElectionReleaseOnCancel = true
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return err
	}
	if err := testenv.RegisterWebhooks(mgr, []string{adminUser}); err != nil {
		return err
	}
	if err := testenv.SetupReconciler(mgr, operatorNamespace); err != nil {
		return err
	}
	go func() {
		// It ends with "leader election lost" when the control plane stops
		// after the tests; an earlier failure fails the tests that need it.
		if err := mgr.Start(suiteCtx); err != nil {
			fmt.Fprintf(os.Stderr, "manager: %v\n", err)
		}
	}()
	return testenv.WaitForWebhookServer(mgr, 30*time.Second)
}
