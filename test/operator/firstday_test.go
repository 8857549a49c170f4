package operator_test

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/hack/devenv"
	"github.com/kubefence/kubefence/pkg/fence"
	"github.com/kubefence/kubefence/test/testenv"
)

// The first-day mistakes of a team adopting the client helper (2026-12-01
// ecosystem review, §4 and gap 4): no FencedLease, no RoleBinding, no right
// to create the lease it was told to create. Each is logged with its reason,
// counted in kubefence_client_lease_errors_total and reported by
// Elector.Ready until the lease is read; fixing it lets the client proceed.
// Without the reporting (before this spec) the elector waited silently.
var _ = Describe("First-day mistakes in the client helper", func() {
	var ns string

	BeforeEach(func() {
		ns = newNamespace()
		p := startController(false)
		DeferCleanup(p.stop)
	})

	It("logs, counts and reports a missing lease, then leads once the platform team creates it", func() {
		c := watchedElector(users["alice"], ns, "late", "alice", "alice")
		Eventually(c.log.get, 10*time.Second).Should(ContainElement(And(
			ContainSubstring("FencedLease read failed"), ContainSubstring(`"reason"="not-found"`),
			ContainSubstring("create FencedLease "+ns+"/late"))))
		Expect(c.errors(fence.ReasonNotFound)).To(BeNumerically(">=", 1))
		Expect(c.Ready(nil)).To(MatchError(ContainSubstring("lease never seen: not-found")))
		Consistently(c.journal.Len, time.Second).Should(BeZero())

		newLease(ns, "late", 10, 0)
		Eventually(c.journal.Identities, 10*time.Second).Should(Equal([]string{"alice"}))
		Expect(c.Ready(nil)).To(Succeed())
		Expect(c.log.get()).To(ContainElement(ContainSubstring("FencedLease found")))
	})

	It("logs, counts and reports missing RBAC, backs off, then leads once the RoleBinding exists", func() {
		newLease(ns, "locked", 10, 0)
		name := "eve-" + ns
		u, err := cluster.Env.AddUser(envtest.User{Name: name}, nil)
		Expect(err).NotTo(HaveOccurred())
		eve, err := client.NewWithWatch(u.Config(), client.Options{Scheme: cluster.Scheme})
		Expect(err).NotTo(HaveOccurred())

		c := watchedElector(eve, ns, "locked", "eve", name)
		Eventually(c.log.get, 10*time.Second).Should(ContainElement(And(
			ContainSubstring(`"reason"="forbidden"`), ContainSubstring(`cannot get resource \"fencedleases\"`),
			ContainSubstring("bind ClusterRole kubefence-fencedlease-candidate-role to this client with a RoleBinding in namespace "+ns))))
		Expect(c.Ready(nil)).To(MatchError(ContainSubstring("lease never seen: forbidden")))
		// Backed off: a fixed 200 ms retry would read 20 times in 4 s.
		time.Sleep(2 * time.Second)
		before := c.errors(fence.ReasonForbidden)
		time.Sleep(4 * time.Second)
		Expect(c.errors(fence.ReasonForbidden) - before).To(BeNumerically("<=", 6))
		Expect(len(c.log.get())).To(BeNumerically("<=", 2), "one line, and at most one more after 30 s: %v", c.log.get())

		bindInNamespace(ns, "candidate", devenv.LeaseClientRule, name)
		Eventually(c.journal.Identities, 20*time.Second).Should(Equal([]string{"eve"}))
		Expect(c.Ready(nil)).To(Succeed())
	})

	It("creates a missing lease once for two racing candidates (CreateIfMissing), who then lead one after the other", func() {
		bindInNamespace(ns, "creator", rbacv1.PolicyRule{APIGroups: []string{coordv1alpha1.GroupVersion.Group},
			Resources: []string{"fencedleases"}, Verbs: []string{"create"}}, "alice", "bob")
		j := &testenv.Journal{}
		create := func(cfg *fence.Config) { cfg.CreateIfMissing = true }
		a := startElector("alice", ns, "own", "alice", j, create)
		DeferCleanup(a.stop)
		b := startElector("bob", ns, "own", "bob", j, create)
		DeferCleanup(b.stop)
		Eventually(func() error {
			return k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: "own"}, &coordv1alpha1.FencedLease{})
		}, 10*time.Second, 20*time.Millisecond).Should(Succeed())
		waitQueued(ns, "own", "alice")
		waitQueued(ns, "own", "bob")
		Eventually(j.Len, 10*time.Second).Should(Equal(1))
		Consistently(j.Len, time.Second).Should(Equal(1), "one holder at a time")
		first := j.Identities()[0]
		Expect(getLease(ns, "own").Spec.LeaseDurationSeconds).To(BeEquivalentTo(15), "the API's default")
		Expect(getLease(ns, "own").Status.HolderIdentity).To(Equal(first))

		leader := map[string]*runningElector{"alice": a, "bob": b}[first]
		Expect(leader.Release(suiteCtx)).To(Succeed())
		Eventually(j.Len, 10*time.Second).Should(Equal(2))
		g := j.Snapshot()
		Expect(g[1].Identity).NotTo(Equal(first))
		Expect(g[1].Token).To(BeNumerically(">", g[0].Token))
	})

	It("says clearly that CreateIfMissing needs the verb create", func() {
		c := watchedElector(users["carol"], ns, "mine", "carol", "carol", func(cfg *fence.Config) { cfg.CreateIfMissing = true })
		Eventually(c.log.get, 10*time.Second).Should(ContainElement(And(
			ContainSubstring("FencedLease create failed"), ContainSubstring(`"reason"="forbidden"`),
			ContainSubstring(`cannot create resource \"fencedleases\"`),
			ContainSubstring("CreateIfMissing needs the verb create on fencedleases.coordination.kubefence.io in namespace "+ns))))
		Expect(c.errors(fence.ReasonForbidden)).To(BeNumerically(">=", 1))
		Expect(c.Ready(nil)).To(MatchError(ContainSubstring("lease never seen: forbidden: create: ")))
	})
})

