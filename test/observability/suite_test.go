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
	"os"
	"testing"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/test/testenv"
)

const operatorNamespace = "kubefence-system"

var (
	// cluster is the control plane; k8sClient its admin's client.
	cluster   *testenv.Cluster
	k8sClient client.WithWatch
	suiteCtx  context.Context
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, testenv.Input{Root: "../..", CRDs: true, Webhooks: true, Namespace: operatorNamespace, Setup: setup}))
}

// setup starts one manager as cmd/main.go runs it: the webhooks, the
// reconciler, and controller-runtime's leader election.
func setup(ctx context.Context, c *testenv.Cluster) error {
	logf.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	suiteCtx, cluster, k8sClient = ctx, c, c.Admin
	_, err := cluster.ServeOperator(suiteCtx, cluster.Operator(), func(_ *rest.Config, opts *ctrl.Options) {
		opts.LeaderElection = true
		opts.LeaderElectionID = coordv1alpha1.LeaderElectionID
		opts.LeaderElectionNamespace = operatorNamespace
		opts.LeaderElectionReleaseOnCancel = true
	})
	// It ends with "leader election lost" when the control plane stops after
	// the tests; an earlier failure fails the tests that need it.
	return err
}
