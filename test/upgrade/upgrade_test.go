// Package upgrade tests a rolling upgrade of the operator with holders live:
// the previous release (previousRelease, built from this clone's history)
// and this tree run side by side against one real API server, as the pods of
// one Deployment do during `helm upgrade` or `kubectl rollout`: the webhook
// calls are spread over the old and the new replicas (webhookService), the
// leader is an old replica first and a new one later, and holders built from
// either version's pkg/fence hold leases and write guarded Widgets
// throughout. The history checker (test/history/checker) judges every write;
// a lease monitor checks that a token never names two holders; and no live
// holder may be refused or lose its lease (liveness).
//
//	go test ./test/upgrade/ -v
//
// UPGRADE_ARTIFACTS keeps the replicas' and holders' logs in that directory.
package upgrade

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/test/history/checker"
	"github.com/kubefence/kubefence/test/testenv"
)

const root = "../.."

var suite struct {
	env             *envtest.Environment
	admin           client.Client
	adminUser       string
	adminKubeconfig string
	svc             *webhookService
	old, cur        binaries
	dir             string
}

func TestMain(m *testing.M) {
	logf.SetLogger(logr.Discard())
	// The CRD is this tree's: a rolling upgrade applies the new CRD first
	// (it only adds optional fields), then rolls the Deployment.
	in := testenv.Input{Root: root, CRDs: true, Webhooks: true, Setup: setUp, Configure: func(env *envtest.Environment) {
		env.ControlPlaneStartTimeout = 90 * time.Second
		env.WebhookInstallOptions.LocalServingHost = "127.0.0.1"
	}}
	code := testenv.Run(m, in)
	if suite.svc != nil {
		suite.svc.close()
	}
	if suite.dir != "" {
		_ = os.RemoveAll(suite.dir)
	}
	os.Exit(code)
}

func setUp(ctx context.Context, c *testenv.Cluster) error {
	env := c.Env
	suite.env, suite.admin, suite.adminUser = env, c.Admin, c.AdminUser
	dir, err := os.MkdirTemp("", "kubefence-upgrade-*")
	if err != nil {
		return err
	}
	suite.dir = dir
	if suite.old, err = buildRelease(ctx, root, previousRelease); err != nil {
		return err
	}
	if suite.cur, err = buildCurrent(ctx, root, dir); err != nil {
		return err
	}
	suite.adminKubeconfig = filepath.Join(dir, "admin.kubeconfig")
	if err := os.WriteFile(suite.adminKubeconfig, env.KubeConfig, 0o600); err != nil {
		return err
	}
	for _, obj := range holdersRBAC() {
		if err := suite.admin.Create(ctx, obj); err != nil {
			return err
		}
	}
	w := env.WebhookInstallOptions
	suite.svc, err = startWebhookService(fmt.Sprintf("127.0.0.1:%d", w.LocalServingPort), w.LocalServingCertDir, w.LocalServingCAData)
	return err
}

// scenario is one rolling upgrade.
type scenario struct {
	name string
	// holders are the versions of the holder processes.
	holders []binaries
}

// phase is a stretch of the upgrade with one set of replicas.
type phase struct {
	name     string
	from, to int64 // ns since the run's start
	// calls are the webhook calls each replica served.
	calls map[string]served
}

const (
	// leaseSeconds is long enough that the handover of the controller between
	// replicas costs no holder its lease: the old leader stops its controller,
	// then releases its Lease, and the next acquires it within its 2 s retry
	// period, 2 to 4 s in all, while the status goes unacknowledged (on a 6 s
	// lease, with renewals every 2 s, that gap refused live writes).
	leaseSeconds = 10
	phaseLength  = 20 * time.Second
)

var leases = []string{"job-a", "job-b", "job-c"}

func TestRollingUpgrade(t *testing.T) {
	testenv.SkipIfShort(t)
	// (a) and (b): holders of the previous release through the whole upgrade,
	// and against the new operator alone at the end.
	t.Run("old holders", func(t *testing.T) {
		runScenario(t, scenario{name: "old", holders: []binaries{suite.old, suite.old, suite.old}})
	})
	// No scenario with holders of this release: previousRelease's webhook
	// judges a tenure from status.expireTime alone, which this controller
	// does not move on a stamped renewal, and the pre-release shim for that
	// (--acknowledge-stamped-renewals) is gone. It returns when
	// previousRelease is v0.1.0 (docs/versioning.md).
}

