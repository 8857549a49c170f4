package faults

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/fencedlease"
	"github.com/kubefence/kubefence/hack/devenv"
	"github.com/kubefence/kubefence/pkg/fence"
	"github.com/kubefence/kubefence/test/testenv"
)

// recoveryBound is the longest a takeover may take after the holder went
// silent, by docs/design.md: the lease duration plus the controller's drift
// allowance, plus slack for what the fault itself costs (a restart, a watch
// reconnect, the new holder's acknowledging renewal).
func recoveryBound(l, slack time.Duration) time.Duration {
	return l + fencedlease.DefaultTiming().Allowance(l) + slack
}

// newNamespace creates a namespace of its own for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns, err := cluster.Namespace(suiteCtx, "fault")
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

func newLease(g Gomega, ns, name string, durationSeconds int32) {
	g.Expect(cluster.Admin.Create(suiteCtx, &coordv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: durationSeconds},
	})).To(Succeed())
}

// getLease reads a lease, retrying while the API server is unavailable.
func getLease(g Gomega, ns, name string) *coordv1alpha1.FencedLease {
	var l coordv1alpha1.FencedLease
	g.Eventually(func() error {
		return cluster.Admin.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: name}, &l)
	}, 30*time.Second, 50*time.Millisecond).Should(Succeed())
	return &l
}

// holderOf returns the lease's holder and token ("" and 0 when unreadable).
func holderOf(ns, name string) (string, int64) {
	var l coordv1alpha1.FencedLease
	if err := cluster.Admin.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: name}, &l); err != nil {
		return "", 0
	}
	return l.Status.HolderIdentity, l.Status.FencingToken
}

// queued returns the identities with a request in the lease's spec.
func queued(ns, name string) []string {
	var l coordv1alpha1.FencedLease
	if err := cluster.Admin.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: name}, &l); err != nil {
		return nil
	}
	var ids []string
	for _, r := range l.Spec.Requests {
		ids = append(ids, r.HolderIdentity)
	}
	return ids
}

func waitQueued(g Gomega, ns, name, identity string) {
	g.Eventually(func() []string { return queued(ns, name) }, 10*time.Second, 20*time.Millisecond).Should(ContainElement(identity))
}

// eachRenewal starts one controller and runs scenario once per renewal kind,
// the kinds' subtests in parallel.
func eachRenewal(t *testing.T, scenario func(*testing.T, testenv.Renewal)) {
	startController(t, controllerOptions{})
	for _, r := range testenv.Renewals {
		t.Run(string(r), func(t *testing.T) {
			t.Parallel()
			scenario(t, r)
		})
	}
}

// jobScenario is the opening of a fault test on one lease: a namespace of
// its own, lease ns/job of 2 s, and a monitor of the namespace. The test
// starts the controller (one for all its renewal kinds' subtests).
func jobScenario(t *testing.T) (Gomega, string, *monitor) {
	t.Helper()
	g := NewWithT(t)
	ns := newNamespace(t)
	newLease(g, ns, "job", 2)
	return g, ns, startMonitor(t, ns)
}

// holdWithBobQueued is the opening of a scenario on lease ns/name: alice's
// elector, on leaseCl, holds it (her tenures go to j), renewing by r (her
// heartbeat written through leaseCl too); she creates Widget ns/w, guarded
// by it with her token, through writeCl; bob's elector, renewing by r,
// queues behind her (his tenures go to j too). It returns alice's elector
// and token.
func holdWithBobQueued(t *testing.T, g Gomega, ns, name string, r testenv.Renewal, leaseCl, writeCl client.WithWatch, j *testenv.Journal) (*runningElector, int64) {
	t.Helper()
	a := startRenewingElector(t, leaseCl, "alice", ns, name, "alice", r.Process(leaseCl, ns, "alice-session", "alice"), j)
	g.Eventually(j.Len, 10*time.Second, 10*time.Millisecond).Should(Equal(1))
	tokA := j.Snapshot()[0].Token
	g.Expect(createWidget(writeCl, ns, "w", name, tokA, "alice")).To(Succeed())
	startRenewingElector(t, users["bob"], "bob", ns, name, "bob", r.Process(users["bob"], ns, "bob-session", "bob"), j)
	waitQueued(g, ns, name, "bob")
	return a, tokA
}

