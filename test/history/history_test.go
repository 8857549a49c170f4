// Package history is kubefence's Jepsen-style history test: worker processes
// compete for FencedLeases and append to guarded Widgets through the client
// helper while a fault injector pauses and kills them, kills the operator,
// recreates leases and disturbs the network; the checker
// (test/history/checker) then judges every recorded attempt against the
// objects' final state. See docs/reliability.md.
//
// Profiles (environment):
//
//	go test ./test/history/                                  # short: >= 2,000 writes, >= 20 faults
//	HISTORY_PROFILE=soak HISTORY_WRITES=100000 HISTORY_FAULTS=1000 go test ./test/history/ -timeout 0 -v
//
// HISTORY_ENFORCEMENT=policy runs the operator in policy mode
// (--enforcement=policy: a ValidatingAdmissionPolicy judges the guarded
// writes, the propagation barrier holds each grant); TestHistoryPolicy runs
// the short profile in policy mode when it is unset.
// HISTORY_HEARTBEAT=lease (or session) makes the workers renew by a
// heartbeat Lease per lease (or one per worker for all its leases) after
// acknowledging each grant (docs/design.md, "Heartbeats"); =mixed gives the
// workers none, per lease and session by turns.
// HISTORY_COMMIT_DELAY=beyond makes the commit-delay fault hold commits past
// the commit lag: the run then passes only if the commit-order checker
// reports violations (default: within the leases' commit-lag budget, and no
// violation; within-lag: within --max-commit-lag). HISTORY_SEED replays a
// fault schedule (the choices; timing differs), HISTORY_DURATION caps the
// run, HISTORY_WORKERS and HISTORY_LEASES size it, and HISTORY_ARTIFACTS
// keeps the logs in that directory.
package history

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/pkg/fence/timing"
	"github.com/kubefence/kubefence/test/history/checker"
)

// profile sizes a run.
type profile struct {
	name string
	// writes and faults are the targets: the run goes on until both are
	// reached (or maxRun passes).
	writes, faults int
	maxRun         time.Duration
	// required: falling short of a target fails the test (short profile).
	required                bool
	workers, leases         int
	objectsPerLease, segCap int
	leaseSeconds            int32
	minGap, maxGap          time.Duration
	seed                    int64
	// enforcement is the operator's --enforcement mode.
	enforcement string
	// commitDelay is the commit-delay fault's setting.
	commitDelay string
	// heartbeat is how workers renew (the worker's --heartbeat).
	heartbeat string
	// artifactsSub is the subdirectory of HISTORY_ARTIFACTS this run keeps
	// its files in: TestHistoryPolicy's "policy", so that the two runs, at
	// the same time, never share binaries, logs or kubeconfigs.
	artifactsSub string
}

func loadProfile(t *testing.T) profile {
	p := profile{name: "short", writes: 2000, faults: 24, maxRun: 240 * time.Second, required: true,
		workers: 5, leases: 3, objectsPerLease: 2, segCap: 200, leaseSeconds: 2,
		minGap: 2 * time.Second, maxGap: 5 * time.Second, seed: time.Now().UnixNano() % 1_000_000_000,
		enforcement: operator.EnforcementWebhook, commitDelay: commitDelayWithin}
	if os.Getenv("HISTORY_PROFILE") == "soak" {
		p.name, p.writes, p.faults, p.maxRun, p.required = "soak", 100_000, 1000, 0, false
		p.minGap, p.maxGap = time.Second, 4*time.Second
	}
	envInt := func(key string, v *int) {
		if s := os.Getenv(key); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				t.Fatalf("%s=%q: expected a non-negative integer", key, s)
			}
			*v = n
		}
	}
	envInt("HISTORY_WRITES", &p.writes)
	envInt("HISTORY_FAULTS", &p.faults)
	envInt("HISTORY_WORKERS", &p.workers)
	envInt("HISTORY_LEASES", &p.leases)
	if s := os.Getenv("HISTORY_SEED"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("HISTORY_SEED=%q: %v", s, err)
		}
		p.seed = n
	}
	if s := os.Getenv("HISTORY_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("HISTORY_DURATION=%q: %v", s, err)
		}
		p.maxRun = d
	}
	switch e := os.Getenv("HISTORY_ENFORCEMENT"); e {
	case "":
	case operator.EnforcementWebhook, operator.EnforcementPolicy:
		p.enforcement = e
	default:
		t.Fatalf("HISTORY_ENFORCEMENT=%q: expected %q or %q", e, operator.EnforcementWebhook, operator.EnforcementPolicy)
	}
	switch h := os.Getenv("HISTORY_HEARTBEAT"); h {
	case "", "lease", "session", "mixed":
		p.heartbeat = h
	default:
		t.Fatalf("HISTORY_HEARTBEAT=%q: expected lease, session or mixed", h)
	}
	switch d := os.Getenv("HISTORY_COMMIT_DELAY"); d {
	case "":
	case commitDelayWithin, commitDelayWithinLag, commitDelayBeyond:
		p.commitDelay = d
	default:
		t.Fatalf("HISTORY_COMMIT_DELAY=%q: expected %q, %q or %q", d, commitDelayWithin, commitDelayWithinLag, commitDelayBeyond)
	}
	if p.workers < 2 || p.leases < 1 {
		t.Fatalf("HISTORY_WORKERS must be at least 2 and HISTORY_LEASES at least 1")
	}
	return p
}

