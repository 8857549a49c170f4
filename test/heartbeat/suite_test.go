// Package heartbeat_test proves heartbeat renewals (docs/design.md,
// "Heartbeats") against a real kube-apiserver and etcd: the admission policy
// kubefence-heartbeats as shipped (config/heartbeat), the controller
// renewing and expiring tenures from per-lease and session heartbeats, and
// the Go helper renewing by heartbeat with its guarded writes accepted by
// the fencing webhook (webhook mode).
package heartbeat_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubefence/kubefence/hack/devenv"
	"github.com/kubefence/kubefence/test/testenv"
)

const operatorNamespace = "kubefence-system"

var (
	cluster  *testenv.Cluster
	suiteCtx context.Context
	// users: alice and bob (lease clients), mallory (another client).
	users map[string]client.WithWatch
	// userConfigs are their rest configs.
	userConfigs map[string]*rest.Config
)

func TestMain(m *testing.M) {
	var logOut io.Writer = io.Discard
	if os.Getenv("HEARTBEAT_LOG") != "" {
		logOut = os.Stderr
	}
	os.Exit(testenv.Run(m, testenv.Input{Root: "../..", CRDs: true, Webhooks: true, Namespace: operatorNamespace, Log: logOut, Setup: setup}))
}

func setup(ctx context.Context, c *testenv.Cluster) error {
	cluster, suiteCtx = c, ctx
	if err := devenv.ApplyHeartbeatPolicy(ctx, c.Admin, filepath.Join("..", "..")); err != nil {
		return err
	}
	rules := append([]rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
	}, devenv.ClientRules...)
	var err error
	if users, userConfigs, err = c.Clients(ctx, "heartbeat-clients", "heartbeat-clients", rules, "alice", "bob", "mallory"); err != nil {
		return err
	}
	// The operator as shipped in webhook mode: the controller, the
	// FencedLease webhook and the fencing webhook, the admin trusted as the
	// controller.
	_, err = c.ServeOperator(ctx, c.Operator(), nil)
	return err
}