// bobGranted waits for bob's grant, the second tenure in j, and checks that
// it came within bound of the fault (at, named after in the log; slower says
// what a late grant means) and that the tokens increase. It returns the
// tenures.
func bobGranted(t *testing.T, g Gomega, j *testenv.Journal, after string, at time.Time, bound time.Duration, slower string) []testenv.Grant {
	t.Helper()
	g.Eventually(j.Len, bound+5*time.Second, 10*time.Millisecond).Should(Equal(2), "bob was never granted")
	gs := j.Snapshot()
	g.Expect(gs[1].Identity).To(Equal("bob"))
	t.Logf("bob granted %v after %s (bound %v)", gs[1].Start.Sub(at).Round(time.Millisecond), after, bound)
	g.Expect(gs[1].Start.Sub(at)).To(BeNumerically("<=", bound), slower)
	expectIncreasing(g, j)
	return gs
}

// joinRaw queues a request without the helper: a client that never renews.
func joinRaw(g Gomega, user, ns, lease, identity string) {
	g.Eventually(func() error {
		var l coordv1alpha1.FencedLease
		if err := users[user].Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: lease}, &l); err != nil {
			return err
		}
		l.Spec.Requests = append(l.Spec.Requests, coordv1alpha1.LeaseRequest{HolderIdentity: identity, User: user})
		return users[user].Update(suiteCtx, &l)
	}, 10*time.Second, 20*time.Millisecond).Should(Succeed())
}

// expectIncreasing asserts that the tenures' tokens strictly increase and
// that each tenure ended before the next began (the holders' own view).
func expectIncreasing(g Gomega, j *testenv.Journal) {
	gs := j.Snapshot()
	for i := 1; i < len(gs); i++ {
		g.Expect(gs[i].Token).To(BeNumerically(">", gs[i-1].Token), "tenures %v", gs)
		g.Expect(gs[i-1].Stop).NotTo(BeZero(), "%s's tenure %d never ended, yet %s was granted %d", gs[i-1].Identity, gs[i-1].Token, gs[i].Identity, gs[i].Token)
		g.Expect(gs[i-1].Stop.Before(gs[i].Start)).To(BeTrue(), "%s stopped (%v) after %s started (%v)", gs[i-1].Identity, gs[i-1].Stop, gs[i].Identity, gs[i].Start)
	}
}

// runningElector is a fence.Elector running in the background.
type runningElector struct {
	*fence.Elector
	cancel context.CancelFunc
	done   chan struct{}
}

// startElector runs an elector through cl that records its tenures in j; the
// test's cleanup stops it.
func startElector(t *testing.T, cl client.WithWatch, user, ns, lease, identity string, j *testenv.Journal) *runningElector {
	t.Helper()
	return startRenewingElector(t, cl, user, ns, lease, identity, nil, j)
}

// startRenewingElector is startElector renewing by heartbeat hb (nil: by
// renewTime stamps; testenv.Renewal.Process).
func startRenewingElector(t *testing.T, cl client.WithWatch, user, ns, lease, identity string, hb *fence.Heartbeat, j *testenv.Journal) *runningElector {
	t.Helper()
	e, err := fence.New(fence.Config{
		Client: cl, User: user, Namespace: ns, Name: lease, Identity: identity, Heartbeat: hb,
		Callbacks: fence.Callbacks{
			OnStartedLeading: func(ctx context.Context, token int64) {
				i := j.Started(identity, token)
				<-ctx.Done()
				j.Stopped(i)
			},
		},
	})
	if err != nil {
		t.Fatalf("fence.New: %v", err)
	}
	ctx, cancel := context.WithCancel(suiteCtx)
	r := &runningElector{Elector: e, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		_ = e.Run(ctx)
	}()
	t.Cleanup(r.stop)
	return r
}

// stop cancels the elector and waits (bounded) for Run to return.
func (r *runningElector) stop() {
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(15 * time.Second):
	}
}

// wrappedClient is a client acting as user whose transport wrap wraps: a
// fault transport (a fault.Gate's Stall, slowWrites).
func wrappedClient(t *testing.T, user string, wrap func(http.RoundTripper) http.RoundTripper) client.WithWatch {
	t.Helper()
	c := rest.CopyConfig(userConfigs[user])
	c.Wrap(wrap)
	cl, err := client.NewWithWatch(c, client.Options{Scheme: cluster.Scheme})
	if err != nil {
		t.Fatalf("client for %s: %v", user, err)
	}
	return cl
}

// createWidget creates a Widget guarded by lease, written with token.
func createWidget(cl client.Client, ns, name, lease string, token int64, writer string) error {
	u := testenv.Widget(ns, name)
	_ = unstructured.SetNestedField(u.Object, writer, "spec", "writer")
	return fence.NewFencedClient(cl, lease, devenv.FixedToken(token)).Create(suiteCtx, u)
}

