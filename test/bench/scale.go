package main

// The scale benchmark (-only=scale, `make bench-scale`): N FencedLeases, H of
// them held and renewing through pkg/fence in holder processes, with the
// operator's webhooks installed and the controller in this process; then, in
// alternating phases, H client-go Leases at the same renewal interval and at
// client-go's defaults. See docs/benchmarks.md.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	sigsyaml "sigs.k8s.io/yaml"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/fencedlease"
	"github.com/kubefence/kubefence/controllers/operator"
)

// scaleHolderUser is the holder processes' identity: a service account, so
// that it is neither the trusted controller nor exempt from flow control.
const scaleHolderUser = "system:serviceaccount:bench:holder"

// scaleLoadUser is the load generator's identities (%d: one per load
// process): service accounts, which upstream's FlowSchemas put in the
// workload-low priority level, each a flow of its own there, as the many
// workloads of a busy cluster are.
const scaleLoadUser = "system:serviceaccount:load:writer-%d"

type scaleOptions struct {
	leases     int
	mass       int
	samples    int
	extraHeld  int
	perProc    int
	steady     time.Duration
	baseline   time.Duration
	lease      int
	epochNames int
	settle     time.Duration
	workers    int    // the controller's concurrent reconciles
	profile    string // file for a CPU profile of kube-apiserver
	// The load phases: how long each loaded window lasts (0: none), the
	// writers of the load process, and the API server's concurrency limits.
	load                time.Duration
	loadWorkers         int
	loadUsers           int
	maxInflight         int
	maxMutatingInflight int
	// The fail-over variants (scale_failover.go): their spec ("": the
	// scale run) and the identities of the mass group's waiters.
	failoverVariants string
	failoverUsers    int
}

// configureAPIServer sets the API server's concurrency limits: with API
// Priority and Fairness (on by default) their sum is the seats the priority
// levels share. Set low enough that the load generator fills its priority
// level's seats on 2 CPUs, so that what APF does is visible.
func (o scaleOptions) configureAPIServer(env *envtest.Environment) {
	args := env.ControlPlane.GetAPIServer().Configure()
	if o.maxInflight > 0 {
		args.Set("max-requests-inflight", strconv.Itoa(o.maxInflight))
	}
	if o.maxMutatingInflight > 0 {
		args.Set("max-mutating-requests-inflight", strconv.Itoa(o.maxMutatingInflight))
	}
}

var scaleOpts scaleOptions

func init() {
	if os.Getenv(scaleChildEnv) != "" {
		return
	}
	flag.IntVar(&scaleOpts.leases, "scale-leases", 10_000, "scale: FencedLeases created (N)")
	flag.IntVar(&scaleOpts.mass, "scale-mass", 500, "scale: leases held by the one process killed for the mass fail-over")
	flag.IntVar(&scaleOpts.samples, "scale-samples", 20, "scale: holders killed one lease each for takeover and expiry lateness")
	flag.IntVar(&scaleOpts.extraHeld, "scale-extra-held", 0, "scale: further held leases (H = mass + samples + extra)")
	flag.IntVar(&scaleOpts.perProc, "scale-per-process", 500, "scale: electors per holder process")
	flag.DurationVar(&scaleOpts.steady, "scale-steady", 5*time.Minute, "scale: length of each steady-state window")
	flag.DurationVar(&scaleOpts.baseline, "scale-baseline-steady", 0, "scale: length of the client-go windows (default: -scale-steady)")
	flag.IntVar(&scaleOpts.lease, "scale-lease", 15, "scale: lease duration in seconds (L)")
	flag.IntVar(&scaleOpts.epochNames, "scale-epoch-names", 100_000, "scale: lease names in the epoch store at the end (deleted leases plus names recorded directly)")
	flag.DurationVar(&scaleOpts.settle, "scale-settle", 10*time.Second, "scale: wait after a phase's holders started before its window")
	flag.StringVar(&scaleOpts.profile, "scale-apiserver-profile", "", "scale: write a 30 s CPU profile of kube-apiserver, taken in the kubefence window, to this file (go tool pprof)")
	flag.IntVar(&scaleOpts.workers, "scale-workers", 0, "scale: the controller's concurrent reconciles (0: the operator's default)")
	flag.DurationVar(&scaleOpts.load, "scale-load", time.Minute, "scale: length of each window with the load generator saturating the API server (0: no load phases)")
	flag.IntVar(&scaleOpts.loadWorkers, "scale-load-workers", 64, "scale: concurrent ConfigMap writers of the load generator, over all its users")
	flag.IntVar(&scaleOpts.loadUsers, "scale-load-users", 16, "scale: identities (and processes) of the load generator: APF flows")
	flag.IntVar(&scaleOpts.maxInflight, "scale-max-requests-inflight", 60, "scale: kube-apiserver --max-requests-inflight (0: its default, 400)")
	flag.IntVar(&scaleOpts.maxMutatingInflight, "scale-max-mutating-requests-inflight", 30, "scale: kube-apiserver --max-mutating-requests-inflight (0: its default, 200)")
	flag.StringVar(&scaleOpts.failoverVariants, "scale-failover-variants", "", "scale: instead of the scale run, the mass fail-over (-scale-mass leases, -scale-samples takeovers) once per API Priority and Fairness variant, side by side; "+
		"variants separated by commas, each a +-joined list of: shipped (config/flowcontrol as is), default-seats (kube-apiserver's 400 + 200), seats=M/N, none (no FlowSchemas), by-user (renewals flows by user), "+
		"shares=N, lendable=N, borrowing=N, queues=N, hand-size=N, queue-length=N (the priority level's fields); e.g. shipped,default-seats,shares=40,by-user,none")
	flag.IntVar(&scaleOpts.failoverUsers, "scale-failover-users", 10, "scale, fail-over variants: processes (each its own service account) the mass group's waiters run in")
}

// scaleRun is the state of one scale run.
type scaleRun struct {
	dir            string
	kubeconfig     string
	loadKubeconfig []string
	apiserver      int
	etcd           int
	procs          []*scaleProc
	namespaces     []string
	rep            scaleReport
}

type cpuRSS struct {
	cpu     time.Duration
	peakRSS int64 // bytes, max of samples
}

// window is one steady-state window of a phase.
type window struct {
	name              string
	held              int
	length            time.Duration
	holderWrites      int64
	holderRenewals    int64
	controllerWrites  int
	controllerByCat   writeCounts
	otherFields       map[string]int
	start, end        time.Time
	apf               map[string]apfLevel
	cpu               map[string]cpuRSS // apiserver, etcd, operator, holders
	goroutinesOperatr int
}

type scaleReport struct {
	env                          environment
	n, held                      int
	createTime                   time.Duration
	heapBefore, heapAfter        uint64
	goroutinesBefore, goroutines int
	grant                        []time.Duration
	windows                      []window
	failover
	queueTime                time.Duration
	unloaded                 loadWindow
	loaded                   []loadWindow
	lostUnderLoad            int
	deleted                  int
	deleteTime               time.Duration
	epochObjects             int
	epochNames               int
	epochLargest, epochTotal int
	epochPerNS               map[string]int
	elapsed                  time.Duration
}

