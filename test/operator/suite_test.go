// Package operator_test holds the operator-level specs, run against a real
// kube-apiserver and etcd with the operator wired as it ships
// (controllers/operator.Setup through test/testenv): who may change which
// part of a FencedLease (admission_test.go, I6), the seeds' scenario through
// the client helper and the accepted token never going down under racing
// holders (fencing_test.go, I4, I5; the write-path table, in both
// enforcement modes, is test/enforcement's), the controller's lifecycle
// across restarts and fail-over (lifecycle_test.go) and the epoch store
// (epochstore_test.go). The pure rules are table-tested beside their code in
// controllers/...; this suite keeps what needs an API server. It imports
// production packages and test/testenv only, and nothing imports it.
package operator_test

import (
	"context"
	"os"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubefence/kubefence/hack/devenv"
	"github.com/kubefence/kubefence/test/testenv"
	"github.com/kubefence/kubefence/test/testenv/specs"
)

const operatorNamespace = "kubefence-system"

var (
	// cluster is the control plane; k8sClient its admin's client.
	cluster   *testenv.Cluster
	k8sClient client.WithWatch
	suiteCtx  context.Context
	// users are clients with only the rights the editor role gives them.
	users map[string]client.WithWatch
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, testenv.Input{Root: "../..", CRDs: true, Webhooks: true, Namespace: operatorNamespace, Log: GinkgoWriter, Setup: setup}))
}

// The controller works in real time on a real API server; on a loaded CI
// machine a reconcile can take longer than Gomega's default second.
func TestControllers(t *testing.T) {
	specs.Run(t, "FencedLease controller suite (real kube-apiserver + etcd)", 10*time.Second)
}

// setup gives group kubefence:clients what config/rbac's editor role gives a
// lease client (read and update FencedLeases, nothing on status), and full
// rights on the guarded objects of the tests, so that only fencing refuses.
// The admin identity the test managers run as is trusted as "the
// controller". The webhooks run in their own manager for the whole suite, so
// that controller managers can be stopped and started (restart, fail-over)
// underneath it.
func setup(ctx context.Context, c *testenv.Cluster) error {
	suiteCtx, cluster, k8sClient = ctx, c, c.Admin
	var err error
	if users, _, err = c.Clients(ctx, "fencedlease-client", "kubefence:clients", append(devenv.ClientRules,
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: devenv.AllVerbs},
		rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: devenv.AllVerbs}),
		"alice", "bob", "carol", "dave"); err != nil {
		return err
	}
	_, err = c.ServeOperator(ctx, c.Webhooks(), nil)
	return err
}

// startController starts a controller manager (a manager with the
// FencedLease reconciler), which tests stop and start; with leaderElection it
// competes for the manager lease like the deployed operator's replicas do.
func startController(leaderElection bool) *controllerProcess {
	m, err := cluster.StartController(suiteCtx, cluster.Operator(), func(_ *rest.Config, opts *ctrl.Options) {
		opts.LeaderElection = leaderElection
		opts.LeaderElectionReleaseOnCancel = true
	})
	Expect(err).NotTo(HaveOccurred())
	return &controllerProcess{m}
}

// controllerProcess is one running kubefence controller.
type controllerProcess struct{ *testenv.Manager }

// stop stops the controller; its manager must end without an error.
func (p *controllerProcess) stop() {
	Expect(p.Stop(30 * time.Second)).To(Succeed())
}