func runScenario(t *testing.T, sc scenario) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := filepath.Join(suite.dir, sc.name)
	if a := os.Getenv("UPGRADE_ARTIFACTS"); a != "" {
		dir = filepath.Join(a, sc.name)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ns := "upgrade-" + sc.name
	if err := suite.admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}

	replicas := map[string]*proc{}
	defer func() {
		for name, p := range replicas {
			suite.svc.remove(name)
			p.Stop(10 * time.Second)
		}
	}()
	startReplicaOf := func(name string, b binaries, extra ...string) *proc {
		t.Helper()
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		p, err := startReplica(ctx, suite.env, name, b.manager, suite.adminKubeconfig, suite.adminUser, dir, port, extra...)
		if err != nil {
			t.Fatal(err)
		}
		replicas[name] = p
		if err := suite.svc.add(name, port, suite.env.WebhookInstallOptions.LocalServingCAData); err != nil {
			t.Fatal(err)
		}
		return p
	}
	stopReplica := func(name string) {
		// The endpoint goes first and its calls drain, then SIGTERM (as with a
		// preStop delay): the previous release refuses the calls it has in
		// flight when it stops ("context canceled"; fixed since, see
		// TestCallsInFlightAreDecidedWhileTheManagerStops).
		suite.svc.remove(name)
		replicas[name].Stop(10 * time.Second)
		delete(replicas, name)
	}

	old1 := startReplicaOf("old-1", suite.old)
	if err := waitLeading(ctx, old1, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, l := range leases {
		if err := suite.admin.Create(ctx, &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: l},
			Spec: coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: leaseSeconds}}); err != nil {
			t.Fatal(err)
		}
	}

	start := time.Now()
	holders, err := startHolders(ctx, sc, ns, dir, start)
	defer func() {
		for _, h := range holders {
			h.Stop(20 * time.Second)
		}
	}()
	if err != nil {
		t.Fatal(err)
	}
	mon := startMonitor(ctx, ns)

	var phases []*phase
	begin := func(name string) {
		now := time.Since(start).Nanoseconds()
		if n := len(phases); n > 0 {
			phases[n-1].to = now
			phases[n-1].calls = suite.svc.takeCounts()
		} else {
			suite.svc.takeCounts()
		}
		if name != "" {
			phases = append(phases, &phase{name: name, from: now})
		}
	}
	sleep := func(d time.Duration) {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}

	// Each phase begins at the change that starts it, so that every call
	// and every write falls in one phase.
	begin("old replica only")
	sleep(phaseLength)

	begin("old leader, new replica")
	startReplicaOf("new-1", suite.cur)
	sleep(phaseLength)

	// The old leader's pod terminates; the new replica takes over the
	// controller, and an old replica still serves webhook calls.
	begin("new leader, old replica")
	stopReplica("old-1")
	if err := waitLeading(ctx, replicas["new-1"], 30*time.Second); err != nil {
		t.Fatal(err)
	}
	startReplicaOf("old-2", suite.old) // after the handover: it must not win it
	sleep(phaseLength)

	begin("new replica only")
	stopReplica("old-2")
	sleep(phaseLength)
	begin("")

	for _, h := range holders {
		h.Stop(20 * time.Second)
	}
	mon.stop()
	judge(t, ctx, ns, dir, start, holders, phases, mon)
}

// minTenure is the holders' --min-tenure: a tenure that ends sooner, before
// the holder is told to exit, was lost, not released.
const minTenure = 12 * time.Second

// lostTenures lists the tenures a holder lost: ended ("stopped") sooner than
// minTenure after their grant while the holder was not exiting, and the
// errors its elector reported (a refused renewal among them).
func lostTenures(records []checker.Record) []string {
	var out []string
	granted := map[string]int64{} // worker/lease -> grant time
	exiting := map[string]bool{}
	for _, r := range records {
		if r.Type != checker.TypeEvent {
			continue
		}
		key := r.Worker + "/" + r.Lease
		switch r.Event {
		case "exiting":
			exiting[r.Worker] = true
		case "granted":
			granted[key] = r.Invoke
		case "stopped":
			if g, ok := granted[key]; ok && !exiting[r.Worker] && time.Duration(r.Invoke-g) < minTenure {
				out = append(out, fmt.Sprintf("%s: tenure of token %d ended %v after its grant", key, r.Token, time.Duration(r.Invoke-g).Round(time.Millisecond)))
			}
			delete(granted, key)
		case "elector-error":
			out = append(out, fmt.Sprintf("%s: elector error at %v: %s", key, time.Duration(r.Invoke).Round(time.Millisecond), r.Msg))
		}
	}
	return out
}

