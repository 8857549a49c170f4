package history

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"slices"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence/timing"
)

// Fault kinds.
const (
	faultPauseShort    = "pause-short"        // SIGSTOP a worker for less than a lease, then SIGCONT
	faultPauseLong     = "pause-long"         // SIGSTOP a worker for longer than a lease
	faultWorkerKill    = "worker-kill"        // kill -9 a worker, restart it
	faultOperatorKill  = "operator-kill"      // kill -9 the operator, restart it
	faultLeaseRecreate = "lease-recreate"     // delete a FencedLease and create it again
	faultNetDelay      = "net-delay"          // delay a worker's traffic to the API server
	faultNetPartition  = "net-partition"      // hold a worker's traffic both ways, then heal
	faultLoseResponses = "net-lose-answers"   // hold only the API server's answers, then heal
	faultOperatorDelay = "operator-net-delay" // delay the operator's traffic: its lease reads (webhook) and writes (controller)
	faultRevoke        = "revoke"             // an operator revokes a held lease (kubectl fence release / handover), writes in flight
	faultAPIServerLag  = "apiserver-lag"      // delay what etcd sends the second kube-apiserver: its caches (the policy's parameters) lag
	faultAPIServerStop = "apiserver-pause"    // SIGSTOP the second kube-apiserver, then SIGCONT: what queued runs on a stale cache
	faultCommitDelay   = "commit-delay"       // delay the kube-apiservers' Widget writes to etcd after admission, revoking the leases meanwhile
	faultHealReset     = "reset"              // heal by resetting the connections
	faultHealLate      = "late"               // heal by delivering what was held
)

var faultKinds = []string{faultPauseShort, faultPauseLong, faultWorkerKill, faultOperatorKill, faultLeaseRecreate,
	faultNetDelay, faultNetPartition, faultLoseResponses, faultOperatorDelay, faultRevoke, faultCommitDelay}

// The settings of the commit-delay fault (HISTORY_COMMIT_DELAY).
const (
	// commitDelayWithin delays commits by a quarter to a half of the commit
	// lag the run's leases are fenced for (commitDelayRange): no violation
	// may follow.
	commitDelayWithin = "within"
	// commitDelayWithinLag delays them by a quarter to a half of
	// --max-commit-lag C: within what the waits after a revocation, a
	// recreation and the barrier cover, beyond what a 2 s lease's expiry
	// does (its budget is L/10 - S). No violation is expected from the
	// fault's revocations; the mutation experiment of docs/reliability.md
	// runs with it.
	commitDelayWithinLag = "within-lag"
	// commitDelayBeyond delays them by 1.5 to 3 times --max-commit-lag:
	// commit-order violations must follow (the run fails without one).
	commitDelayBeyond = "beyond"
)

// twoServerFaults are the faults of a control plane of two kube-apiservers
// (policy mode's): they act on the second.
var twoServerFaults = []string{faultAPIServerLag, faultAPIServerStop}

// kindsFor are the fault kinds of a cluster.
func kindsFor(c *cluster) []string {
	kinds := slices.Clone(faultKinds)
	if c.two != nil {
		kinds = append(kinds, twoServerFaults...)
	}
	return kinds
}

// injector injects faults at random (seeded) until stopped: a new fault
// every gap, on a target not already under a fault. The first faults go
// through every kind in a shuffled order, round after round, so that even a
// short run has each kind.
type injector struct {
	kinds   []string // kindsFor the cluster
	rnd     *rand.Rand
	cluster *cluster
	workers *workerSet
	leases  []string
	lease   time.Duration // the lease duration
	// commitLag is the operator's --max-commit-lag, commitDelay the
	// commit-delay fault's setting.
	commitLag   time.Duration
	commitDelay string
	minGap      time.Duration
	maxGap      time.Duration
	log         *os.File
	start       time.Time
	errs        chan error

	mu      sync.Mutex
	busy    map[string]bool
	counts  map[string]int
	healing map[string]int
	total   int
	running sync.WaitGroup
	round   []string
}

func (in *injector) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(in.rnd.Float64()*float64(hi-lo))
}

