package example_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/test/testenv"
)

const (
	operatorNamespace = "kubefence-system"
	clientsGroup      = "kubefence:clients"
)

var (
	testEnv   *envtest.Environment
	cfg       *rest.Config
	k8sClient client.WithWatch
	scheme    = runtime.NewScheme()
	suiteCtx  context.Context
	cancel    context.CancelFunc
	// users are the rest configs of users in clientsGroup, by name.
	users = map[string]*rest.Config{}
)

func TestExample(t *testing.T) {
	testenv.SkipIfShort(t)
	RegisterFailHandler(Fail)
	RunSpecs(t, "Fenced controller example (real kube-apiserver + etcd)")
}

// BeforeSuite runs the kubefence controller and its webhooks in-process, as
// test/operator/suite_test.go does: the examples are their clients.
var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	suiteCtx, cancel = context.WithCancel(context.Background())
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(coordv1alpha1.AddToScheme(scheme)).To(Succeed())

	var err error
	testEnv, cfg, err = testenv.Start(testenv.Input{Root: filepath.Join("..", ".."), CRDs: true, Webhooks: true})
	Expect(err).NotTo(HaveOccurred())
	k8sClient, err = client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())

	// The admin identity the kubefence controller runs as is trusted as "the controller".
	adminUser, err := testenv.AdminUser(suiteCtx, k8sClient)
	Expect(err).NotTo(HaveOccurred())

	Expect(k8sClient.Create(suiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}})).To(Succeed())
	grantClientRole()
	for _, name := range []string{"replica-a", "replica-b", "alice", "bob"} {
		u, err := testEnv.AddUser(envtest.User{Name: name, Groups: []string{clientsGroup}}, nil)
		Expect(err).NotTo(HaveOccurred())
		users[name] = u.Config()
	}

	whMgr, err := ctrl.NewManager(cfg, testenv.WebhookManagerOptions(testEnv, scheme))
	Expect(err).NotTo(HaveOccurred())
	Expect(operator.Setup(whMgr, testenv.Operator(operatorNamespace, adminUser))).To(Succeed())
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

// grantClientRole gives clientsGroup what a fenced controller needs: FencedLease
// requests (no status), and full rights on Widgets so that only fencing refuses.
func grantClientRole() {
	Expect(testenv.GrantClusterRole(suiteCtx, k8sClient, "fenced-example", clientsGroup, testenv.ClientRules...)).To(Succeed())
}

var nsCounter int

func newNamespace() string {
	nsCounter++
	name := fmt.Sprintf("example-%d-%d", GinkgoParallelProcess(), nsCounter)
	Expect(k8sClient.Create(suiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	return name
}

func newLease(ns, name string, durationSeconds int32) {
	Expect(k8sClient.Create(suiteCtx, &coordv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: durationSeconds},
	})).To(Succeed())
}

func getLease(ns, name string) *coordv1alpha1.FencedLease {
	var l coordv1alpha1.FencedLease
	Expect(k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: name}, &l)).To(Succeed())
	return &l
}

// holderOf returns the lease's current holder and token.
func holderOf(ns, name string) (string, int64) {
	l := getLease(ns, name)
	return l.Status.HolderIdentity, l.Status.FencingToken
}

// queued returns the identities with a request in the lease's spec.
func queued(ns, name string) []string {
	var ids []string
	for _, r := range getLease(ns, name).Spec.Requests {
		ids = append(ids, r.HolderIdentity)
	}
	return ids
}

// pauser stalls every write (any method but GET) of the clients whose
// transport it wraps, as a stalled process or network path would. A stalled
// request is sent once resumed, unless its context ends first.
type pauser struct{ gate testenv.Gate }

func (p *pauser) pause()  { p.gate.Close() }
func (p *pauser) resume() { p.gate.Open() }

func (p *pauser) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method != http.MethodGet {
			if err := p.gate.Wait(req.Context()); err != nil {
				return nil, err
			}
		}
		return rt.RoundTrip(req)
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// pausableConfig returns user's rest config with writes going through p.
func pausableConfig(user string, p *pauser) *rest.Config {
	c := rest.CopyConfig(users[user])
	c.Wrap(p.wrap)
	return c
}

// userClient is a direct client acting as user, its writes going through p.
func userClient(user string, p *pauser) client.WithWatch {
	c, err := client.NewWithWatch(pausableConfig(user, p), client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	return c
}

// staticToken is a fence.TokenSource stuck on one token: a write prepared by a
// holder before it lost the lease.
type staticToken int64

func (t staticToken) Token() (int64, bool) { return int64(t), true }

// eventually is Eventually with the suite's usual polling.
func eventually(f any, timeout time.Duration) AsyncAssertion {
	return Eventually(f, timeout, 20*time.Millisecond)
}