// watchedClient is an elector whose log lines and client metrics a spec reads.
type watchedClient struct {
	*runningElector
	journal *testenv.Journal
	log     *logLines
	reg     *prometheus.Registry
}

// watchedElector runs an elector through cl, as identity and user, with a
// log sink and metrics of its own; it is stopped when the spec ends.
func watchedElector(cl client.WithWatch, ns, lease, identity, user string, mutate ...func(*fence.Config)) *watchedClient {
	GinkgoHelper()
	w := &watchedClient{journal: &testenv.Journal{}, log: &logLines{}, reg: prometheus.NewRegistry()}
	m, err := fence.NewMetrics(w.reg)
	Expect(err).NotTo(HaveOccurred())
	cfg := fence.Config{
		Client: cl, Namespace: ns, Name: lease, Identity: identity, User: user, Metrics: m,
		Callbacks: fence.Callbacks{OnStartedLeading: func(ctx context.Context, token int64) {
			i := w.journal.Started(identity, token)
			<-ctx.Done()
			w.journal.Stopped(i)
		}},
	}
	for _, f := range mutate {
		f(&cfg)
	}
	e, err := fence.New(cfg)
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(logf.IntoContext(suiteCtx, funcr.New(w.log.add, funcr.Options{})))
	w.runningElector = &runningElector{Elector: e, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer GinkgoRecover()
		defer close(w.done)
		Expect(e.Run(ctx)).To(Succeed())
	}()
	DeferCleanup(w.stop)
	return w
}

// errors is kubefence_client_lease_errors_total of the elector's lease for reason.
func (w *watchedClient) errors(reason string) float64 {
	n, ok, err := testenv.LeaseErrors(w.reg, reason)
	Expect(err).NotTo(HaveOccurred())
	if !ok {
		Fail("no kubefence_client_lease_errors_total series for reason " + reason)
	}
	return n
}

// logLines keeps the lines of a funcr logger.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) add(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, prefix+" "+args)
}

func (l *logLines) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// bindInNamespace creates the Role name with rule in ns and binds it to
// usernames, as a platform team's RoleBinding does.
func bindInNamespace(ns, name string, rule rbacv1.PolicyRule, usernames ...string) {
	GinkgoHelper()
	Expect(k8sClient.Create(suiteCtx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Rules: []rbacv1.PolicyRule{rule}})).To(Succeed())
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
	}
	for _, u := range usernames {
		binding.Subjects = append(binding.Subjects, rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: u})
	}
	Expect(k8sClient.Create(suiteCtx, binding)).To(Succeed())
}
