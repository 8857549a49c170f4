// Package faults is kubefence's fault matrix: one test per fault (a paused
// holder, a partitioned holder, an operator crash mid-expiry, an operator
// fail-over, API server and etcd restarts, delete-then-recreate, an etcd
// snapshot restore), each asserting safety (no guarded object accepts a token
// lower than one it accepted; the old holder's write with its old token is
// refused) and recovery (a new holder within the bound docs/design.md
// promises). It runs a real kube-apiserver and etcd (envtest) whose processes
// the tests stop and start, so its data and certificate directories are kept
// across restarts.
package faults

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kubefence/kubefence/hack/devenv"
	"github.com/kubefence/kubefence/test/testenv"
)

var (
	// cluster is the control plane (cluster.Admin its admin's client).
	cluster  *testenv.Cluster
	suiteCtx context.Context
	// userConfigs and users are clients with only the rights config/rbac's editor
	// role gives a lease client (plus full rights on Widgets).
	userConfigs map[string]*rest.Config
	users       map[string]client.WithWatch
	// etcdDir and certDir are kept across restarts of etcd and kube-apiserver.
	etcdDir, certDir string
	webhookMgr       *testenv.Manager
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if flag.Parse(); testing.Short() {
		return 0 // every test here breaks a control plane; make test-unit runs none
	}
	var cancel context.CancelFunc
	suiteCtx, cancel = context.WithCancel(context.Background())
	defer cancel()
	if err := setup(); err != nil {
		fmt.Fprintln(os.Stderr, "setting up the fault suite:", err)
		teardown()
		return 1
	}
	code := m.Run()
	cancel()
	teardown()
	return code
}

func setup() error {
	var err error
	if etcdDir, err = os.MkdirTemp("", "kubefence-faults-etcd-"); err != nil {
		return err
	}
	if certDir, err = os.MkdirTemp("", "kubefence-faults-apiserver-"); err != nil {
		return err
	}
	logs := map[string]io.Writer{}
	if dir := os.Getenv("FAULTS_CONTROL_PLANE_LOG"); dir != "" {
		// Debugging: kube-apiserver and etcd logs, appended across restarts.
		for _, name := range []string{"kube-apiserver.log", "etcd.log"} {
			f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
			if err != nil {
				return err
			}
			logs[name] = f
		}
	}
	var logOut io.Writer = io.Discard
	if os.Getenv("FAULTS_LOG") != "" {
		logOut = os.Stderr
	}
	cluster, err = testenv.Start(suiteCtx, testenv.Input{Root: filepath.Join("..", ".."), CRDs: true, Webhooks: true, Namespace: "kubefence-system", Log: logOut, Configure: func(env *envtest.Environment) {
		// Explicit directories: envtest then neither deletes nor regenerates them on
		// Stop/Start, so etcd restarts with its data, and kube-apiserver restarts on
		// the same port with the same serving and client CAs (every rest.Config
		// keeps working).
		env.ControlPlane = envtest.ControlPlane{
			Etcd:      &envtest.Etcd{DataDir: etcdDir, Err: logs["etcd.log"]},
			APIServer: &envtest.APIServer{CertDir: certDir, Err: logs["kube-apiserver.log"]},
		}
		// Without a grace period kube-apiserver does not end watches of custom
		// resources when it shuts down, and its graceful shutdown then waits for
		// them (up to their timeout, tens of minutes) before envtest kills it.
		env.ControlPlane.APIServer.Configure().Set("shutdown-watch-termination-grace-period", "1s")
	}})
	if err != nil {
		return err
	}
	// Group kubefence:clients gets what config/rbac's editor role gives a lease client:
	// read and update FencedLeases, nothing on status; create and update its
	// heartbeat Leases (the candidate role); and full rights on Widgets, so
	// that only fencing refuses. The heartbeat policy is installed as shipped.
	if err := devenv.ApplyHeartbeatPolicy(suiteCtx, cluster.Admin, filepath.Join("..", "..")); err != nil {
		return err
	}
	rules := append([]rbacv1.PolicyRule{devenv.HeartbeatRule}, devenv.ClientRules...)
	if users, userConfigs, err = cluster.Clients(suiteCtx, "fencedlease-client", "kubefence:clients", rules, "alice", "bob", "carol"); err != nil {
		return err
	}
	// The webhooks run in a manager of their own for the whole suite, so that
	// controller managers can crash, restart and fail over underneath them.
	webhookMgr, err = cluster.ServeOperator(suiteCtx, cluster.Webhooks(), nil)
	return err
}

func teardown() {
	if webhookMgr != nil {
		_ = webhookMgr.Stop(30 * time.Second)
	}
	if cluster != nil {
		if err := cluster.Env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping envtest:", err)
		}
	}
	for _, d := range []string{etcdDir, certDir} {
		if d != "" {
			_ = os.RemoveAll(d)
		}
	}
}

// kill cancels the manager's context, without releasing its leader-election
// Lease, and waits for it to stop: a crash, as far as the cluster can tell.
func kill(t *testing.T, p *testenv.Manager) {
	t.Helper()
	if err := p.Stop(30 * time.Second); errors.Is(err, testenv.ErrStillRunning) {
		t.Fatalf("manager: %v", err)
	}
}

// controllerOptions shapes one kubefence controller process.
type controllerOptions struct {
	// leaderElection makes it compete for the operator's leader-election Lease
	// with short timings (2 s lease, 1.5 s renew deadline, 0.5 s retry), and
	// never release it on cancel: a killed leader is taken over only after its
	// Lease expires.
	leaderElection bool
	// wrap, if set, wraps the transport of every request the controller sends.
	wrap func(http.RoundTripper) http.RoundTripper
}

// Leader-election timings of controllerOptions.leaderElection.
const (
	leLeaseDuration = 2 * time.Second
	leRenewDeadline = 1500 * time.Millisecond
	leRetryPeriod   = 500 * time.Millisecond
)

// startController starts a kubefence controller (the FencedLease reconciler
// in a manager of its own). The test's cleanup kills it if it still runs.
func startController(t *testing.T, o controllerOptions) *testenv.Manager {
	t.Helper()
	p, err := cluster.StartController(suiteCtx, cluster.Operator(), func(c *rest.Config, opts *ctrl.Options) {
		if o.wrap != nil {
			c.Wrap(o.wrap)
		}
		if o.leaderElection {
			opts.LeaderElection = true
			opts.LeaseDuration = ptr.To(leLeaseDuration)
			opts.RenewDeadline = ptr.To(leRenewDeadline)
			opts.RetryPeriod = ptr.To(leRetryPeriod)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(30 * time.Second); errors.Is(err, testenv.ErrStillRunning) {
			t.Errorf("controller manager: %v", err)
		}
	})
	return p
}

// restartWebhooks stops the operator's webhook manager and starts a fresh one
// (same port and certificates), as a restarted operator pod would.
func restartWebhooks(t *testing.T) {
	t.Helper()
	kill(t, webhookMgr)
	p, err := cluster.ServeOperator(suiteCtx, cluster.Webhooks(), nil)
	if err != nil {
		t.Fatalf("restarting the webhooks: %v", err)
	}
	webhookMgr = p
}