func (b *bench) scale(ctx context.Context, env environment) error {
	o := scaleOpts
	b.opts.leaseSeconds = o.lease
	b.lease = time.Duration(o.lease) * time.Second
	held := o.mass + o.samples + o.extraHeld
	if o.leases < held || o.mass < 1 || o.samples < 1 || o.perProc < 1 {
		return fmt.Errorf("-scale-leases (%d) must be at least H = %d, and -scale-mass, -scale-samples, -scale-per-process positive", o.leases, held)
	}
	if o.failoverVariants != "" {
		return b.scaleFailovers(ctx, env)
	}
	started := time.Now()
	s := &scaleRun{rep: scaleReport{env: env, n: o.leases, held: held}}
	cleanup, err := s.start("kubefence-bench-scale")
	if err != nil {
		return err
	}
	defer cleanup()

	fmt.Fprintln(os.Stderr, "bench: scale: installing and serving the webhooks")
	stopOperator, err := b.serveOperator(ctx)
	if err != nil {
		return err
	}
	defer stopOperator()
	if err := b.scaleIdentity(ctx, s); err != nil {
		return err
	}
	// The FlowSchemas and priority level ship with the operator.
	if err := b.flowControl(ctx, true); err != nil {
		return err
	}

	// N FencedLeases: mass group, samples (one namespace each, so that the
	// controller's writes for each are told apart), the rest.
	var all, massKeys, sampleKeys, extraKeys []string
	for i := range o.mass {
		massKeys = append(massKeys, fmt.Sprintf("scale-mass/m-%04d", i))
	}
	for i := range o.samples {
		sampleKeys = append(sampleKeys, fmt.Sprintf("scale-k%03d/sample", i))
	}
	for i := range o.leases - o.mass - o.samples {
		k := fmt.Sprintf("scale/l-%06d", i)
		if i < o.extraHeld {
			extraKeys = append(extraKeys, k)
		}
		all = append(all, k)
	}
	all = append(append(all, massKeys...), sampleKeys...)
	s.rep.heapBefore, s.rep.goroutinesBefore = heapInUse()
	fmt.Fprintf(os.Stderr, "bench: scale: creating %d FencedLeases\n", len(all))
	t0 := time.Now()
	if s.namespaces, err = b.createLeases(ctx, all, 10*time.Minute); err != nil {
		return err
	}
	s.rep.createTime = time.Since(t0)
	s.rep.heapAfter, s.rep.goroutines = heapInUse()

	if err := b.scaleKubefence(ctx, s, massKeys, sampleKeys, extraKeys); err != nil {
		return err
	}
	for _, phase := range []struct {
		ns    string
		retry time.Duration
	}{{"cg-same-interval", b.lease / 3}, {"cg-defaults", 2 * time.Second}} {
		if err := b.scaleClientGo(ctx, s, phase.ns, held, phase.retry); err != nil {
			return err
		}
	}
	if err := b.scaleEpochStore(ctx, s, all); err != nil {
		return err
	}
	s.rep.elapsed = time.Since(started)
	s.rep.print(os.Stdout, b, o)
	return nil
}

// holderRules are the holder processes' permissions: FencedLeases for
// kubefence, Leases for the client-go baseline.
var holderRules = []rbacv1.PolicyRule{
	{APIGroups: []string{coordv1alpha1.GroupVersion.Group}, Resources: []string{"fencedleases"}, Verbs: []string{"get", "list", "watch", "update", "patch"}},
	{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update"}},
}

// scaleIdentity creates the holders' and the load generator's identities,
// their kubeconfigs and their RBAC.
func (b *bench) scaleIdentity(ctx context.Context, s *scaleRun) error {
	var err error
	if s.kubeconfig, _, err = b.serviceAccountUser(ctx, s, scaleHolderUser, "bench-holder", holderRules); err != nil {
		return err
	}
	for i := range max(scaleOpts.loadUsers, 1) {
		kc, _, err := b.serviceAccountUser(ctx, s, fmt.Sprintf(scaleLoadUser, i), fmt.Sprintf("bench-load-%d", i), []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "create", "update"}},
		})
		if err != nil {
			return err
		}
		s.loadKubeconfig = append(s.loadKubeconfig, kc)
	}
	return nil
}

// serviceAccountUser creates a user in the service accounts' group (neither
// trusted nor exempt from flow control), bound to rules, and writes its
// kubeconfig. It returns the kubeconfig's file and the user's REST config
// (the admin's client settings, this user's certificate).
func (b *bench) serviceAccountUser(ctx context.Context, s *scaleRun, user, name string, rules []rbacv1.PolicyRule) (string, *rest.Config, error) {
	u, err := b.testEnv.AddUser(envtest.User{Name: user, Groups: []string{"system:serviceaccounts", "system:authenticated"}}, rest.CopyConfig(b.cfg))
	if err != nil {
		return "", nil, err
	}
	kc, err := u.KubeConfig()
	if err != nil {
		return "", nil, err
	}
	file := filepath.Join(s.dir, name+".kubeconfig")
	if err := os.WriteFile(file, kc, 0o600); err != nil {
		return "", nil, err
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
	if err := b.admin.Create(ctx, role); err != nil {
		return "", nil, err
	}
	return file, u.Config(), b.admin.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: user}},
	})
}

// startHolders starts processes of at most perProc electors over keys.
func (b *bench) startHolders(ctx context.Context, s *scaleRun, name, kind string, keys []string, extra ...string) ([]*scaleProc, error) {
	var out []*scaleProc
	for i := 0; i < len(keys); i += scaleOpts.perProc {
		p, err := b.startProc(ctx, s, fmt.Sprintf("%s-%d", name, i/scaleOpts.perProc), kind, keys[i:min(i+scaleOpts.perProc, len(keys))], extra...)
		if err != nil {
			return out, err
		}
		s.procs = append(s.procs, p)
		out = append(out, p)
	}
	return out, nil
}

func leadCount(ps []*scaleProc) int {
	n := 0
	for _, p := range ps {
		n += len(p.leading())
	}
	return n
}

// heldSet is one set of held FencedLeases with their waiters: the mass group
// (one namespace), the samples (one namespace each) and the extra held
// leases, and the processes scaleHold started for them. Process names start
// with prefix, so that sets of one run never share a holder identity.
type heldSet struct {
	prefix                          string
	massNS                          string
	massKeys, sampleKeys, extraKeys []string
	massH, sampleH, extraH          []*scaleProc
	massW, sampleW                  []*scaleProc
}

func (h *heldSet) holders() []*scaleProc {
	return append(append(append([]*scaleProc(nil), h.massH...), h.sampleH...), h.extraH...)
}

func (h *heldSet) waiters() []*scaleProc {
	return append(append([]*scaleProc(nil), h.massW...), h.sampleW...)
}