func (in *injector) logf(format string, args ...any) {
	fmt.Fprintf(in.log, "%9.3fs "+format+"\n", append([]any{time.Since(in.start).Seconds()}, args...)...)
}

// fail reports an error of the harness (not of the system under test).
func (in *injector) fail(err error) {
	in.logf("error: %v", err)
	select {
	case in.errs <- err:
	default:
	}
}

// deadWorker reports a worker process that exited on its own (not killed by
// a fault, which restarts it).
func (in *injector) deadWorker() error {
	for _, w := range in.workers.workers {
		in.mu.Lock()
		busy := in.busy[w.name]
		in.mu.Unlock()
		if p := w.proc(); !busy && p != nil && p.Exited() {
			tail, _ := os.ReadFile(w.errPath)
			if len(tail) > 2000 {
				tail = tail[len(tail)-2000:]
			}
			return fmt.Errorf("worker %s exited on its own (%v); its log ends with:\n%s", w.name, p.Err(), tail)
		}
	}
	return nil
}

// claim marks target busy, or reports that it already is.
func (in *injector) claim(target string) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.busy[target] {
		return false
	}
	in.busy[target] = true
	return true
}

func (in *injector) release(target string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	delete(in.busy, target)
}

// Total is the number of faults injected so far.
func (in *injector) Total() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.total
}

// Counts returns faults by kind (and heals of partitions by mode).
func (in *injector) Counts() map[string]int {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := map[string]int{}
	for k, v := range in.counts {
		out[k] = v
	}
	for k, v := range in.healing {
		out["heal-"+k] = v
	}
	return out
}

func (in *injector) nextKind() string {
	if len(in.round) == 0 {
		in.round = slices.Clone(in.kinds)
		in.rnd.Shuffle(len(in.round), func(i, j int) { in.round[i], in.round[j] = in.round[j], in.round[i] })
	}
	k := in.round[0]
	in.round = in.round[1:]
	return k
}

// run injects faults until ctx ends, then waits for the faults under way to
// end (every fault heals itself).
func (in *injector) run(ctx context.Context) {
	defer in.running.Wait()
	for {
		t := time.NewTimer(in.between(in.minGap, in.maxGap))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		kind := in.nextKind()
		for try := 0; try < 10; try++ {
			if f := in.plan(kind); f != nil {
				in.mu.Lock()
				in.counts[kind]++
				in.total++
				in.mu.Unlock()
				in.running.Add(1)
				go func() {
					defer in.running.Done()
					f()
				}()
				break
			}
			kind = in.kinds[in.rnd.Intn(len(in.kinds))] // its target was busy: something else
		}
	}
}

