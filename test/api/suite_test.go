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

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kubefence/kubefence/test/testenv"
)

var (
	ctx    context.Context
	cancel context.CancelFunc
	// cluster is the control plane; k8sClient its admin's client.
	cluster   *testenv.Cluster
	k8sClient client.Client

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

	By("bootstrapping test environment")
	var err error
	cluster, err = testenv.Start(ctx, testenv.Input{Root: filepath.Join("..", ".."), CRDs: true})
	Expect(err).NotTo(HaveOccurred())
	k8sClient = cluster.Admin

	admin, err = cluster.Env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	By("tearing down the test environment")
	if cancel != nil {
		cancel()
	}
	if cluster != nil {
		Eventually(cluster.Stop, time.Minute, time.Second).Should(Succeed())
	}
})

// Every spec gets its own namespace, so names never collide between specs.
// envtest runs no namespace controller, so the namespaces are left behind; the
// whole etcd goes away with the suite.
var _ = BeforeEach(func() {
	var err error
	namespace, err = cluster.Namespace(ctx, "api-test")
	Expect(err).NotTo(HaveOccurred())
})