// failover is what killing holders measured: the samples' takeovers and the
// mass fail-over in steps.
type failover struct {
	takeoverBeyond          []time.Duration
	takeoverFromKill        []time.Duration
	lateness                []time.Duration
	massFailover            []time.Duration
	massDue, massLateness   []time.Duration
	massGrantWrite, massAck []time.Duration
	massCtrl                writeCounts
	massWaiterWrites        int64
	massWaiterFailed        int64
	massDuration            time.Duration
	massAPF                 map[string]apfLevel
	massMissing             int
	// From the kill to all granted: kube-apiserver + etcd CPU, and every
	// write sent (the controller's and all holder processes').
	massAPICPU time.Duration
	massWrites int64
	// In the same span: the operator's CPU (the bench process), the live
	// holder processes', and the machine's busy CPU (every process, from
	// /proc/stat), to tell how much of the machine the fail-over had.
	massOperatorCPU, massHolderCPU, massMachineCPU time.Duration
}

// scaleHold starts the holders of h (mass group in processes of at most
// -scale-per-process electors, one process per sample), waits until every
// one leads, then starts the waiters (massWaiters: the mass group's waiter
// processes; nil: as the holders) and waits until the controller lists every
// waiter. It records the grant latencies in grant and returns how long the
// waiters took to be listed.
func (b *bench) scaleHold(ctx context.Context, s *scaleRun, h *heldSet, grant *[]time.Duration, massWaiters func() ([]*scaleProc, error)) (time.Duration, error) {
	held := len(h.massKeys) + len(h.sampleKeys) + len(h.extraKeys)
	fmt.Fprintf(os.Stderr, "bench: scale: kubefence: %d holders acquiring\n", held)
	var err error
	if h.massH, err = b.startHolders(ctx, s, h.prefix+"kf-mass-h", "kf", h.massKeys); err != nil {
		return 0, err
	}
	// One process per sample (a killed holder process takes only its lease).
	for i, k := range h.sampleKeys {
		p, err := b.startProc(ctx, s, fmt.Sprintf("%skf-sample-h-%d", h.prefix, i), "kf", []string{k})
		if err != nil {
			return 0, err
		}
		s.procs = append(s.procs, p)
		h.sampleH = append(h.sampleH, p)
	}
	if h.extraH, err = b.startHolders(ctx, s, h.prefix+"kf-extra-h", "kf", h.extraKeys); err != nil {
		return 0, err
	}
	holders := h.holders()
	if err := waitFor(ctx, 5*time.Minute, time.Second, "every kubefence holder to lead", func(context.Context) (bool, error) {
		return leadCount(holders) == held, nil
	}); err != nil {
		return 0, err
	}
	for _, p := range holders {
		for _, evs := range p.leading() {
			*grant = append(*grant, evs[0].leading.Sub(evs[0].started))
		}
	}
	fmt.Fprintln(os.Stderr, "bench: scale: kubefence: waiters queueing")
	if massWaiters == nil {
		massWaiters = func() ([]*scaleProc, error) { return b.startHolders(ctx, s, h.prefix+"kf-mass-w", "kf", h.massKeys) }
	}
	if h.massW, err = massWaiters(); err != nil {
		return 0, err
	}
	if h.sampleW, err = b.startHolders(ctx, s, h.prefix+"kf-sample-w", "kf", h.sampleKeys); err != nil {
		return 0, err
	}
	// The window measures renewals: it starts once the controller has listed
	// every waiter in status (a join costs the waiter's write and the
	// controller's queue write, once, not per renewal).
	queued := append(append([]string(nil), h.massKeys...), h.sampleKeys...)
	t0 := time.Now()
	if err := waitFor(ctx, 5*time.Minute, time.Second, "the controller to list every waiter", func(ctx context.Context) (bool, error) {
		return b.allQueued(ctx, queued)
	}); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

func (b *bench) scaleKubefence(ctx context.Context, s *scaleRun, massKeys, sampleKeys, extraKeys []string) error {
	h := &heldSet{massNS: "scale-mass", massKeys: massKeys, sampleKeys: sampleKeys, extraKeys: extraKeys}
	held := len(massKeys) + len(sampleKeys) + len(extraKeys)
	var err error
	if s.rep.queueTime, err = b.scaleHold(ctx, s, h, &s.rep.grant, nil); err != nil {
		return err
	}
	if err := sleep(ctx, scaleOpts.settle); err != nil {
		return err
	}
	profiled := make(chan error, 1)
	if scaleOpts.profile != "" {
		go func() { profiled <- b.apiserverProfile(ctx, scaleOpts.profile, min(30*time.Second, scaleOpts.steady)) }()
	} else {
		profiled <- nil
	}
	holders := h.holders()
	w, err := b.measure(ctx, s, "kubefence (pkg/fence, FencedLease, webhooks on)", scaleOpts.steady, held, holders, h.waiters())
	if err != nil {
		return err
	}
	if err := <-profiled; err != nil {
		fmt.Fprintln(os.Stderr, "bench: scale: profiling kube-apiserver failed (the run goes on):", err)
	}
	s.rep.windows = append(s.rep.windows, w)
	s.rep.unloaded = loadWindow{name: "unloaded (the steady window above)", length: w.length, renewals: w.holderRenewals,
		apiCPU: w.cpu["kube-apiserver"].cpu + w.cpu["etcd"].cpu, apf: w.apf}
	for _, p := range holders {
		s.rep.unloaded.lat = append(s.rep.unloaded.lat, p.writeLatencies(w.start, w.end)...)
	}
	if scaleOpts.load > 0 {
		if err := b.scaleLoad(ctx, s, holders); err != nil {
			return err
		}
		s.rep.lostUnderLoad = leadCount(h.massW) + leadCount(h.sampleW)
	}
	if err := b.scaleFailover(ctx, s, h, &s.rep.failover); err != nil {
		return err
	}
	for _, p := range s.procs {
		p.stop()
	}
	s.procs = nil
	// Let the controller finish the releases before the next phase.
	return sleep(ctx, b.lease)
}

// scaleFailover kills the sample holders (each waiter takes over), then the
// mass group's holder processes, and measures both into f.
func (b *bench) scaleFailover(ctx context.Context, s *scaleRun, h *heldSet, f *failover) error {
	// Takeovers: kill each sample holder process; its waiter takes over.
	fmt.Fprintf(os.Stderr, "bench: scale: kubefence: killing %d sample holders\n", len(h.sampleH))
	killed := map[string]time.Time{}
	for i, p := range h.sampleH {
		killed[h.sampleKeys[i]] = time.Now()
		p.kill()
	}
	// The killed holders' last renewals, as they stamped them (a renewal's
	// renewTime is when its holder sent it).
	sampleStamps, err := b.lastStamps(ctx, h.sampleKeys, func(i int) string { return fmt.Sprintf("%skf-sample-h-%d-0", h.prefix, i) })
	if err != nil {
		return err
	}
	_ = waitFor(ctx, b.lease+30*time.Second, 200*time.Millisecond, "the sample waiters to lead", func(context.Context) (bool, error) {
		return leadCount(h.sampleW) == len(h.sampleKeys), nil
	})
	allowance := fencedlease.DefaultTiming().Allowance(b.lease)
	leads := map[string][]leadEvent{}
	for _, p := range h.sampleW {
		for k, v := range p.leading() {
			leads[k] = v
		}
	}
	for i, k := range h.sampleKeys {
		ev, ok := leads[k]
		if !ok {
			continue
		}
		ns, _, _ := strings.Cut(k, "/")
		oldID := fmt.Sprintf("%skf-sample-h-%d-0", h.prefix, i)
		lastRenew := sampleStamps[k]
		var expirySent time.Time
		for _, cw := range b.ctrlRT.trace(ns, killed[k]) {
			if cw.ok && cw.category == catStatusGrant && cw.holder != "" && cw.holder != oldID {
				expirySent = cw.sent
				break
			}
		}
		f.takeoverFromKill = append(f.takeoverFromKill, ev[0].leading.Sub(killed[k])-b.lease)
		if !lastRenew.IsZero() {
			f.takeoverBeyond = append(f.takeoverBeyond, ev[0].leading.Sub(lastRenew)-b.lease)
			if !expirySent.IsZero() {
				f.lateness = append(f.lateness, expirySent.Sub(lastRenew.Add(b.lease+allowance)))
			}
		}
	}

	// Mass fail-over: kill the process holding the mass group.
	fmt.Fprintf(os.Stderr, "bench: scale: kubefence: mass fail-over of %d leases\n", len(h.massKeys))
	writes := func() int64 {
		n := int64(b.ctrlTotal().total())
		for _, p := range s.procs {
			n += p.snapshot()[0]
		}
		return n
	}
	// The holder processes that live through the fail-over (the waiters):
	// a killed process's CPU can no longer be read.
	var live []int
	for _, p := range h.waiters() {
		live = append(live, p.pid())
	}
	cpu0, writes0 := cpuOf([]int{s.apiserver, s.etcd}), writes()
	op0, hold0, machine0 := cpuOf([]int{os.Getpid()}), cpuOf(live), machineBusy()
	kill := time.Now()
	massCtrl0 := b.ctrlRT.snapshot(h.massNS)
	apf0, apfErr := b.apfMetrics(ctx)
	massW0 := map[*scaleProc][4]int64{}
	for _, p := range h.massW {
		massW0[p] = p.snapshot()
	}
	for _, p := range h.massH {
		p.kill()
	}
	massStamps, err := b.lastStamps(ctx, h.massKeys, func(i int) string {
		return fmt.Sprintf("%skf-mass-h-%d-%d", h.prefix, i/scaleOpts.perProc, i%scaleOpts.perProc)
	})
	if err != nil {
		return err
	}
	_ = waitFor(ctx, b.lease+60*time.Second, 200*time.Millisecond, "the mass group's waiters to lead", func(context.Context) (bool, error) {
		return leadCount(h.massW) == len(h.massKeys), nil
	})
	f.massDuration = time.Since(kill)
	// Each lease's fail-over in steps: its expiry falls due (last stamped
	// renewal + L + allowance), the controller sends the grant, the grant
	// returns, the new holder leads (after its acknowledging renewal).
	grants := map[string]ctrlWrite{}
	for _, cw := range b.ctrlRT.trace(h.massNS, kill) {
		if _, seen := grants[cw.name]; !seen && cw.ok && cw.category == catStatusGrant && cw.holder != "" {
			grants[cw.name] = cw
		}
	}
	for _, p := range h.massW {
		for k, evs := range p.leading() {
			f.massFailover = append(f.massFailover, evs[0].leading.Sub(kill))
			_, name, _ := strings.Cut(k, "/")
			g, ok := grants[name]
			due := massStamps[k].Add(b.lease + allowance)
			if !ok || massStamps[k].IsZero() {
				continue
			}
			f.massDue = append(f.massDue, due.Sub(kill))
			f.massLateness = append(f.massLateness, g.sent.Sub(due))
			f.massGrantWrite = append(f.massGrantWrite, g.done.Sub(g.sent))
			f.massAck = append(f.massAck, evs[0].leading.Sub(g.done))
		}
	}
	f.massMissing = len(h.massKeys) - len(f.massFailover)
	// Holder processes report their counts every 500 ms.
	if err := sleep(ctx, time.Second); err != nil {
		return err
	}
	// CPU and writes over the same span: the kill to a second after the
	// last grant (that second's renewals included in both).
	f.massAPICPU = cpuOf([]int{s.apiserver, s.etcd}) - cpu0
	f.massWrites = writes() - writes0
	f.massOperatorCPU, f.massHolderCPU, f.massMachineCPU = cpuOf([]int{os.Getpid()})-op0, cpuOf(live)-hold0, machineBusy()-machine0
	f.massCtrl = b.ctrlRT.snapshot(h.massNS).sub(massCtrl0)
	if apf1, err := b.apfMetrics(ctx); err == nil && apfErr == nil {
		f.massAPF = apfSub(apf1, apf0)
	}
	for _, p := range h.massW {
		c := p.snapshot()
		f.massWaiterWrites += c[0] - massW0[p][0]
		f.massWaiterFailed += c[2] - massW0[p][2]
	}
	return nil
}

func (b *bench) scaleClientGo(ctx context.Context, s *scaleRun, ns string, held int, retry time.Duration) error {
	if err := b.createNamespace(ctx, ns); err != nil {
		return err
	}
	keys := make([]string, held)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s/lease-%05d", ns, i)
	}
	fmt.Fprintf(os.Stderr, "bench: scale: client-go, RetryPeriod %v: %d holders acquiring\n", retry, held)
	ps, err := b.startHolders(ctx, s, ns, "cg", keys, "-retry", retry.String(), "-renew-deadline", (b.lease * 2 / 3).String())
	if err != nil {
		return err
	}
	if err := waitFor(ctx, 5*time.Minute, time.Second, "every client-go holder to lead", func(context.Context) (bool, error) {
		return leadCount(ps) == held, nil
	}); err != nil {
		return err
	}
	if err := sleep(ctx, scaleOpts.settle); err != nil {
		return err
	}
	what := fmt.Sprintf("client-go Leases, RetryPeriod %v", retry)
	if ns == "cg-defaults" {
		what += " (client-go defaults)"
	} else {
		what += " (kubefence's renewal interval)"
	}
	length := scaleOpts.baseline
	if length == 0 {
		length = scaleOpts.steady
	}
	w, err := b.measure(ctx, s, what, length, held, ps, nil)
	if err != nil {
		return err
	}
	s.rep.windows = append(s.rep.windows, w)
	for _, p := range s.procs {
		p.stop()
	}
	s.procs = nil
	return sleep(ctx, 5*time.Second)
}