// plan draws a fault's target and parameters now (from the seeded source) and
// returns the fault, or nil when no target is free.
func (in *injector) plan(kind string) func() {
	w := in.pickWorker()
	switch kind {
	case faultPauseShort, faultPauseLong:
		d := in.between(in.lease/10, in.lease*4/5)
		if kind == faultPauseLong {
			d = in.between(in.lease*3/2, in.lease*3)
		}
		if !in.claim(w.name) {
			return nil
		}
		return func() {
			defer in.release(w.name)
			in.logf("%s: SIGSTOP %s for %v", kind, w.name, d.Round(time.Millisecond))
			if err := w.signal(syscall.SIGSTOP); err != nil {
				in.logf("%s: %v", kind, err)
			}
			time.Sleep(d)
			if err := w.signal(syscall.SIGCONT); err != nil {
				in.logf("%s: %v", kind, err)
			}
		}
	case faultWorkerKill:
		d := in.between(200*time.Millisecond, 2*time.Second)
		if !in.claim(w.name) {
			return nil
		}
		return func() {
			defer in.release(w.name)
			in.logf("%s: kill -9 %s, restart after %v", kind, w.name, d.Round(time.Millisecond))
			if p := w.proc(); p != nil {
				p.Kill()
			}
			time.Sleep(d)
			if err := in.workers.start(w); err != nil {
				in.fail(fmt.Errorf("restarting %s: %w", w.name, err))
			}
		}
	case faultOperatorKill:
		d := in.between(200*time.Millisecond, 2500*time.Millisecond)
		if !in.claim("operator") {
			return nil
		}
		return func() {
			defer in.release("operator")
			in.logf("%s: kill -9 the operator, restart after %v", kind, d.Round(time.Millisecond))
			in.cluster.killOperator()
			time.Sleep(d)
			if err := in.cluster.startOperator(context.Background()); err != nil {
				in.fail(fmt.Errorf("restarting the operator: %w", err))
			}
		}
	case faultLeaseRecreate:
		lease := in.leases[in.rnd.Intn(len(in.leases))]
		if !in.claim("lease/" + lease) {
			return nil
		}
		return func() {
			defer in.release("lease/" + lease)
			in.logf("%s: delete lease %s and create it again", kind, lease)
			start := time.Now()
			if err := in.cluster.recreateLease(context.Background(), lease); err != nil {
				in.fail(err)
				return
			}
			in.logf("%s: lease %s back after %v", kind, lease, time.Since(start).Round(time.Millisecond))
		}
	case faultNetDelay:
		delay := in.between(20*time.Millisecond, 400*time.Millisecond)
		d := in.between(time.Second, 4*time.Second)
		if !in.claim("net/" + w.name) {
			return nil
		}
		return func() {
			defer in.release("net/" + w.name)
			in.logf("%s: delay %s's traffic by %v for %v", kind, w.name, delay.Round(time.Millisecond), d.Round(time.Millisecond))
			w.proxy.SetDelay(delay)
			time.Sleep(d)
			w.proxy.Heal(false)
		}
	case faultOperatorDelay:
		// Up to past half the commit lag (1 s): the webhook then refuses
		// (503, retry) rather than admit on a lease read that old.
		delay := in.between(50*time.Millisecond, 800*time.Millisecond)
		d := in.between(time.Second, 4*time.Second)
		if !in.claim("net/operator") {
			return nil
		}
		return func() {
			defer in.release("net/operator")
			in.logf("%s: delay the operator's traffic by %v for %v", kind, delay.Round(time.Millisecond), d.Round(time.Millisecond))
			in.cluster.operatorProxy.SetDelay(delay)
			time.Sleep(d)
			in.cluster.operatorProxy.Heal(false)
		}
	case faultRevoke:
		lease := in.leases[in.rnd.Intn(len(in.leases))]
		handover := in.rnd.Intn(2) == 0
		if !in.claim("lease/" + lease) {
			return nil
		}
		return func() {
			defer in.release("lease/" + lease)
			holder, err := in.cluster.revoke(context.Background(), lease, handover)
			switch {
			case err != nil:
				in.logf("%s: %s: %v", kind, lease, err)
			case holder == "":
				in.logf("%s: %s has no holder to revoke", kind, lease)
			default:
				in.logf("%s: revoked %s's tenure of %s (hand-over to the next waiting: %v)", kind, holder, lease, handover)
			}
		}
	case faultAPIServerLag:
		// What etcd sends the second server arrives D late, in order; its
		// requests to etcd are not delayed, so what it admits commits at
		// once (the commit lag C is not what this fault breaks). Mostly on
		// the ConfigMap storage's connection only: that resource's watch
		// cache, and so the policy's parameters, fall behind while the
		// server serves everything else at full speed; else on every
		// connection (each of its reads waits D too).
		delay := in.between(500*time.Millisecond, 3*time.Second)
		d := in.between(3*time.Second, 8*time.Second)
		configMapsOnly := in.rnd.Intn(3) != 0
		if !in.claim("apiserver/etcd") {
			return nil
		}
		return func() {
			defer in.release("apiserver/etcd")
			scope := "every connection"
			if configMapsOnly {
				scope = "the ConfigMap storage's connection"
			}
			marked := in.cluster.etcdProxy.Marked()
			if configMapsOnly && marked == 0 {
				in.fail(fmt.Errorf("no connection of the second kube-apiserver to etcd has carried %s: the lag would delay nothing", configMapsKey))
				return
			}
			in.logf("%s: delay what etcd sends the second kube-apiserver by %v for %v, on %s (%d of its connections marked so far)",
				kind, delay.Round(time.Millisecond), d.Round(time.Millisecond), scope, marked)
			in.cluster.etcdProxy.SetDownDelay(delay, configMapsOnly)
			time.Sleep(d)
			in.cluster.etcdProxy.SetDownDelay(0, false) // not Heal: a commit delay may be under way
		}
	case faultCommitDelay:
		// What a kube-apiserver has admitted commits late: a slow etcd, a
		// slow network to it, or an API server starved after admission. It
		// matters where a tenure ends, so tenures end inside the window: an
		// operator revokes (or hands over) every lease not under another
		// fault, one after another, each while its holder's writes are in
		// flight (the next grant waits the commit lag); expiries and
		// releases meanwhile count too.
		lo, hi := in.commitDelayRange()
		delay := in.between(lo, hi)
		type revocation struct {
			lease    string
			after    time.Duration
			handover bool
		}
		var revs []revocation
		for _, i := range in.rnd.Perm(len(in.leases)) {
			revs = append(revs, revocation{lease: in.leases[i], after: in.between(300*time.Millisecond, 900*time.Millisecond),
				handover: in.rnd.Intn(2) == 0})
		}
		rest := in.between(time.Second, 2*time.Second)
		if !in.claim("apiserver/commit") {
			return nil
		}
		claimed := revs[:0]
		for _, r := range revs {
			if in.claim("lease/" + r.lease) {
				claimed = append(claimed, r)
			}
		}
		revs = claimed
		return func() {
			defer in.release("apiserver/commit")
			for _, r := range revs {
				defer in.release("lease/" + r.lease)
			}
			delayed := in.cluster.delayedWrites
			before, start := delayed(), time.Now()
			in.logf("%s: delay the kube-apiservers' Widget writes to etcd by %v (%s), revoking the holders of %d leases meanwhile",
				kind, delay.Round(time.Millisecond), describeCommitDelay(in.commitDelay), len(revs))
			in.cluster.setWriteDelay(delay)
			// The revocations begin once writes are delayed: not while nobody
			// writes (after an operator-kill, until the new leader has waited
			// out the killed one's Lease, nothing is granted).
			for delayed() == before && time.Since(start) < 30*time.Second {
				time.Sleep(20 * time.Millisecond)
			}
			if waited := time.Since(start); waited > time.Second {
				in.logf("%s: the first Widget write was delayed after %v", kind, waited.Round(time.Millisecond))
			}
			for _, r := range revs {
				time.Sleep(r.after)
				holder, err := in.cluster.revoke(context.Background(), r.lease, r.handover)
				switch {
				case err != nil:
					in.logf("%s: revoking %s: %v", kind, r.lease, err)
				case holder == "":
					in.logf("%s: %s has no holder to revoke", kind, r.lease)
				default:
					in.logf("%s: revoked %s's tenure of %s (hand-over to the next waiting: %v)", kind, holder, r.lease, r.handover)
				}
			}
			time.Sleep(rest)
			in.cluster.setWriteDelay(0)
			in.logf("%s: lifted after %v, %d Widget writes delayed", kind, time.Since(start).Round(time.Millisecond), delayed()-before)
		}
	case faultAPIServerStop:
		// Shorter than its master lease (15 s): the server stays listed. It
		// may fall during a lag (another target: in a short run every kind
		// has its turn).
		d := in.between(500*time.Millisecond, 4*time.Second)
		if !in.claim("apiserver/second") {
			return nil
		}
		return func() {
			defer in.release("apiserver/second")
			in.logf("%s: SIGSTOP the second kube-apiserver for %v", kind, d.Round(time.Millisecond))
			if err := in.cluster.two.Second.Pause(); err != nil {
				in.fail(err)
			}
			time.Sleep(d)
			if err := in.cluster.two.Second.Resume(); err != nil {
				in.fail(err)
			}
		}
	case faultNetPartition, faultLoseResponses:
		d := in.between(in.lease/4, in.lease*2)
		mode := faultHealReset
		if in.rnd.Intn(2) == 0 {
			mode = faultHealLate
		}
		if !in.claim("net/" + w.name) {
			return nil
		}
		return func() {
			defer in.release("net/" + w.name)
			in.logf("%s: hold %s's traffic for %v, then heal (%s)", kind, w.name, d.Round(time.Millisecond), mode)
			w.proxy.Hold(kind == faultNetPartition, true)
			time.Sleep(d)
			w.proxy.Heal(mode == faultHealReset)
			in.mu.Lock()
			in.healing[mode]++
			in.mu.Unlock()
		}
	}
	panic("unknown fault kind " + kind)
}