// TestHistory and TestHistoryPolicy run at the same time, each on a control
// plane of its own: their run time is the fault schedule's real time (24
// faults 2 to 5 s apart), not CPU, so together they take about what one
// takes (make test's longest package: 4 min 27 s one after the other).
func TestHistory(t *testing.T) {
	t.Parallel()
	runHistory(t, loadProfile(t))
}

// TestHistoryPolicy is the short profile with the operator in policy mode
// (what CI runs besides TestHistory's webhook mode). It skips itself when
// HISTORY_ENFORCEMENT or HISTORY_PROFILE is set: TestHistory runs that
// choice.
func TestHistoryPolicy(t *testing.T) {
	if os.Getenv("HISTORY_ENFORCEMENT") != "" || os.Getenv("HISTORY_PROFILE") != "" {
		t.Skip("HISTORY_ENFORCEMENT or HISTORY_PROFILE is set: TestHistory runs that choice")
	}
	t.Parallel()
	prof := loadProfile(t)
	prof.enforcement = operator.EnforcementPolicy
	prof.artifactsSub = "policy"
	runHistory(t, prof)
}

func runHistory(t *testing.T, prof profile) {
	if testing.Short() {
		t.Skip("runs workers, faults and the operator against a real control plane for minutes")
	}
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is unset: run the tests with `make test`, which supplies kube-apiserver and etcd")
	}
	logf.SetLogger(logr.Discard())
	t.Logf("history profile %s, %s mode, commits delayed %s: seed %d (replay the fault schedule with HISTORY_SEED=%d), targets %d writes and %d faults",
		prof.name, prof.enforcement, describeCommitDelay(prof.commitDelay), prof.seed, prof.seed, prof.writes, prof.faults)

	dir := os.Getenv("HISTORY_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	} else {
		dir = filepath.Join(dir, prof.artifactsSub)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	cl, workerBin, rec, start := startRecorded(ctx, t, dir, prof.leaseSeconds, prof.enforcement)
	var leases []string
	for i := 0; i < prof.leases; i++ {
		name := fmt.Sprintf("job-%c", 'a'+i)
		leases = append(leases, name)
		if err := cl.createLease(ctx, name); err != nil {
			t.Fatal(err)
		}
	}

	ws := &workerSet{bin: workerBin, seed: prof.seed, args: []string{
		"--namespace=" + historyNamespace,
		"--leases=" + joinLeases(leases),
		"--objects-per-lease=" + strconv.Itoa(prof.objectsPerLease),
		"--segment-cap=" + strconv.Itoa(prof.segCap),
		"--start=" + strconv.FormatInt(start.UnixNano(), 10),
	}}
	if cl.two != nil {
		// A stale holder writes for longer (up to 15 writes 0-150 ms apart,
		// about 1-2 s, rather than 5): long enough to outlast the next
		// holder's first acknowledged write and meet the second server's
		// lagging cache (apiserver-lag). With 5, a run with the barrier
		// probing the first server only showed no violation in 3.5 minutes;
		// with 15, 13 in 4 (docs/reliability.md).
		ws.args = append(ws.args, "--max-stale-writes=15")
	}
	// With two kube-apiservers (policy mode) the workers alternate between
	// them, so that holders and stale holders write through each.
	apiAddrs, err := cl.apiServerAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < prof.workers; i++ {
		w := newWorker(dir, i)
		if w.proxy, err = newFaultProxy(apiAddrs[i%len(apiAddrs)]); err != nil {
			t.Fatal(err)
		}
		w.args = []string{"--heartbeat=" + workerHeartbeat(prof.heartbeat, i)}
		w.kubeconfig = filepath.Join(dir, w.name+".kubeconfig")
		if err := cl.workerKubeconfig(w.name, w.proxy.Addr(), w.kubeconfig); err != nil {
			t.Fatal(err)
		}
		ws.workers = append(ws.workers, w)
	}
	stopped := false
	defer func() {
		if !stopped {
			ws.stopAll(5 * time.Second)
		}
	}()
	for _, w := range ws.workers {
		if err := ws.start(w); err != nil {
			t.Fatal(err)
		}
	}

	faultLog, err := os.Create(filepath.Join(dir, "faults.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer faultLog.Close()
	inj := &injector{
		kinds: kindsFor(cl), rnd: newRand(prof.seed), cluster: cl, workers: ws, leases: leases, lease: time.Duration(prof.leaseSeconds) * time.Second,
		commitLag: timing.DefaultCommitLag, commitDelay: prof.commitDelay,
		minGap: prof.minGap, maxGap: prof.maxGap, log: faultLog, start: start, errs: make(chan error, 16),
		busy: map[string]bool{}, counts: map[string]int{}, healing: map[string]int{},
	}
	if prof.enforcement == operator.EnforcementPolicy {
		// No fault kind is the webhook's alone, so none is skipped.
		note := "policy mode: every fault kind applies; operator-net-delay delays the controller's reads and writes " +
			"(there are no webhook lease reads to delay), operator-kill leaves the policies in force; two kube-apiservers, " +
			"workers alternating between them, and faults of the second: apiserver-lag, apiserver-pause"
		t.Log(note)
		inj.logf("%s", note)
	}
	injCtx, stopInjector := context.WithCancel(ctx)
	injected := make(chan struct{})
	go func() { defer close(injected); inj.run(injCtx) }()

	// Run until both targets are reached.
	counter := newAppendCounter()
	lastReport := time.Now()
	var harnessErr error
	for {
		time.Sleep(time.Second)
		n := counter.update(ws.logPaths())
		if time.Since(lastReport) >= 30*time.Second {
			t.Logf("%v: %d writes attempted, %d faults injected", time.Since(start).Round(time.Second), n, inj.Total())
			lastReport = time.Now()
		}
		select {
		case harnessErr = <-inj.errs:
		default:
		}
		if harnessErr == nil {
			harnessErr = inj.deadWorker()
		}
		if harnessErr == nil {
			harnessErr = rec.Err()
		}
		if harnessErr != nil || (n >= prof.writes && inj.Total() >= prof.faults) ||
			(prof.maxRun > 0 && time.Since(start) >= prof.maxRun) {
			break
		}
	}
	stopInjector()
	<-injected
	runTime := time.Since(start)
	if harnessErr != nil {
		t.Fatalf("the harness failed (not a finding about kubefence): %v", harnessErr)
	}

	// Heal everything, let the system settle, then stop the workers: they finish
	// the attempts in flight. Only then is the final state read.
	for _, w := range ws.workers {
		w.proxy.Heal(true)
		_ = w.signal(syscall.SIGCONT)
		if p := w.proc(); p == nil || p.Exited() {
			if err := ws.start(w); err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(3 * time.Second)
	ws.stopAll(20 * time.Second)
	stopped = true
	time.Sleep(time.Second)

	finals, err := checker.ReadFinals(ctx, cl.admin, historyNamespace, start)
	if err != nil {
		t.Fatal(err)
	}
	// The canary: one write made to commit after the next grant, on a lease of
	// its own. Then every version committed so far is in the log once the
	// watches deliver what is committed after it.
	canaryHeld, canaryErr := cl.commitOrderCanary(ctx)
	if err := rec.Sync(ctx, cl.admin, 30*time.Second); err != nil {
		t.Fatalf("the harness failed (not a finding about kubefence): %v", err)
	}
	recorded, err := rec.Stop()
	if err != nil {
		t.Fatalf("the harness failed (not a finding about kubefence): %v", err)
	}
	commits, canary := splitCanary(recorded)
	if canaryErr != nil {
		t.Errorf("the commit-order canary failed (the harness, not kubefence): %v", canaryErr)
	} else {
		cres := checker.Check(nil, nil, checker.Options{Commits: canary})
		if cres.Counts[checker.CommitOrder] == 0 {
			t.Errorf("the commit-order checker did not flag the canary's write, held %v on its way to etcd until after the next grant: "+
				"it cannot fail (canary log: %+v)", canaryHeld.Round(time.Millisecond), canary)
		} else {
			t.Logf("commit-order canary (a write held %v, until after the next grant): flagged as it must be: %s",
				canaryHeld.Round(time.Millisecond), cres.Violations[0])
		}
	}
	if prof.heartbeat != "" {
		checkHeartbeats(ctx, t, cl.admin, start)
	}
	var records []checker.Record
	for _, path := range ws.logPaths() {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := checker.ReadRecords(f)
		_ = f.Close()
		if err != nil {
			t.Fatalf("reading %s: %v", path, err)
		}
		records = append(records, recs...)
	}
	ops := checker.Ops(records)
	checkStart := time.Now()
	res := checker.Check(ops, finals, checker.Options{VisualizeDir: dir, Commits: commits})
	checkTime := time.Since(checkStart)

	s := summarize(prof, ops, records, finals, inj.Counts(), inj.Total(), res, runTime, checkTime)
	t.Log("\n" + s)
	if err := os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(s), 0o644); err != nil {
		t.Error(err)
	}
	if prof.commitDelay == commitDelayBeyond {
		// The experiment: commits held past the commit lag must show.
		for _, v := range res.Violations {
			t.Logf("violation (commits delayed beyond the commit lag): %s", v)
		}
		if res.Counts[checker.CommitOrder] == 0 {
			t.Errorf("commits were delayed beyond the commit lag (%d commit-delay faults), yet the commit-order checker reports no violation",
				inj.Counts()[faultCommitDelay])
		}
	} else {
		for _, v := range res.Violations {
			t.Errorf("violation: %s", v)
		}
	}
	if len(res.Inconclusive) > 0 {
		t.Errorf("linearizability check inconclusive (timed out) for %v", res.Inconclusive)
	}
	for _, g := range res.CommitLogGaps {
		t.Errorf("the commit log is incomplete, so commit order is unproven (the harness failed, not kubefence): %s", g)
	}
	if prof.required {
		if n := countAppends(ops); n < prof.writes {
			t.Errorf("only %d guarded writes attempted in %v, the %s profile needs %d", n, runTime.Round(time.Second), prof.name, prof.writes)
		}
		if inj.Total() < prof.faults {
			t.Errorf("only %d faults injected in %v, the %s profile needs %d", inj.Total(), runTime.Round(time.Second), prof.name, prof.faults)
		}
	}
	if byOutcome(ops)[checker.OK] == 0 || byOutcome(ops)[checker.Stale] == 0 {
		t.Errorf("the run has no accepted or no stale-refused write: it tested nothing")
	}
	if t.Failed() {
		t.Logf("logs: %s (set HISTORY_ARTIFACTS to keep them)", dir)
	}
}

func newRand(seed int64) *rand.Rand { return rand.New(rand.NewSource(seed)) }

func countAppends(ops []checker.Op) int {
	n := 0
	for _, op := range ops {
		if op.Kind == checker.Append {
			n++
		}
	}
	return n
}

func byOutcome(ops []checker.Op) map[checker.Outcome]int {
	m := map[checker.Outcome]int{}
	for _, op := range ops {
		if op.Kind == checker.Append {
			m[op.Outcome]++
		}
	}
	return m
}

// summarize prints what the run did and what the checker found.
func summarize(prof profile, ops []checker.Op, records []checker.Record, finals []checker.Final, faults map[string]int, totalFaults int,
	res checker.Result, runTime, checkTime time.Duration) string {
	var b strings.Builder
	outcomes := byOutcome(ops)
	reads, staleAccepted, staleRefused, appliedUnknown := 0, 0, 0, 0
	final := map[string]bool{}
	for _, f := range finals {
		for _, e := range f.Entries {
			final[e] = true
		}
	}
	for _, op := range ops {
		if op.Kind == checker.Read {
			reads++
		}
		if op.Kind == checker.Append && op.Phase == "stale" {
			if op.Outcome == checker.OK {
				staleAccepted++
			} else if op.Outcome == checker.Stale {
				staleRefused++
			}
		}
	}
	tenures, tokens := 0, map[string]int64{}
	for _, r := range records {
		if r.Type == checker.TypeEvent && r.Event == "granted" {
			tenures++
			tokens[r.Lease] = max(tokens[r.Lease], r.Token)
		}
	}
	for _, op := range ops {
		if op.Indeterminate() && final[op.Value] {
			appliedUnknown++
		}
	}
	fmt.Fprintf(&b, "kubefence history test, profile %s, %s mode, commits delayed %s, seed %d\n", prof.name, prof.enforcement,
		describeCommitDelay(prof.commitDelay), prof.seed)
	fmt.Fprintf(&b, "  run: %v with %d workers, %d leases (%ds), %d objects\n", runTime.Round(time.Second), prof.workers, prof.leases,
		prof.leaseSeconds, res.Objects)
	if prof.heartbeat != "" {
		fmt.Fprintf(&b, "  renewals: by heartbeat (%s)\n", prof.heartbeat)
	}
	fmt.Fprintf(&b, "  guarded writes attempted: %d\n", countAppends(ops))
	fmt.Fprintf(&b, "    accepted (ok):           %d\n", outcomes[checker.OK])
	fmt.Fprintf(&b, "    refused as stale:        %d\n", outcomes[checker.Stale])
	fmt.Fprintf(&b, "    conflicts (retried):     %d\n", outcomes[checker.Conflict])
	fmt.Fprintf(&b, "    other refusals:          %d\n", outcomes[checker.Error])
	fmt.Fprintf(&b, "    indeterminate (timeout): %d, of which %d took effect\n", outcomes[checker.Timeout], appliedUnknown)
	fmt.Fprintf(&b, "  writes in the stale phase: %d accepted (token still current), %d refused as stale\n", staleAccepted, staleRefused)
	fmt.Fprintf(&b, "  reads: %d; tenures granted: %d; highest tokens: %v\n", reads, tenures, tokens)
	fmt.Fprintf(&b, "  faults injected: %d (%s)\n", totalFaults, summary(faults))
	var counts []string
	total := 0
	for _, p := range checker.Properties {
		counts = append(counts, fmt.Sprintf("%s=%d", p, res.Counts[p]))
		total += res.Counts[p]
	}
	sort.Strings(counts)
	fmt.Fprintf(&b, "  violations: %d (%s)\n", total, strings.Join(counts, " "))
	fmt.Fprintf(&b, "  linearizability: %d ops checked with porcupine in %v, %d inconclusive\n", res.LinearizableOps,
		checkTime.Round(time.Millisecond), len(res.Inconclusive))
	c := res.Commits
	fmt.Fprintf(&b, "  commit log: %d Widget and %d FencedLease versions by etcd revision, %d gaps; %d grants (%d in the commit that ended the previous tenure), "+
		"%d tenure ends without a grant, %d lease deletions\n", c.WidgetVersions, c.LeaseVersions, len(res.CommitLogGaps), c.Grants, c.HandOvers, c.Ends, c.Deletions)
	fmt.Fprintf(&b, "  commits after their tenure's end, before the next grant (allowed): %d, at most %d revisions late\n", c.LateCommits, c.MaxLateBy)
	fmt.Fprintf(&b, "  replay: HISTORY_SEED=%d\n", prof.seed)
	return b.String()
}

// workerHeartbeat is how worker i renews: HISTORY_HEARTBEAT, or with
// "mixed" by turns none, per lease and session, so that holders of all
// three kinds hand the same leases over to one another (the mix a fleet
// runs while it moves to heartbeats).
func workerHeartbeat(heartbeat string, i int) string {
	if heartbeat != "mixed" {
		return heartbeat
	}
	return [...]string{"", "lease", "session"}[i%3]
}

// checkHeartbeats makes sure the run renewed by heartbeat (HISTORY_HEARTBEAT):
// the history namespace holds heartbeat Leases, renewed after the run's start.
func checkHeartbeats(ctx context.Context, t *testing.T, c client.Client, start time.Time) {
	t.Helper()
	var leases coordinationv1.LeaseList
	if err := c.List(ctx, &leases, client.InNamespace(historyNamespace), client.HasLabels{coordv1alpha1.HeartbeatLabel}); err != nil {
		t.Fatalf("listing the heartbeat Leases: %v", err)
	}
	renewed := 0
	for _, l := range leases.Items {
		if l.Spec.RenewTime != nil && l.Spec.RenewTime.After(start.Add(10*time.Second)) {
			renewed++
		}
	}
	if renewed == 0 {
		t.Fatalf("HISTORY_HEARTBEAT is set, yet none of the %d heartbeat Leases was renewed during the run: the workers did not renew by heartbeat", len(leases.Items))
	}
	t.Logf("heartbeat Leases: %d, %d renewed during the run", len(leases.Items), renewed)
}