// measure runs one steady-state window: writes by writer, CPU and peak RSS.
func (b *bench) measure(ctx context.Context, s *scaleRun, name string, length time.Duration, held int, holders, others []*scaleProc) (window, error) {
	w := window{name: name, held: held, length: length, cpu: map[string]cpuRSS{}, start: time.Now()}
	fmt.Fprintf(os.Stderr, "bench: scale: steady state %v: %s\n", length, name)
	procs := append(append([]*scaleProc(nil), holders...), others...)
	pids := map[string][]int{"kube-apiserver": {s.apiserver}, "etcd": {s.etcd}, "operator (bench process)": {os.Getpid()}}
	for _, p := range procs {
		pids["holder processes"] = append(pids["holder processes"], p.pid())
	}
	cpu0 := map[string]time.Duration{}
	for k, ps := range pids {
		cpu0[k] = cpuOf(ps)
	}
	hw0 := map[*scaleProc][4]int64{}
	for _, p := range procs {
		hw0[p] = p.snapshot()
	}
	ctrl0 := b.ctrlTotal()
	fields0 := b.ctrlRT.otherFieldCounts()
	apf0, apfErr := b.apfMetrics(ctx)
	peak := map[string]int64{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			for k, ps := range pids {
				peak[k] = max(peak[k], rssOf(ps))
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	})
	err := sleep(ctx, length)
	w.end = time.Now()
	close(stop)
	wg.Wait()
	if err != nil {
		return w, err
	}
	for k, ps := range pids {
		w.cpu[k] = cpuRSS{cpu: cpuOf(ps) - cpu0[k], peakRSS: peak[k]}
	}
	for _, p := range procs {
		c := p.snapshot()
		w.holderWrites += c[0] - hw0[p][0]
	}
	for _, p := range holders {
		c := p.snapshot()
		w.holderRenewals += c[1] - hw0[p][1]
	}
	w.controllerByCat = b.ctrlTotal().sub(ctrl0)
	if apf1, err := b.apfMetrics(ctx); err == nil && apfErr == nil {
		w.apf = apfSub(apf1, apf0)
	}
	w.otherFields = b.ctrlRT.otherFieldCounts()
	for k, v := range fields0 {
		if w.otherFields[k] -= v; w.otherFields[k] == 0 {
			delete(w.otherFields, k)
		}
	}
	w.controllerWrites = w.controllerByCat.total()
	_, w.goroutinesOperatr = heapInUse()
	return w, nil
}

