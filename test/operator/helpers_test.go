package operator_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence"
	"github.com/kubefence/kubefence/test/testenv"
)

// newNamespace creates a namespace of its own for one test.
func newNamespace() string {
	ns, err := cluster.Namespace(suiteCtx, "t")
	Expect(err).NotTo(HaveOccurred())
	return ns
}

func newLease(ns, name string, durationSeconds, lockDelaySeconds int32) *coordv1alpha1.FencedLease {
	l := &coordv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: durationSeconds, LockDelaySeconds: lockDelaySeconds},
	}
	Expect(k8sClient.Create(suiteCtx, l)).To(Succeed())
	return l
}

func getLease(ns, name string) *coordv1alpha1.FencedLease {
	var l coordv1alpha1.FencedLease
	Expect(k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: name}, &l)).To(Succeed())
	return &l
}

// runningElector is a fence.Elector running in the background for one user.
type runningElector struct {
	*fence.Elector
	cancel context.CancelFunc
	done   chan struct{}
}

// startElector runs an elector as user (a client with the editor role) that
// records its tenures in j.
func startElector(user, ns, lease, identity string, j *testenv.Journal, mutate ...func(*fence.Config)) *runningElector {
	return startElectorWithClient(users[user], ns, lease, identity, j, mutate...)
}

// aliceLeads makes alice, through c, the first holder of a new lease of
// seconds (no lock delay): her elector (stopped when the spec ends), the
// journal of the lease's tenures, and her token.
func aliceLeads(c client.WithWatch, ns, lease string, seconds int32) (*runningElector, *testenv.Journal, int64) {
	GinkgoHelper()
	newLease(ns, lease, seconds, 0)
	j := &testenv.Journal{}
	e := startElectorWithClient(c, ns, lease, "alice", j)
	DeferCleanup(e.stop)
	Eventually(j.Identities, 10*time.Second).Should(HaveLen(1))
	return e, j, j.Snapshot()[0].Token
}

func startElectorWithClient(cl client.WithWatch, ns, lease, identity string, j *testenv.Journal, mutate ...func(*fence.Config)) *runningElector {
	cfg := fence.Config{
		Client: cl, Namespace: ns, Name: lease, Identity: identity,
		Callbacks: fence.Callbacks{
			OnStartedLeading: func(ctx context.Context, token int64) {
				i := j.Started(identity, token)
				<-ctx.Done()
				j.Stopped(i)
			},
		},
	}
	for _, m := range mutate {
		m(&cfg)
	}
	e, err := fence.New(cfg)
	Expect(err).NotTo(HaveOccurred())
	ctx, cancelRun := context.WithCancel(suiteCtx)
	r := &runningElector{Elector: e, cancel: cancelRun, done: make(chan struct{})}
	go func() {
		defer GinkgoRecover()
		defer close(r.done)
		Expect(e.Run(ctx)).To(Succeed())
	}()
	return r
}

func (r *runningElector) stop() {
	r.cancel()
	Eventually(r.done, 10*time.Second).Should(BeClosed())
}

// waitQueued waits until identity's request is in the lease's spec.
func waitQueued(ns, lease, identity string) {
	Eventually(func() []string {
		var ids []string
		for _, r := range getLease(ns, lease).Spec.Requests {
			ids = append(ids, r.HolderIdentity)
		}
		return ids
	}, 10*time.Second, 20*time.Millisecond).Should(ContainElement(identity))
}

// holderOf returns the lease's current holder and token.
func holderOf(ns, lease string) (string, int64) {
	l := getLease(ns, lease)
	return l.Status.HolderIdentity, l.Status.FencingToken
}

// holderName reads the lease's current holder, for Eventually.
func holderName(ns, lease string) func() string {
	return func() string { h, _ := holderOf(ns, lease); return h }
}

// heldReason reads the reason of the lease's Held condition, for Eventually.
func heldReason(ns, lease string) func() string {
	return func() string { return heldCondition(getLease(ns, lease)).Reason }
}