// startHolders starts one holder process per sc.holders, each as its own
// user, competing for every lease.
func startHolders(ctx context.Context, sc scenario, ns, dir string, start time.Time) ([]*proc, error) {
	var out []*proc
	for i, b := range sc.holders {
		name := fmt.Sprintf("%s-holder-%d-%s", sc.name, i, b.version)
		u, err := suite.env.AddUser(envtest.User{Name: name, Groups: []string{holdersGroup}}, nil)
		if err != nil {
			return out, fmt.Errorf("adding user %s: %w", name, err)
		}
		kc, err := u.KubeConfig()
		if err != nil {
			return out, err
		}
		kubeconfig := filepath.Join(dir, name+".kubeconfig")
		if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
			return out, err
		}
		args := []string{
			"--kubeconfig=" + kubeconfig, "--namespace=" + ns, "--leases=" + strings.Join(leases, ","),
			"--identity=" + name, "--user=" + name, fmt.Sprintf("--start=%d", start.UnixNano()), fmt.Sprintf("--seed=%d", i+1),
			// Tenures of several lease durations, so that renewals, not only
			// grants, carry a tenure through each phase.
			"--min-tenure=" + minTenure.String(), "--max-tenure=" + (2 * minTenure).String(), "--interval=40ms", "--write-timeout=3s",
		}
		p, err := startProc(name, b.holder, filepath.Join(dir, name+".jsonl"), args, nil)
		if err != nil {
			return out, err
		}
		out = append(out, p)
	}
	return out, nil
}

// monitor polls the leases and checks that a token names one holder only,
// that tokens never go back, and records how each tenure ended.
type monitor struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	errs   []string
	ended  map[string]coordv1alpha1.EndReason // lease/token -> how the tenure ended
	tokens map[string]map[int64]string        // lease -> token -> holder
}