// loadWindow is the holders' renewals in one window of the load phases.
type loadWindow struct {
	name                   string
	length                 time.Duration
	renewals, failed       int64
	lat                    []time.Duration
	loadWrites, loadFailed int64
	apiCPU                 time.Duration // kube-apiserver + etcd
	// apf is what API Priority and Fairness did in the window, per priority
	// level: requests executed, their summed queue wait, requests rejected.
	apf map[string]apfLevel
}

type apfLevel struct {
	executed, rejected float64
	wait               float64 // seconds
	// seats is the level's nominal concurrency limit (a gauge: its value at
	// the end of a window).
	seats float64
}

// apfMetrics reads kube-apiserver's flow-control metrics, per priority level.
func (b *bench) apfMetrics(ctx context.Context) (map[string]apfLevel, error) {
	hc, err := rest.HTTPClientFor(b.cfg)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(b.cfg.Host, "/")+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	out := map[string]apfLevel{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, "{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		level := label(labels, "priority_level")
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if level == "" || err != nil {
			continue
		}
		l := out[level]
		switch {
		case name == "apiserver_flowcontrol_request_wait_duration_seconds_sum" && label(labels, "execute") == "true":
			l.wait += v
		case name == "apiserver_flowcontrol_request_wait_duration_seconds_count" && label(labels, "execute") == "true":
			l.executed += v
		case name == "apiserver_flowcontrol_nominal_limit_seats":
			l.seats = v
		case name == "apiserver_flowcontrol_rejected_requests_total" && label(labels, "reason") != "cancelled":
			// (cancelled: the client went away, e.g. a killed holder)
			l.rejected += v
		default:
			continue
		}
		out[level] = l
	}
	return out, sc.Err()
}

// label returns the value of label name in a Prometheus label list.
func label(labels, name string) string {
	_, after, ok := strings.Cut(","+labels, ","+name+"=\"")
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(after, "\"")
	return v
}

func apfSub(a, b map[string]apfLevel) map[string]apfLevel {
	out := map[string]apfLevel{}
	for k, x := range a {
		y := b[k]
		out[k] = apfLevel{executed: x.executed - y.executed, rejected: x.rejected - y.rejected, wait: x.wait - y.wait, seats: x.seats}
	}
	return out
}

func (l apfLevel) String() string {
	if l.executed == 0 && l.rejected == 0 {
		return "-"
	}
	mean := "-"
	if l.executed > 0 {
		mean = ms(time.Duration(l.wait / l.executed * float64(time.Second)))
	}
	return fmt.Sprintf("%.0f, wait %s, %.0f rejected", l.executed, mean, l.rejected)
}