// commitDelayRange is the commit-delay fault's range of delays. The commit
// lag the run's leases are fenced for is their commit-lag budget B: the
// cut-off margin min(S + C, L/10) less the clock offset S (C for long leases,
// 100 ms for the 2 s leases here), of which the webhook keeps half for its
// lease read and decision (timing.AnswerBy) and leaves half to what follows
// its answer, where this fault acts. Within the lag it delays by a quarter to
// a half of B; within-lag by a quarter to a half of C; beyond it, by 1.5 to
// 3 C, past the wait after a revocation too.
func (in *injector) commitDelayRange() (lo, hi time.Duration) {
	switch in.commitDelay {
	case commitDelayBeyond:
		return in.commitLag * 3 / 2, in.commitLag * 3
	case commitDelayWithinLag:
		return in.commitLag / 4, in.commitLag / 2
	}
	budget := commitBudget(in.lease, timing.DefaultSkew, in.commitLag)
	return budget / 4, budget / 2
}

// describeCommitDelay says what a commit-delay setting delays by.
func describeCommitDelay(setting string) string {
	switch setting {
	case commitDelayWithinLag:
		return "within --max-commit-lag"
	case commitDelayBeyond:
		return "beyond --max-commit-lag"
	}
	return "within the leases' commit-lag budget"
}