func startMonitor(ctx context.Context, ns string) *monitor {
	ctx, cancel := context.WithCancel(ctx)
	m := &monitor{cancel: cancel, done: make(chan struct{}), ended: map[string]coordv1alpha1.EndReason{}, tokens: map[string]map[int64]string{}}
	last := map[string]int64{}
	go func() {
		defer close(m.done)
		for ctx.Err() == nil {
			for _, name := range leases {
				var l coordv1alpha1.FencedLease
				if err := suite.admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &l); err != nil {
					continue
				}
				m.observe(name, &l, last)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return m
}

func (m *monitor) observe(name string, l *coordv1alpha1.FencedLease, last map[string]int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := l.Status
	if st.FencingToken < last[name] {
		m.errs = append(m.errs, fmt.Sprintf("lease %s: token went back from %d to %d", name, last[name], st.FencingToken))
	}
	if p := st.PreviousHolder; p != nil {
		m.ended[fmt.Sprintf("%s/%d", name, p.FencingToken)] = p.Reason
	}
	last[name] = max(last[name], st.FencingToken)
	if st.HolderIdentity == "" {
		return
	}
	if m.tokens[name] == nil {
		m.tokens[name] = map[int64]string{}
	}
	if h, ok := m.tokens[name][st.FencingToken]; ok && h != st.HolderIdentity {
		m.errs = append(m.errs, fmt.Sprintf("lease %s: token %d names two holders, %s and %s", name, st.FencingToken, h, st.HolderIdentity))
	}
	m.tokens[name][st.FencingToken] = st.HolderIdentity
}

// ends counts the tenures seen to end, by reason.
func (m *monitor) ends() map[coordv1alpha1.EndReason]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := map[coordv1alpha1.EndReason]int{}
	for _, r := range m.ended {
		n[r]++
	}
	return n
}

func (m *monitor) stop() {
	m.cancel()
	<-m.done
}

// judge checks the run: safety by the history checker and the monitor,
// liveness by the live holders' refused writes and the tenures that expired.
func judge(t *testing.T, ctx context.Context, ns, dir string, start time.Time, holders []*proc, phases []*phase, mon *monitor) {
	t.Helper()
	var records []checker.Record
	for _, h := range holders {
		f, err := os.Open(h.out)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := checker.ReadRecords(f)
		_ = f.Close()
		if err != nil {
			t.Fatalf("reading %s: %v", h.out, err)
		}
		records = append(records, recs...)
	}
	finals, err := checker.ReadFinals(ctx, suite.admin, ns, start)
	if err != nil {
		t.Fatal(err)
	}
	ops := checker.Ops(records)
	res := checker.Check(ops, finals, checker.Options{VisualizeDir: dir})
	for _, v := range res.Violations {
		t.Errorf("violation: %s", v)
	}
	if len(res.Inconclusive) > 0 {
		t.Errorf("linearizability check inconclusive for %v", res.Inconclusive)
	}
	for _, e := range mon.errs {
		t.Errorf("lease monitor: %s", e)
	}

	type tally struct{ accepted, staleRefused, liveRefused, granted int }
	per := make([]tally, len(phases))
	at := func(ns int64) int {
		for i, p := range phases {
			if ns >= p.from && ns < p.to {
				return i
			}
		}
		return -1
	}
	var live []string
	for _, op := range ops {
		i := at(op.Invoke)
		if op.Kind != checker.Append || i < 0 {
			continue
		}
		switch {
		case op.Outcome == checker.OK:
			per[i].accepted++
		case op.Phase == "stale" && op.Outcome == checker.Stale:
			per[i].staleRefused++
		case op.Phase == "leader" && (op.Outcome == checker.Stale || op.Outcome == checker.Error):
			per[i].liveRefused++
			if len(live) < 5 {
				live = append(live, fmt.Sprintf("%s at %v (%s): %s", op.Worker, time.Duration(op.Invoke).Round(time.Millisecond), phases[i].name, op.Msg))
			}
		}
	}
	for _, r := range records {
		if i := at(r.Invoke); r.Type == checker.TypeEvent && r.Event == "granted" && i >= 0 {
			per[i].granted++
		}
	}
	lost := lostTenures(records)

	var b strings.Builder
	fmt.Fprintf(&b, "%-26s %9s %9s %9s %8s  webhook calls (fencing/FencedLease) per replica\n", "phase", "accepted", "stale-ref", "live-ref", "grants")
	for i, p := range phases {
		var calls []string
		for name, c := range p.calls {
			calls = append(calls, fmt.Sprintf("%s %d/%d", name, c.fencing, c.leases))
		}
		sort.Strings(calls)
		fmt.Fprintf(&b, "%-26s %9d %9d %9d %8d  %s\n", p.name, per[i].accepted, per[i].staleRefused, per[i].liveRefused, per[i].granted, strings.Join(calls, ", "))
	}
	ends := mon.ends()
	fmt.Fprintf(&b, "tenures lost by holders: %d; ", len(lost))
	fmt.Fprintf(&b, "tenure ends: %v; checker: %d objects, %d ops, %d violations\n", ends, res.Objects, len(ops), len(res.Violations))
	t.Log("\n" + b.String())

	// The run must have tested something: writes accepted in every phase,
	// stale writes refused, and each phase's replicas serving fencing calls.
	total := 0
	for i, p := range phases {
		total += per[i].staleRefused
		if per[i].accepted == 0 {
			t.Errorf("phase %q: no guarded write was accepted", p.name)
		}
		for name, c := range p.calls {
			if c.fencing == 0 {
				t.Errorf("phase %q: replica %s served no fencing call", p.name, name)
			}
		}
	}
	if total == 0 {
		t.Errorf("no stale write was refused: the run tested no fencing")
	}
	// Liveness: a holder that renews is never refused, never loses its lease.
	for i, p := range phases {
		if per[i].liveRefused > 0 {
			t.Errorf("phase %q: %d writes of live holders refused", p.name, per[i].liveRefused)
		}
	}
	for _, l := range live {
		t.Logf("live write refused: %s", l)
	}
	if n := ends[coordv1alpha1.EndReasonExpired] + ends[coordv1alpha1.EndReasonSuperseded]; n > 0 {
		t.Errorf("%d tenures of live holders expired (leases flapped)", n)
	}
	for _, l := range lost {
		t.Errorf("a holder lost its lease: %s", l)
	}
	if t.Failed() {
		t.Logf("logs: %s (UPGRADE_ARTIFACTS keeps them)", dir)
	}
}