// scaleLoad runs the load phases: a load process writes ConfigMaps as fast as
// the API server takes them while the holders renew, first without the
// shipped FlowSchemas and priority level (renewals then share upstream's
// workload-low level with the load), then with them.
func (b *bench) scaleLoad(ctx context.Context, s *scaleRun, holders []*scaleProc) error {
	if err := b.createNamespace(ctx, "load"); err != nil {
		return err
	}
	for _, withFC := range []bool{false, true} {
		name := "loaded, without kubefence's FlowSchemas (renewals in workload-low with the load)"
		if withFC {
			name = "loaded, with kubefence's FlowSchemas (renewals in their own level)"
			if err := b.flowControl(ctx, true); err != nil {
				return err
			}
		} else if err := b.flowControl(ctx, false); err != nil {
			return err
		}
		// The API server's APF configuration controller picks the change up.
		if err := sleep(ctx, 5*time.Second); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "bench: scale: load %v, %d writers as %d users: %s\n", scaleOpts.load, scaleOpts.loadWorkers, len(s.loadKubeconfig), name)
		var gens []*scaleProc
		stopGens := func() {
			for _, g := range gens {
				g.stop()
			}
		}
		for i, kc := range s.loadKubeconfig {
			per := scaleOpts.loadWorkers / len(s.loadKubeconfig)
			if i < scaleOpts.loadWorkers%len(s.loadKubeconfig) {
				per++
			}
			g, err := b.startProc(ctx, s, fmt.Sprintf("load-%t-%d", withFC, i), "load", []string{"load"},
				"-kubeconfig", kc, "-workers", strconv.Itoa(per))
			if err != nil {
				stopGens()
				return err
			}
			gens = append(gens, g)
		}
		// Let the load ramp up, then measure.
		if err := sleep(ctx, 5*time.Second); err != nil {
			stopGens()
			return err
		}
		genCounts := func() (c [4]int64) {
			for _, g := range gens {
				x := g.snapshot()
				for i := range c {
					c[i] += x[i]
				}
			}
			return c
		}
		lw := loadWindow{name: name, length: scaleOpts.load}
		h0 := map[*scaleProc][4]int64{}
		for _, p := range holders {
			h0[p] = p.snapshot()
		}
		g0 := genCounts()
		apf0, apfErr := b.apfMetrics(ctx)
		cpu0 := cpuOf([]int{s.apiserver, s.etcd})
		start := time.Now()
		err := sleep(ctx, scaleOpts.load)
		end := time.Now()
		lw.apiCPU = cpuOf([]int{s.apiserver, s.etcd}) - cpu0
		if apf1, err := b.apfMetrics(ctx); err == nil && apfErr == nil {
			lw.apf = apfSub(apf1, apf0)
		} else {
			fmt.Fprintln(os.Stderr, "bench: scale: reading kube-apiserver's flow-control metrics:", errors.Join(apfErr, err))
		}
		g1 := genCounts()
		stopGens()
		if err != nil {
			return err
		}
		for _, p := range holders {
			c := p.snapshot()
			lw.renewals += c[1] - h0[p][1]
			lw.failed += c[2] - h0[p][2]
			lw.lat = append(lw.lat, p.writeLatencies(start, end)...)
		}
		lw.loadWrites, lw.loadFailed = g1[1]-g0[1], g1[2]-g0[2]
		s.rep.loaded = append(s.rep.loaded, lw)
		// The holders catch up before the next phase.
		if err := sleep(ctx, 5*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// flowControl installs (or removes) the FlowSchemas and priority level that
// ship in config/flowcontrol, as written there.
func (b *bench) flowControl(ctx context.Context, install bool) error {
	objs, err := flowControlObjects()
	if err != nil {
		return err
	}
	for _, obj := range objs {
		if install {
			err = client.IgnoreAlreadyExists(b.admin.Create(ctx, obj))
		} else {
			err = client.IgnoreNotFound(b.admin.Delete(ctx, obj))
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", map[bool]string{true: "installing", false: "removing"}[install], obj.GetName(), err)
		}
	}
	return nil
}

// flowControlObjects reads config/flowcontrol: the priority level first,
// then the FlowSchemas.
func flowControlObjects() ([]client.Object, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	var objs []client.Object
	for _, f := range []string{"priority_level.yaml", "flow_schemas.yaml"} {
		raw, err := os.ReadFile(filepath.Join(root, "config", "flowcontrol", f))
		if err != nil {
			return nil, err
		}
		for _, doc := range strings.Split(string(raw), "\n---") {
			var obj client.Object = &flowcontrolv1.FlowSchema{}
			if f == "priority_level.yaml" {
				obj = &flowcontrolv1.PriorityLevelConfiguration{}
			}
			if err := sigsyaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			objs = append(objs, obj)
		}
	}
	return objs, nil
}

// apiserverProfile writes a CPU profile of kube-apiserver over d to file.
func (b *bench) apiserverProfile(ctx context.Context, file string, d time.Duration) error {
	hc, err := rest.HTTPClientFor(b.cfg)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", strings.TrimSuffix(b.cfg.Host, "/"), int(d.Seconds())), nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /debug/pprof/profile: %s", resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// allQueued tells whether the controller lists a waiter in the status of
// every lease in keys.
func (b *bench) allQueued(ctx context.Context, keys []string) (bool, error) {
	for _, k := range keys {
		ns, name, _ := strings.Cut(k, "/")
		var l coordv1alpha1.FencedLease
		if err := b.admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &l); err != nil {
			return false, err
		}
		if len(l.Status.Waiting) == 0 {
			return false, nil
		}
	}
	return true, nil
}

// lastStamps reads, a second after a kill (time for writes in flight to
// commit), the renewTime of each killed holder's request: when it sent its
// last renewal. A lease whose request has no stamp is left out.
func (b *bench) lastStamps(ctx context.Context, keys []string, holder func(i int) string) (map[string]time.Time, error) {
	if err := sleep(ctx, time.Second); err != nil {
		return nil, err
	}
	out := map[string]time.Time{}
	for i, k := range keys {
		ns, name, _ := strings.Cut(k, "/")
		var l coordv1alpha1.FencedLease
		if err := b.admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &l); err != nil {
			return nil, err
		}
		for _, q := range l.Spec.Requests {
			if q.HolderIdentity == holder(i) && q.RenewTime != nil {
				out[k] = q.RenewTime.Time
			}
		}
	}
	return out, nil
}

// ctrlTotal sums the controller's writes over all namespaces.
func (b *bench) ctrlTotal() writeCounts {
	b.ctrlRT.mu.Lock()
	defer b.ctrlRT.mu.Unlock()
	out := writeCounts{}
	for _, c := range b.ctrlRT.counts {
		out.add(c)
	}
	return out
}

// scaleEpochStore deletes every FencedLease (the controller records each
// name), then records further names directly up to -scale-epoch-names, and
// measures the shards.
func (b *bench) scaleEpochStore(ctx context.Context, s *scaleRun, all []string) error {
	fmt.Fprintf(os.Stderr, "bench: scale: deleting %d FencedLeases (the epoch finalizer records each)\n", len(all))
	t0 := time.Now()
	if err := parallel(ctx, all, 8, func(ctx context.Context, k string) error {
		ns, name, _ := strings.Cut(k, "/")
		return client.IgnoreNotFound(b.admin.Delete(ctx, &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}))
	}); err != nil {
		return err
	}
	if err := waitFor(ctx, 15*time.Minute, 2*time.Second, "every FencedLease to be gone", func(ctx context.Context) (bool, error) {
		var list coordv1alpha1.FencedLeaseList
		if err := b.admin.List(ctx, &list, client.Limit(1)); err != nil {
			return false, err
		}
		return len(list.Items) == 0, nil
	}); err != nil {
		return err
	}
	s.rep.deleted = len(all)
	s.rep.deleteTime = time.Since(t0)
	if more := scaleOpts.epochNames - len(all); more > 0 {
		store := &fencedlease.EpochStore{Reader: b.admin, Writer: b.admin}
		tokens := map[string]int64{}
		for i := range more {
			tokens[fmt.Sprintf("gone-%06d", i)] = int64(1_000_000 + i)
		}
		if err := store.RecordAll(ctx, "scale", tokens); err != nil {
			return err
		}
	}
	var list corev1.ConfigMapList
	if err := b.admin.List(ctx, &list, client.MatchingLabels{coordv1alpha1.EpochStoreLabel: "shard"}); err != nil {
		return err
	}
	s.rep.epochPerNS = map[string]int{}
	for i := range list.Items {
		raw, err := json.Marshal(&list.Items[i])
		if err != nil {
			return err
		}
		entries, err := fencedlease.EpochShardEntries(&list.Items[i])
		if err != nil {
			return err
		}
		s.rep.epochObjects++
		s.rep.epochNames += len(entries)
		s.rep.epochLargest = max(s.rep.epochLargest, len(raw))
		s.rep.epochTotal += len(raw)
		s.rep.epochPerNS[list.Items[i].Namespace]++
	}
	return nil
}

func parallel(ctx context.Context, keys []string, workers int, fn func(context.Context, string) error) error {
	ch := make(chan string)
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for k := range ch {
				if err := fn(ctx, k); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("%s: %w", k, err)
					}
					mu.Unlock()
				}
			}
		})
	}
	for _, k := range keys {
		if ctx.Err() != nil {
			break
		}
		ch <- k
	}
	close(ch)
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// heapInUse is this process's live heap after a GC, and its goroutines.
func heapInUse() (uint64, int) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse, runtime.NumGoroutine()
}