// commitBudget is timing.CommitBudget, computed here so that a scratch copy
// with the commit-lag terms removed (docs/reliability.md, "Commit order")
// still delays commits by what the design allows
// (TestCommitBudgetIsTheDesigns).
func commitBudget(lease, skew, commitLag time.Duration) time.Duration {
	return max(min(skew+commitLag, lease/10)-skew, 0)
}

// TestCommitBudgetIsTheDesigns: commitBudget is timing.CommitBudget.
func TestCommitBudgetIsTheDesigns(t *testing.T) {
	for _, lease := range []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second, 15 * time.Second, time.Minute} {
		for _, c := range []time.Duration{100 * time.Millisecond, time.Second, 3 * time.Second} {
			if got, want := commitBudget(lease, timing.DefaultSkew, c), timing.CommitBudget(lease, timing.DefaultSkew, c); got != want {
				t.Errorf("commitBudget(%v, %v, %v) = %v, timing.CommitBudget says %v", lease, timing.DefaultSkew, c, got, want)
			}
		}
	}
}

// pickWorker picks a worker: mostly one that holds a lease right now (a
// fault matters most to a holder in the middle of its writes), else any.
func (in *injector) pickWorker() *worker {
	any := in.workers.workers[in.rnd.Intn(len(in.workers.workers))]
	if in.rnd.Float64() >= 0.75 {
		return any
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var leases coordv1alpha1.FencedLeaseList
	if err := in.cluster.admin.List(ctx, &leases, client.InNamespace(historyNamespace)); err != nil {
		return any
	}
	var holders []*worker
	for _, l := range leases.Items {
		for _, w := range in.workers.workers {
			if w.name == l.Status.HolderIdentity {
				holders = append(holders, w)
			}
		}
	}
	sort.Slice(holders, func(i, j int) bool { return holders[i].name < holders[j].name })
	if len(holders) == 0 {
		return any
	}
	return holders[in.rnd.Intn(len(holders))]
}

// summary formats counts as "kind=n" in a stable order.
func summary(counts map[string]int) string {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s := ""
	for _, k := range keys {
		if s != "" {
			s += " "
		}
		s += fmt.Sprintf("%s=%d", k, counts[k])
	}
	return s
}
