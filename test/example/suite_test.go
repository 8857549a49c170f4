package example_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/hack/devenv"
	"github.com/kubefence/kubefence/test/testenv"
	"github.com/kubefence/kubefence/test/testenv/fault"
	"github.com/kubefence/kubefence/test/testenv/specs"
)

var (
	// cluster is the control plane (cluster.Admin its admin's client).
	cluster  *testenv.Cluster
	suiteCtx context.Context
	// users are the rest configs of the lease clients (setup), by name.
	users map[string]*rest.Config
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, testenv.Input{Root: filepath.Join("..", ".."), CRDs: true, Webhooks: true, Namespace: "kubefence-system", Log: GinkgoWriter, Setup: setup}))
}

func TestExample(t *testing.T) {
	specs.Run(t, "Fenced controller example (real kube-apiserver + etcd)", 0)
}

// setup gives group kubefence:clients what a fenced controller needs: FencedLease
// requests (no status), and full rights on Widgets so that only fencing
// refuses; and runs the kubefence controller and its webhooks in-process, the
// admin trusted as "the controller": the examples are their clients.
func setup(ctx context.Context, c *testenv.Cluster) error {
	suiteCtx, cluster = ctx, c
	var err error
	if _, users, err = c.Clients(ctx, "fenced-example", "kubefence:clients", devenv.ClientRules, "replica-a", "replica-b", "alice", "bob"); err != nil {
		return err
	}
	_, err = c.ServeOperator(ctx, c.Operator(), nil)
	return err
}

func newNamespace() string {
	ns, err := cluster.Namespace(suiteCtx, "example")
	Expect(err).NotTo(HaveOccurred())
	return ns
}

func newLease(ns, name string, durationSeconds int32) {
	Expect(cluster.Admin.Create(suiteCtx, &coordv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: durationSeconds},
	})).To(Succeed())
}

func getLease(ns, name string) *coordv1alpha1.FencedLease {
	var l coordv1alpha1.FencedLease
	Expect(cluster.Admin.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: name}, &l)).To(Succeed())
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
// transport it wraps, as a stalled process or network path would
// (fault.Gate.StallWrites).
type pauser struct{ gate fault.Gate }

func (p *pauser) pause()  { p.gate.Close() }
func (p *pauser) resume() { p.gate.Open() }

// pausableConfig returns user's rest config with writes going through p.
func pausableConfig(user string, p *pauser) *rest.Config {
	c := rest.CopyConfig(users[user])
	c.Wrap(p.gate.StallWrites)
	return c
}

// userClient is a direct client acting as user, its writes going through p.
func userClient(user string, p *pauser) client.WithWatch {
	c, err := client.NewWithWatch(pausableConfig(user, p), client.Options{Scheme: cluster.Scheme})
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