// writeWidget sets spec.writer with a merge patch stamped with token.
func writeWidget(ctx context.Context, cl client.Client, ns, name, lease string, token int64, writer string) error {
	return fence.NewFencedClient(cl, lease, devenv.FixedToken(token)).Patch(ctx, testenv.Widget(ns, name),
		client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"writer":%q}}`, writer))))
}

// widgetState returns a Widget's writer and accepted token.
func widgetState(g Gomega, ns, name string) (string, int64) {
	u := testenv.Widget(ns, name)
	g.Eventually(func() error {
		return cluster.Admin.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: name}, u)
	}, 30*time.Second, 50*time.Millisecond).Should(Succeed())
	w, _, _ := unstructured.NestedString(u.Object, "spec", "writer")
	tok, _ := strconv.ParseInt(u.GetAnnotations()[coordv1alpha1.FencingTokenAnnotation], 10, 64)
	return w, tok
}

// expectStale asserts that err is a fencing refusal (stale token, expired or
// ended tenure, or a requester that is not the holder), not some other error.
func expectStale(g Gomega, err error, what string) {
	g.Expect(err).To(HaveOccurred(), "%s was accepted", what)
	g.Expect(fence.IsStale(err)).To(BeTrue(), "%s: refused, but not as stale: %v", what, err)
}

// monitor watches a namespace's leases and Widgets for the whole test,
// re-watching after the API server or etcd went away, and records every grant
// and every token a Widget accepted.
type monitor struct {
	mu sync.Mutex
	// grants are (holder, token) of lease versions with a holder, by lease name.
	grants map[string][]seenGrant
	// accepted are the tokens each Widget accepted, in order, by Widget name.
	accepted map[string][]int64
}

type seenGrant struct {
	holder string
	token  int64
}

func startMonitor(t *testing.T, ns string) *monitor {
	m := &monitor{grants: map[string][]seenGrant{}, accepted: map[string][]int64{}}
	ctx, cancel := context.WithCancel(suiteCtx)
	t.Cleanup(cancel)
	go m.watch(ctx, &coordv1alpha1.FencedLeaseList{}, ns, m.onLease)
	go m.watch(ctx, &unstructured.UnstructuredList{Object: map[string]any{
		"apiVersion": devenv.WidgetGVK.GroupVersion().String(), "kind": "WidgetList"}}, ns, m.onWidget)
	return m
}

func (m *monitor) watch(ctx context.Context, list client.ObjectList, ns string, on func(client.Object)) {
	for ctx.Err() == nil {
		w, err := cluster.Admin.Watch(ctx, list, client.InNamespace(ns))
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			if o, ok := ev.Object.(client.Object); ok {
				on(o)
			}
		}
		w.Stop()
	}
}

func (m *monitor) onLease(o client.Object) {
	l, ok := o.(*coordv1alpha1.FencedLease)
	if !ok || l.Status.HolderIdentity == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := seenGrant{l.Status.HolderIdentity, l.Status.FencingToken}
	if h := m.grants[l.Name]; len(h) == 0 || h[len(h)-1] != s {
		m.grants[l.Name] = append(h, s)
	}
}

func (m *monitor) onWidget(o client.Object) {
	tok, err := strconv.ParseInt(o.GetAnnotations()[coordv1alpha1.FencingTokenAnnotation], 10, 64)
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if h := m.accepted[o.GetName()]; len(h) == 0 || h[len(h)-1] != tok {
		m.accepted[o.GetName()] = append(h, tok)
	}
}

// check asserts safety over everything seen: no lease's grants went down in
// token or gave one token to two holders, and no Widget accepted a token lower
// than one it had accepted.
func (m *monitor) check(g Gomega) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, h := range m.grants {
		holderOf := map[int64]string{}
		for i, s := range h {
			if i > 0 {
				g.Expect(s.token).To(BeNumerically(">=", h[i-1].token), "lease %s: token went down: %v", name, h)
			}
			if prev, ok := holderOf[s.token]; ok {
				g.Expect(prev).To(Equal(s.holder), "lease %s: token %d granted to two holders: %v", name, s.token, h)
			}
			holderOf[s.token] = s.holder
		}
	}
	for name, h := range m.accepted {
		for i := 1; i < len(h); i++ {
			g.Expect(h[i]).To(BeNumerically(">=", h[i-1]), "widget %s accepted a lower token: %v", name, h)
		}
	}
}

// isNotFound is apierrors.IsNotFound for Eventually.
func isNotFound(err error) bool { return err != nil && apierrors.IsNotFound(err) }