// controlPlanePIDs finds the kube-apiserver and etcd envtest started as
// children of this process, other than those in skip (another control
// plane's).
func controlPlanePIDs(skip ...int) (apiserver, etcd int, err error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, 0, err
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		comm, ppid, ok := statCommPPID(string(raw))
		if !ok || ppid != self || slices.Contains(skip, pid) {
			continue
		}
		switch comm {
		case "kube-apiserver":
			apiserver = pid
		case "etcd":
			etcd = pid
		}
	}
	if apiserver == 0 || etcd == 0 {
		return 0, 0, fmt.Errorf("kube-apiserver (%d) or etcd (%d) not found among this process's children", apiserver, etcd)
	}
	return apiserver, etcd, nil
}

func statCommPPID(stat string) (string, int, bool) {
	open, closing := strings.IndexByte(stat, '('), strings.LastIndexByte(stat, ')')
	if open < 0 || closing < open {
		return "", 0, false
	}
	f := strings.Fields(stat[closing+1:])
	if len(f) < 2 {
		return "", 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return stat[open+1 : closing], ppid, err == nil
}

// clkTck is USER_HZ, 100 on Linux.
const clkTck = 100

// cpuOf sums utime+stime of pids.
func cpuOf(pids []int) time.Duration {
	var ticks int64
	for _, pid := range pids {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(raw)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += u + st
	}
	return time.Duration(ticks) * time.Second / clkTck
}

// machineBusy is the CPU time every process of the machine has used since
// boot (/proc/stat: all but idle and iowait).
func machineBusy() time.Duration {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line)
	var ticks int64
	for i, x := range f[1:] {
		if i == 3 || i == 4 || i >= 8 { // idle, iowait; guest time is in user already
			continue
		}
		n, _ := strconv.ParseInt(x, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clkTck
}

// rssOf sums VmRSS of pids, in bytes.
func rssOf(pids []int) int64 {
	var n int64
	for _, pid := range pids {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(raw), "\n") {
			if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				f := strings.Fields(rest)
				if len(f) > 0 {
					kb, _ := strconv.ParseInt(f[0], 10, 64)
					n += kb << 10
				}
			}
		}
	}
	return n
}

func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }

func (r *scaleReport) print(w io.Writer, b *bench, o scaleOptions) {
	fmt.Fprintf(w, "\nkubefence scale benchmark: %d FencedLeases, H = %d held, L = %ds, webhooks installed; windows below\n",
		r.n, r.held, o.lease)
	fmt.Fprintf(w, "kube-apiserver %s, %d CPUs (%s), load average at start %s, run took %v\n",
		r.env.serverVersion, r.env.cpus, r.env.cpuModel, r.env.loadStart, r.elapsed.Round(time.Second))
	workers := o.workers
	if workers == 0 {
		workers = fencedlease.DefaultMaxConcurrentReconciles
	}
	fmt.Fprintf(w, "operator = the bench process (controller + webhook managers + orchestration), %d concurrent reconciles; holders run in child processes\n\n", workers)

	rows := [][]string{{"measure"}}
	for _, x := range r.windows {
		rows[0] = append(rows[0], x.name)
	}
	add := func(name string, f func(window) string) {
		row := []string{name}
		for _, x := range r.windows {
			row = append(row, f(x))
		}
		rows = append(rows, row)
	}
	secs := func(x window) float64 { return x.length.Seconds() }
	add("held leases", func(x window) string { return strconv.Itoa(x.held) })
	add("window", func(x window) string { return x.length.String() })
	add("renewals (holders' successful writes)", func(x window) string { return strconv.FormatInt(x.holderRenewals, 10) })
	add("holder writes/s", func(x window) string { return fmt.Sprintf("%.1f", float64(x.holderWrites)/secs(x)) })
	add("controller writes/s", func(x window) string { return fmt.Sprintf("%.1f", float64(x.controllerWrites)/secs(x)) })
	add("writes/s per held lease", func(x window) string {
		return fmt.Sprintf("%.3f", float64(x.holderWrites+int64(x.controllerWrites))/secs(x)/float64(x.held))
	})
	add("writes per renewal, system-wide", func(x window) string {
		return ratio(int(x.holderWrites)+x.controllerWrites, int(x.holderRenewals))
	})
	for _, k := range []string{"kube-apiserver", "etcd", "operator (bench process)", "holder processes"} {
		add(k+" CPU s (cores)", func(x window) string {
			c := x.cpu[k].cpu
			return fmt.Sprintf("%.1f (%.2f)", c.Seconds(), c.Seconds()/secs(x))
		})
	}
	add("kube-apiserver + etcd CPU ms per renewal", func(x window) string {
		c := x.cpu["kube-apiserver"].cpu + x.cpu["etcd"].cpu
		if x.holderRenewals == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", float64(c.Milliseconds())/float64(x.holderRenewals))
	})
	add("operator CPU cores per 1,000 held", func(x window) string {
		return fmt.Sprintf("%.3f", x.cpu["operator (bench process)"].cpu.Seconds()/secs(x)/float64(x.held)*1000)
	})
	for _, k := range []string{"kube-apiserver", "etcd", "operator (bench process)"} {
		add(k+" peak RSS", func(x window) string { return mib(x.cpu[k].peakRSS) })
	}
	table(w, rows)
	if len(r.windows) >= 3 && r.windows[1].holderRenewals > 0 && r.windows[0].holderRenewals > 0 {
		per := func(x window) float64 {
			return (x.cpu["kube-apiserver"].cpu + x.cpu["etcd"].cpu).Seconds() / float64(x.holderRenewals)
		}
		fmt.Fprintf(w, "\nkube-apiserver + etcd CPU per renewal, kubefence / client-go at the same count and interval: %.2fx\n", per(r.windows[0])/per(r.windows[1]))
	}
	if len(r.windows) > 0 {
		fmt.Fprintf(w, "controller writes by kind in the kubefence window: ")
		cats := r.windows[0].controllerByCat
		var parts []string
		for _, c := range categoryOrder {
			if cats[c] != 0 {
				parts = append(parts, fmt.Sprintf("%s %d", c, cats[c]))
			}
		}
		fmt.Fprintln(w, strings.Join(parts, "; "))
		if f := r.windows[0].otherFields; len(f) > 0 {
			parts = parts[:0]
			for _, k := range sortedKeys(f) {
				parts = append(parts, fmt.Sprintf("%s %d", k, f[k]))
			}
			fmt.Fprintf(w, "status fields changed by the writes of kind %q: %s\n", catStatusOther, strings.Join(parts, "; "))
		}
	}

	fmt.Fprintln(w)
	table(w, [][]string{
		{"kubefence latency", "n", "p50", "p99", "max"},
		latRow("grant: elector started -> OnStartedLeading (all H at once)", r.grant),
		latRow("expiry lateness: expiry write sent - (last renewal's stamp + L + allowance)", r.lateness),
		latRow("takeover beyond L: new holder leads - (last renewal's stamp + L)", r.takeoverBeyond),
		latRow("takeover from the kill: new holder leads - (kill + L); < 0: killed after its last renewal", r.takeoverFromKill),
		latRow(fmt.Sprintf("mass fail-over of %d: kill -> each lease's new holder leads", o.mass), r.massFailover),
		latRow("  of which: kill -> expiry due (last renewal's stamp + L + allowance)", r.massDue),
		latRow("  expiry due -> grant write sent (controller lateness)", r.massLateness),
		latRow("  grant write sent -> returned", r.massGrantWrite),
		latRow("  grant returned -> new holder leads (watch, acknowledging renewal)", r.massAck),
	})
	if len(r.loaded) > 0 {
		fmt.Fprintf(w, "\nrenewals while %d ConfigMap writers as %d service accounts (%s) saturate the API server (--max-requests-inflight %d, --max-mutating-requests-inflight %d; 0: default)\n",
			o.loadWorkers, max(o.loadUsers, 1), fmt.Sprintf(scaleLoadUser, 0), o.maxInflight, o.maxMutatingInflight)
		rows := [][]string{{"window", "kube-apiserver + etcd cores", "renewals/s", "renewals refused", "load writes/s (refused)", "renewal p50", "p99", "max", "p99 / unloaded p99"}}
		apfRows := [][]string{{"window (APF: requests executed, mean queue wait, rejected)", "leases (kubefence)", "workload-low", "global-default", "exempt"}}
		unloadedP99, _ := quantile(r.unloaded.lat, 0.99)
		for _, x := range append([]loadWindow{r.unloaded}, r.loaded...) {
			sorted := append([]time.Duration(nil), x.lat...)
			sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
			mx := "-"
			if len(sorted) > 0 {
				mx = ms(sorted[len(sorted)-1])
			}
			rat := "-"
			if p99, ok := quantile(x.lat, 0.99); ok && unloadedP99 > 0 {
				rat = fmt.Sprintf("%.2fx", float64(p99)/float64(unloadedP99))
			}
			apfRows = append(apfRows, []string{x.name, x.apf["leases"].String(), x.apf["workload-low"].String(), x.apf["global-default"].String(), x.apf["exempt"].String()})
			rows = append(rows, []string{x.name, fmt.Sprintf("%.2f", x.apiCPU.Seconds()/x.length.Seconds()),
				fmt.Sprintf("%.1f", float64(x.renewals)/x.length.Seconds()), strconv.FormatInt(x.failed, 10),
				fmt.Sprintf("%.1f (%d)", float64(x.loadWrites)/x.length.Seconds(), x.loadFailed), q(x.lat, 0.5), q(x.lat, 0.99), mx, rat})
		}
		table(w, rows)
		fmt.Fprintln(w)
		table(w, apfRows)
		fmt.Fprintf(w, "tenures lost to a waiter during the load phases: %d\n", r.lostUnderLoad)
	}
	if r.massCtrl != nil {
		var parts []string
		for _, c := range categoryOrder {
			if r.massCtrl[c] != 0 {
				parts = append(parts, fmt.Sprintf("%s %d", c, r.massCtrl[c]))
			}
		}
		fmt.Fprintf(w, "mass fail-over, kill to all granted (%v): controller writes in the %d leases' namespace: %s; the new holders' writes %d (refused %d)\n",
			r.massDuration.Round(time.Second), o.mass, strings.Join(parts, "; "), r.massWaiterWrites, r.massWaiterFailed)
		if r.massAPF != nil {
			fmt.Fprintf(w, "mass fail-over, APF (requests executed, mean queue wait, rejected): leases %s; workload-low %s\n", r.massAPF["leases"], r.massAPF["workload-low"])
		}
	}
	if r.massMissing > 0 {
		fmt.Fprintf(w, "mass fail-over: %d leases were not granted again within L + 60 s\n", r.massMissing)
	}

	fmt.Fprintln(w)
	table(w, [][]string{
		{"controller and store", "value"},
		{"FencedLeases created (all reconciled)", fmt.Sprintf("%d in %v", r.n, r.createTime.Round(time.Second))},
		{"kubefence waiters started -> all listed in status.waiting", r.queueTime.Round(time.Second).String()},
		{"bench process heap in use before / after creating them (after GC)", fmt.Sprintf("%s / %s (%.1f KiB per lease; two informers: controller and webhook managers)",
			mib(int64(r.heapBefore)), mib(int64(r.heapAfter)), float64(int64(r.heapAfter)-int64(r.heapBefore))/1024/float64(r.n))},
		{"goroutines before / after creating them / end of last window", fmt.Sprintf("%d / %d / %d", r.goroutinesBefore, r.goroutines, lastGoroutines(r.windows))},
		{"FencedLeases deleted (epoch finalizer recorded each)", fmt.Sprintf("%d in %v", r.deleted, r.deleteTime.Round(time.Second))},
		{"epoch store: names / objects (namespaces)", fmt.Sprintf("%d / %d (%d)", r.epochNames, r.epochObjects, len(r.epochPerNS))},
		{"epoch store: largest object / all objects", fmt.Sprintf("%.1f KiB / %.1f KiB", float64(r.epochLargest)/1024, float64(r.epochTotal)/1024)},
	})
}

func lastGoroutines(ws []window) int {
	if len(ws) == 0 {
		return 0
	}
	return ws[len(ws)-1].goroutinesOperatr
}

func latRow(name string, ds []time.Duration) []string {
	sorted := append([]time.Duration(nil), ds...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	mx := "-"
	if len(sorted) > 0 {
		mx = ms(sorted[len(sorted)-1])
	}
	return []string{name, strconv.Itoa(len(ds)), q(ds, 0.5), q(ds, 0.99), mx}
}

func sortedKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// serveOperator serves both webhooks and runs the controller in webhook mode
// as b's user; stop ends both (waiting up to 30 s for the controller).
func (b *bench) serveOperator(ctx context.Context) (stop func(), err error) {
	whs, err := b.startWebhooks(ctx)
	if err != nil {
		return nil, err
	}
	mgrCtx, stopMgr := context.WithCancel(ctx)
	mgrDone, err := b.startController(mgrCtx, operator.EnforcementWebhook)
	if err != nil {
		stopMgr()
		whs.stop()
		return nil, err
	}
	return func() {
		stopMgr()
		select {
		case <-mgrDone:
		case <-time.After(30 * time.Second):
		}
		whs.stop()
	}, nil
}

// start gives s a temporary directory (prefix) and finds this control
// plane's kube-apiserver and etcd (not those in skipPIDs); cleanup kills the
// processes s started and removes the directory.
func (s *scaleRun) start(prefix string, skipPIDs ...int) (cleanup func(), err error) {
	if s.dir, err = os.MkdirTemp("", prefix); err != nil {
		return nil, err
	}
	cleanup = func() {
		for _, p := range s.procs {
			p.kill()
		}
		_ = os.RemoveAll(s.dir)
	}
	if s.apiserver, s.etcd, err = controlPlanePIDs(skipPIDs...); err != nil {
		cleanup()
		return nil, err
	}
	return cleanup, nil
}
