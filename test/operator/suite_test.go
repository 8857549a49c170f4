// Package operator_test holds the operator-level specs, run against a real
// kube-apiserver and etcd with the operator wired as it ships
// (controllers/operator.Setup through test/testenv): who may change which
// part of a FencedLease (admission_test.go, I6), stale writes refused on
// every write path (fencing_test.go, I4, I5), the controller's lifecycle
// across restarts and fail-over (lifecycle_test.go) and the epoch store
// (epochstore_test.go). The pure rules are table-tested beside their code in
// controllers/...; this suite keeps what needs an API server. It imports
// production packages and test/testenv only, and nothing imports it.
package operator_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/test/testenv"
)

const operatorNamespace = "kubefence-system"

var (
	testEnv   *envtest.Environment
	cfg       *rest.Config
	k8sClient client.WithWatch
	scheme    = runtime.NewScheme()
	suiteCtx  context.Context
	cancel    context.CancelFunc
	// users are clients with only the rights the editor role gives them.
	users = map[string]client.WithWatch{}
)

func TestControllers(t *testing.T) {
	testenv.SkipIfShort(t)
	RegisterFailHandler(Fail)
	RunSpecs(t, "FencedLease controller suite (real kube-apiserver + etcd)")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	// The controller works in real time on a real API server; on a loaded CI
	// machine a reconcile can take longer than Gomega's default second.
	SetDefaultEventuallyTimeout(10 * time.Second)
	SetDefaultEventuallyPollingInterval(20 * time.Millisecond)
	suiteCtx, cancel = context.WithCancel(context.Background())
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(coordv1alpha1.AddToScheme(scheme)).To(Succeed())

	var err error
	testEnv, cfg, err = testenv.Start(testenv.Input{Root: "../..", CRDs: true, Webhooks: true})
	Expect(err).NotTo(HaveOccurred())
	k8sClient, err = client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())

	// The admin identity the test manager runs as is trusted as "the controller".
	adminUser, err := testenv.AdminUser(suiteCtx, k8sClient)
	Expect(err).NotTo(HaveOccurred())

	Expect(k8sClient.Create(suiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}})).To(Succeed())
	grantClientRole()
	for _, name := range []string{"alice", "bob", "carol", "dave"} {
		c, _, err := testenv.UserClient(testEnv, scheme, envtest.User{Name: name, Groups: []string{"kubefence:clients"}})
		Expect(err).NotTo(HaveOccurred())
		users[name] = c
	}

	// The webhook runs in its own manager for the whole suite, so that controller
	// managers can be stopped and started (restart, fail-over) underneath it.
	whMgr, err := ctrl.NewManager(cfg, testenv.WebhookManagerOptions(testEnv, scheme))
	Expect(err).NotTo(HaveOccurred())
	Expect(testenv.RegisterWebhooks(whMgr, []string{adminUser})).To(Succeed())
	go func() {
		defer GinkgoRecover()
		Expect(whMgr.Start(suiteCtx)).To(Succeed())
	}()
	Eventually(func() error { return whMgr.GetWebhookServer().StartedChecker()(nil) }).Should(Succeed())
})

var _ = AfterSuite(func() {
	cancel()
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

// grantClientRole gives group kubefence:clients what config/rbac's editor role
// gives a lease client (read and update FencedLeases, nothing on status), and
// full rights on the guarded objects of the tests, so that only fencing refuses.
func grantClientRole() {
	Expect(testenv.GrantClusterRole(suiteCtx, k8sClient, "fencedlease-client", "kubefence:clients", append(testenv.ClientRules,
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: testenv.AllVerbs},
		rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: testenv.AllVerbs})...)).To(Succeed())
}

// controllerProcess is one running kubefence controller (a manager with the
// FencedLease reconciler), which tests stop and start.
type controllerProcess struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startController starts a controller manager; with leaderElection it competes
// for the manager lease like the deployed operator's replicas do.
func startController(leaderElection bool) *controllerProcess {
	ctx, cancelMgr := context.WithCancel(suiteCtx)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        "0",
		LeaderElection:                leaderElection,
		LeaderElectionID:              "controller.coordination.kubefence.io",
		LeaderElectionNamespace:       operatorNamespace,
		LeaderElectionReleaseOnCancel: true,
		Controller:                    config.Controller{SkipNameValidation: ptr.To(true)},
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(testenv.SetupReconciler(mgr, operatorNamespace)).To(Succeed())
	p := &controllerProcess{cancel: cancelMgr, done: make(chan struct{})}
	go func() {
		defer GinkgoRecover()
		defer close(p.done)
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
	return p
}

func (p *controllerProcess) stop() {
	p.cancel()
	Eventually(p.done, 30*time.Second).Should(BeClosed())
}
