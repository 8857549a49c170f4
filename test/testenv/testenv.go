// Package testenv is the envtest and in-process operator setup that kubefence's
// test suites and benchmark share: a control plane with the operator's CRDs
// and admission configurations, the admin identity, a manager serving the
// operator's webhooks, and the FencedLease reconciler, wired as cmd/main.go
// wires them (through operator.Setup) with its default timing and clock skew.
//
// It is the one place that starts a control plane (Start, and Run for a
// TestMain, in the style of cluster-api's internal/test/envtest); under
// -short (make test-unit) Run starts none and SkipIfShort skips the tests
// that need one. The helpers return what they build (an Environment, manager
// options) rather than asserting anything, so that a caller can change
// fields before use and report errors its own way.
//
// A suite's set-up is RunCluster in its TestMain (StartCluster elsewhere):
// the control plane, the admin's client and username, the operator's
// namespace; then Log, Cluster.Clients (a group of lease clients and their
// role) or Cluster.Users, Cluster.ServeOperator, Cluster.StartController and
// Cluster.Start (Managers running the operator, its webhooks or its
// controller, stopped and checked by Cluster.Stop when the suite ends),
// Cluster.Namespace per test (cluster.go, manager.go, suite.go). A
// Ginkgo suite's TestX calls specs.Run (test/testenv/specs), which keeps
// Ginkgo out of the programs that import testenv.
//
// It also holds the helpers the suites share: NewScheme (cluster.go),
// StartManager and Serve (manager.go), GrantClusterRole and the client rules
// (rbac.go), UserClient and Kubeconfig (users.go), Gate and its fault
// transports (gate.go, transport.go), Journal (journal.go), Record
// (record.go), Proc, a child process that dies with the test (proc.go),
// WidgetGVK, Widget, GuardedWidget and FixedToken (kinds.go), ModuleRoot
// (root.go), WaitForWebhookServer.
//
// It imports production packages (controllers/operator for the wiring) and
// never the reverse: no production package may import testenv.
package testenv

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/hack/devenv"
	"github.com/kubefence/kubefence/pkg/fence/protocol"
)

// WebhookPaths are the admission configurations the deployed operator
// installs (devenv.WebhookPaths).
var WebhookPaths = devenv.WebhookPaths

// NewEnvironment is the Environment of the operator's suites: the
// operator's CRDs, the test CRDs and WebhookPaths (Input{Root: root, CRDs:
// true, Webhooks: true}). Callers may set further fields before Start.
func NewEnvironment(root string) *envtest.Environment {
	return Input{Root: root, CRDs: true, Webhooks: true}.Environment()
}

// AdminUser is the username c's identity authenticates as, from a
// SelfSubjectReview: with envtest's admin config, the identity the webhook
// trusts as "the controller". An empty username is an error.
func AdminUser(ctx context.Context, c client.Client) (string, error) {
	user, err := protocol.WhoAmI(ctx, c)
	if err != nil {
		return "", fmt.Errorf("asking who the admin is: %w", err)
	}
	return user, nil
}

// managerOptions are what every manager of a suite starts from: scheme, no
// metrics server, and controller names that may repeat across the managers of
// one process.
func managerOptions(scheme *runtime.Scheme) ctrl.Options {
	return ctrl.Options{
		Scheme:     scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	}
}

// WebhookManagerOptions are the options of a manager that serves the webhooks
// env installs: its webhook server listens where env.WebhookInstallOptions
// (prepared by Start) points the API server, with their certificates; no
// metrics server; and controller names may repeat across the managers of one
// process. Callers may change fields afterwards.
func WebhookManagerOptions(env *envtest.Environment, scheme *runtime.Scheme) ctrl.Options {
	wopts := env.WebhookInstallOptions
	o := managerOptions(scheme)
	o.WebhookServer = webhook.NewServer(webhook.Options{
		Host: wopts.LocalServingHost, Port: wopts.LocalServingPort, CertDir: wopts.LocalServingCertDir,
	})
	return o
}

// ControllerManagerOptions are the options of a manager that runs the
// operator's controller in a test: no metrics or probe servers, controller
// names that may repeat across the managers of one process, and, should the
// caller turn leader election on, the deployed operator's Lease
// (coordv1alpha1.LeaderElectionID in namespace). Callers may change fields afterwards.
func ControllerManagerOptions(scheme *runtime.Scheme, namespace string) ctrl.Options {
	o := managerOptions(scheme)
	o.HealthProbeBindAddress = "0"
	o.LeaderElectionID = coordv1alpha1.LeaderElectionID
	o.LeaderElectionNamespace = namespace
	return o
}

// Operator are the options of the operator the suites run: the deployed
// operator's defaults (operator.DefaultOptions), in operatorNamespace, with
// controllerUsers (the envtest admin) trusted as the controller.
func Operator(operatorNamespace string, controllerUsers ...string) operator.Options {
	o := operator.DefaultOptions()
	o.Namespace = operatorNamespace
	o.ControllerUsers = controllerUsers
	return o
}

// RegisterWebhooks sets up the operator's webhooks on mgr (operator.Setup
// without the reconciler): the FencedLease validator, trusting
// controllerUsers as the controller, and the three fencing handlers, as
// cmd/main.go does.
func RegisterWebhooks(mgr ctrl.Manager, controllerUsers []string) error {
	return operator.Setup(mgr, webhooksOnly(controllerUsers))
}

// webhooksOnly are the options of the operator's webhooks without the
// reconciler, trusting controllerUsers as the controller.
func webhooksOnly(controllerUsers []string) operator.Options {
	o := Operator("", controllerUsers...)
	o.Reconciler = false
	return o
}

// SetupReconciler sets up the FencedLease reconciler on mgr (operator.Setup
// without the webhooks), in operatorNamespace, as
// cmd/main.go does.
func SetupReconciler(mgr ctrl.Manager, operatorNamespace string) error {
	o := Operator(operatorNamespace)
	o.Webhooks = false
	return operator.Setup(mgr, o)
}

// WaitForWebhookServer waits until mgr's webhook server serves, at most
// timeout.
func WaitForWebhookServer(mgr ctrl.Manager, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for mgr.GetWebhookServer().StartedChecker()(nil) != nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("the webhook server did not start within %v", timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}
