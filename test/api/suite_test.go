// Package api_test proves the FencedLease API contract on a real kube-apiserver
// and etcd (envtest): schema validation and defaulting, the CEL transition
// rules, the status subresource, and the kubectl printer columns. Nothing here
// runs the controller or the webhook; what is tested is what the CRD alone
// guarantees.
package api_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	coordinationv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/test/testenv"
)

var (
	ctx       context.Context
	cancel    context.CancelFunc
	testEnv   *envtest.Environment
	cfg       *rest.Config
	k8sClient client.Client
	scheme    = runtime.NewScheme()

	// admin is a system:masters user with its own kubeconfig, for kubectl.
	admin *envtest.AuthenticatedUser

	// namespace is a fresh namespace for the running spec (see BeforeEach).
	namespace string
)

func TestAPI(t *testing.T) {
	testenv.SkipIfShort(t)
	RegisterFailHandler(Fail)
	RunSpecs(t, "FencedLease API Suite")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(GinkgoLogr)

	ctx, cancel = context.WithCancel(context.TODO())

	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(coordinationv1alpha1.AddToScheme(scheme)).To(Succeed())

	By("bootstrapping test environment")
	var err error
	testEnv, cfg, err = testenv.Start(testenv.Input{Root: filepath.Join("..", ".."), CRDs: true})
	Expect(err).NotTo(HaveOccurred())
	Expect(cfg).NotTo(BeNil())

	k8sClient, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	Expect(k8sClient).NotTo(BeNil())

	admin, err = testEnv.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	By("tearing down the test environment")
	if cancel != nil {
		cancel()
	}
	if testEnv != nil {
		Eventually(func() error {
			return testEnv.Stop()
		}, time.Minute, time.Second).Should(Succeed())
	}
})

// Every spec gets its own namespace, so names never collide between specs.
// envtest runs no namespace controller, so the namespaces are left behind; the
// whole etcd goes away with the suite.
var _ = BeforeEach(func() {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "api-test-"}}
	Expect(k8sClient.Create(ctx, ns)).To(Succeed())
	namespace = ns.Name
})
