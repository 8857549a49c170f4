package main

// The scale benchmark (-only=scale, `make bench-scale`): N FencedLeases, H of
// them held and renewing through pkg/fence in holder processes
// (scale_child.go), with the operator's webhooks installed and the controller
// in this process; a steady window, then the holders killed (the samples one
// by one, then the mass group at once); then H client-go Leases at the same
// renewal interval. scale_report.go prints it.
// See docs/benchmarks.md.

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	sigsyaml "sigs.k8s.io/yaml"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/fencedlease"
	"github.com/kubefence/kubefence/hack/devenv"
)

const (
	// scaleHolderUser is the holder processes' identity: a service account,
	// neither the trusted controller nor exempt from flow control.
	scaleHolderUser = "system:serviceaccount:bench:holder"
	scalePerProc    = 500 // electors per holder process
	scaleSettle     = 10 * time.Second
	scaleMassNS     = "scale-mass"
	// kube-apiserver's --max-requests-inflight and
	// --max-mutating-requests-inflight: 90 seats for API Priority and
	// Fairness to share (a small server; the defaults are 400 + 200).
	scaleMaxInflight, scaleMaxMutatingInflight = 60, 30
)

type scaleOptions struct {
	leases, mass, samples, lease int
	steady, baseline             time.Duration
	// skipBaseline leaves out the client-go windows (fail-over rows only).
	skipBaseline bool
	// heartbeats adds two windows after the fail-over: the mass group held
	// by one process renewing on heartbeat Leases, one per lease, then on
	// one session Lease.
	heartbeats bool
}

var scaleOpts scaleOptions

func init() {
	if os.Getenv(scaleChildEnv) != "" {
		return
	}
	flag.IntVar(&scaleOpts.leases, "scale-leases", 10_000, "scale: FencedLeases created (N)")
	flag.IntVar(&scaleOpts.mass, "scale-mass", 500, "scale: leases held by the one process killed for the mass fail-over")
	flag.IntVar(&scaleOpts.samples, "scale-samples", 20, "scale: holders killed one lease each for takeover and expiry lateness")
	flag.IntVar(&scaleOpts.lease, "scale-lease", 15, "scale: lease duration in seconds (L)")
	flag.DurationVar(&scaleOpts.steady, "scale-steady", 5*time.Minute, "scale: length of the kubefence steady-state window")
	flag.DurationVar(&scaleOpts.baseline, "scale-baseline-steady", 0, "scale: length of the client-go window (default: -scale-steady)")
	flag.BoolVar(&scaleOpts.skipBaseline, "scale-skip-baseline", false, "scale: leave out the client-go window (for the fail-over and controller rows alone)")
	flag.BoolVar(&scaleOpts.heartbeats, "scale-heartbeats", false, "scale: after the fail-over, hold the -scale-mass leases in one process renewing on heartbeat Leases (one per lease, then one session Lease) for a window each")
}

// configureAPIServer sets kube-apiserver's concurrency limits.
func (scaleOptions) configureAPIServer(env *envtest.Environment) {
	args := env.ControlPlane.GetAPIServer().Configure()
	args.Set("max-requests-inflight", strconv.Itoa(scaleMaxInflight))
	args.Set("max-mutating-requests-inflight", strconv.Itoa(scaleMaxMutatingInflight))
}

// scaleRun is the state of one scale run.
type scaleRun struct {
	dir        string
	kubeconfig string // the holders'
	procs      []*scaleProc
	rep        scaleReport
}

// window is one steady-state window of a phase.
type window struct {
	name                         string
	held                         int
	length                       time.Duration
	holderWrites, holderRenewals int64
	controllerByCat              writeCounts
	usage                        map[string]usage // CPU over the window, peak RSS
}

type scaleReport struct {
	env        environment
	n, held    int
	createTime time.Duration
	windows    []window
	failover
	queueTime   time.Duration
	elapsed     time.Duration
	reconcilers int
}

// failover is what killing holders measured: the samples' takeovers and the
// mass fail-over in steps.
type failover struct {
	takeoverBeyond, lateness            []time.Duration
	massFailover, massDue, massLateness []time.Duration
	massGrantWrite, massAck             []time.Duration
	massCtrl                            writeCounts
	massWaiterWrites, massWaiterFailed  int64
	massDuration                        time.Duration
	// massLate is the controller's own expiry lateness over the mass
	// fail-over (kubefence_expiry_lateness_seconds).
	massLate    lateHistogram
	massMissing int
}

func (b *bench) scale(ctx context.Context, env environment) error {
	o := scaleOpts
	b.opts.leaseSeconds = o.lease
	b.lease = time.Duration(o.lease) * time.Second
	held := o.mass + o.samples
	if o.leases < held || o.mass < 1 || o.samples < 1 || o.lease < 1 || o.steady <= 0 {
		return fmt.Errorf("-scale-leases (%d) must be at least -scale-mass + -scale-samples (%d), both positive, and -scale-lease and -scale-steady positive", o.leases, held)
	}
	started := time.Now()
	s := &scaleRun{rep: scaleReport{env: env, n: o.leases, held: held}}
	var err error
	if s.dir, err = os.MkdirTemp("", "kubefence-bench-scale"); err != nil {
		return err
	}
	defer func() {
		for _, p := range s.procs {
			p.Kill()
		}
		_ = os.RemoveAll(s.dir)
	}()

	stopOperator, err := b.serveOperator(ctx)
	if err != nil {
		return err
	}
	defer stopOperator()
	if s.kubeconfig, err = b.holderKubeconfig(ctx, s.dir); err != nil {
		return err
	}
	// The FlowSchemas and priority level ship with the operator.
	if err := b.installFlowControl(ctx); err != nil {
		return err
	}

	// N FencedLeases: the mass group (one namespace), the samples (one
	// namespace each, so that the controller's writes for each are told
	// apart), the rest unheld.
	var all, massKeys, sampleKeys []string
	for i := range o.leases - held {
		all = append(all, fmt.Sprintf("scale/l-%06d", i))
	}
	for i := range o.mass {
		massKeys = append(massKeys, fmt.Sprintf("%s/m-%04d", scaleMassNS, i))
	}
	for i := range o.samples {
		sampleKeys = append(sampleKeys, fmt.Sprintf("scale-k%03d/sample", i))
	}
	all = append(append(all, massKeys...), sampleKeys...)
	fmt.Fprintf(os.Stderr, "bench: scale: creating %d FencedLeases\n", len(all))
	t0 := time.Now()
	if err := b.createLeases(ctx, all, 10*time.Minute); err != nil {
		return err
	}
	s.rep.createTime = time.Since(t0)

	if err := b.scaleKubefence(ctx, s, massKeys, sampleKeys); err != nil {
		return err
	}
	for _, mode := range []string{"lease", "session"} {
		if !o.heartbeats {
			break
		}
		if err := b.scaleHeartbeats(ctx, s, mode, massKeys); err != nil {
			return err
		}
	}
	if !o.skipBaseline {
		if err := b.scaleClientGo(ctx, s, held); err != nil {
			return err
		}
	}
	s.rep.elapsed = time.Since(started)
	s.rep.reconcilers = b.cluster.Operator().MaxConcurrentReconciles
	s.rep.print(os.Stdout, o)
	return nil
}

// holderKubeconfig creates the holder processes' user, scaleHolderUser, in
// the service accounts' group (neither trusted nor exempt from flow control),
// grants that group FencedLeases as config/rbac's editor role does and Leases
// for client-go, and writes the user's kubeconfig into dir; it returns the
// file.
func (b *bench) holderKubeconfig(ctx context.Context, dir string) (string, error) {
	const group = "system:serviceaccounts"
	u, err := b.testEnv.AddUser(envtest.User{Name: scaleHolderUser, Groups: []string{group, "system:authenticated"}}, rest.CopyConfig(b.cfg))
	if err != nil {
		return "", err
	}
	kc, err := u.KubeConfig()
	if err != nil {
		return "", err
	}
	file := filepath.Join(dir, "holder.kubeconfig")
	if err := os.WriteFile(file, kc, 0o600); err != nil {
		return "", err
	}
	return file, devenv.GrantClusterRole(ctx, b.admin, "bench-holder", group, devenv.LeaseClientRule,
		rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update"}})
}

// startHolders starts processes of at most per electors over keys.
func (b *bench) startHolders(ctx context.Context, s *scaleRun, name, kind string, keys []string, per int, extra ...string) ([]*scaleProc, error) {
	var out []*scaleProc
	for i := 0; i < len(keys); i += per {
		p, err := b.startProc(ctx, s, fmt.Sprintf("%s-%d", name, i/per), kind, keys[i:min(i+per, len(keys))], extra...)
		if err != nil {
			return out, err
		}
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

// heldSet is the held leases, their holders (H) and waiters (W): the mass
// group, and the samples (a process each: a kill ends one lease's holder).
type heldSet struct {
	massKeys, sampleKeys           []string
	massH, sampleH, massW, sampleW []*scaleProc
}

// scaleKubefence holds the leases, waits until the controller lists every
// waiter, measures the steady window, then kills the holders.
func (b *bench) scaleKubefence(ctx context.Context, s *scaleRun, massKeys, sampleKeys []string) error {
	h := &heldSet{massKeys: massKeys, sampleKeys: sampleKeys}
	held := len(massKeys) + len(sampleKeys)
	fmt.Fprintf(os.Stderr, "bench: scale: kubefence: %d holders acquiring\n", held)
	var err error
	if h.massH, err = b.startHolders(ctx, s, "kf-mass-h", "kf", massKeys, scalePerProc); err != nil {
		return err
	}
	if h.sampleH, err = b.startHolders(ctx, s, "kf-sample-h", "kf", sampleKeys, 1); err != nil {
		return err
	}
	holders := append(slices.Clone(h.massH), h.sampleH...)
	if err := waitFor(ctx, 5*time.Minute, time.Second, "every kubefence holder to lead", func(context.Context) (bool, error) {
		return leadCount(holders) == held, nil
	}); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "bench: scale: kubefence: waiters queueing")
	if h.massW, err = b.startHolders(ctx, s, "kf-mass-w", "kf", massKeys, scalePerProc); err != nil {
		return err
	}
	if h.sampleW, err = b.startHolders(ctx, s, "kf-sample-w", "kf", sampleKeys, scalePerProc); err != nil {
		return err
	}
	// The window measures renewals: it starts once the controller has listed
	// every waiter in status (a join costs the waiter's write and the
	// controller's queue write, once, not per renewal).
	t0 := time.Now()
	if err := waitFor(ctx, 5*time.Minute, time.Second, "the controller to list every waiter", func(ctx context.Context) (bool, error) {
		return b.allQueued(ctx, append(slices.Clone(massKeys), sampleKeys...))
	}); err != nil {
		return err
	}
	s.rep.queueTime = time.Since(t0)
	if err := sleep(ctx, scaleSettle); err != nil {
		return err
	}
	w, err := b.measure(ctx, "kubefence", "kubefence (pkg/fence, FencedLease, webhooks on)", scaleOpts.steady, held, holders, append(slices.Clone(h.massW), h.sampleW...))
	if err != nil {
		return err
	}
	s.rep.windows = append(s.rep.windows, w)
	if err := b.scaleFailover(ctx, s, h, &s.rep.failover); err != nil {
		return err
	}
	s.stopAll()
	// Let the controller finish the releases before the next phase.
	return sleep(ctx, b.lease)
}

// stopAll ends every holder process gracefully (SIGTERM: electors release).
func (s *scaleRun) stopAll() {
	for _, p := range s.procs {
		p.Stop(30 * time.Second)
	}
	s.procs = nil
}

// scaleFailover kills the sample holders (each waiter takes over), then the
// mass group's holder processes, and measures both into f.
func (b *bench) scaleFailover(ctx context.Context, s *scaleRun, h *heldSet, f *failover) error {
	fmt.Fprintf(os.Stderr, "bench: scale: kubefence: killing %d sample holders\n", len(h.sampleH))
	killed := map[string]time.Time{}
	for i, p := range h.sampleH {
		killed[h.sampleKeys[i]] = time.Now()
		p.Kill() // SIGKILL: its electors renew no more and release nothing
	}
	sampleID := func(i int) string { return fmt.Sprintf("kf-sample-h-%d-0", i) }
	// The killed holders' last renewals, as they stamped them (a renewal's
	// renewTime is when its holder sent it).
	sampleStamps, err := b.lastStamps(ctx, h.sampleKeys, sampleID)
	if err != nil {
		return err
	}
	_ = waitFor(ctx, b.lease+30*time.Second, 200*time.Millisecond, "the sample waiters to lead", func(context.Context) (bool, error) {
		return leadCount(h.sampleW) == len(h.sampleKeys), nil
	})
	allowance := fencedlease.DefaultTiming().Allowance(b.lease)
	leads := map[string][]time.Time{}
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
		lastRenew := sampleStamps[k]
		if lastRenew.IsZero() {
			continue
		}
		f.takeoverBeyond = append(f.takeoverBeyond, ev[0].Sub(lastRenew)-b.lease)
		for _, cw := range b.ctrlRT.trace(ns, killed[k]) {
			if cw.ok && cw.category == catStatusGrant && cw.holder != "" && cw.holder != sampleID(i) {
				f.lateness = append(f.lateness, cw.sent.Sub(lastRenew.Add(b.lease+allowance)))
				break
			}
		}
	}

	fmt.Fprintf(os.Stderr, "bench: scale: kubefence: mass fail-over of %d leases\n", len(h.massKeys))
	massCtrl0 := b.ctrlRT.counted(scaleMassNS)
	late0 := controllerLateness()
	massW0 := map[*scaleProc]procCounts{}
	for _, p := range h.massW {
		massW0[p] = p.snapshot()
	}
	kill := time.Now()
	for _, p := range h.massH {
		p.Kill()
	}
	massStamps, err := b.lastStamps(ctx, h.massKeys, func(i int) string {
		return fmt.Sprintf("kf-mass-h-%d-%d", i/scalePerProc, i%scalePerProc)
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
	for _, cw := range b.ctrlRT.trace(scaleMassNS, kill) {
		if _, seen := grants[cw.name]; !seen && cw.ok && cw.category == catStatusGrant && cw.holder != "" {
			grants[cw.name] = cw
		}
	}
	for _, p := range h.massW {
		for k, evs := range p.leading() {
			f.massFailover = append(f.massFailover, evs[0].Sub(kill))
			_, name, _ := strings.Cut(k, "/")
			g, ok := grants[name]
			if !ok || massStamps[k].IsZero() {
				continue
			}
			due := massStamps[k].Add(b.lease + allowance)
			f.massDue = append(f.massDue, due.Sub(kill))
			f.massLateness = append(f.massLateness, g.sent.Sub(due))
			f.massGrantWrite = append(f.massGrantWrite, g.done.Sub(g.sent))
			f.massAck = append(f.massAck, evs[0].Sub(g.done))
		}
	}
	f.massMissing = len(h.massKeys) - len(f.massFailover)
	// Holder processes report their counts every 500 ms.
	if err := sleep(ctx, time.Second); err != nil {
		return err
	}
	f.massCtrl = b.ctrlRT.counted(scaleMassNS).sub(massCtrl0)
	f.massLate = controllerLateness().sub(late0)
	for _, p := range h.massW {
		c := p.snapshot()
		f.massWaiterWrites += c.writes - massW0[p].writes
		f.massWaiterFailed += c.failed - massW0[p].failed
	}
	return nil
}

// scaleHeartbeats holds keys in one process whose electors renew on
// heartbeat Leases (mode "lease": one each; "session": one for them all) and
// measures a steady window. A session's renewals are counted per tenure: held
// leases × the window / the renewal interval (L/3), what the electors would
// have written without the session.
func (b *bench) scaleHeartbeats(ctx context.Context, s *scaleRun, mode string, keys []string) error {
	name := "kubefence, heartbeat Lease per lease (one process)"
	if mode == "session" {
		name = "kubefence, one session heartbeat Lease (one process; renewals = tenures × window / (L/3))"
	}
	w, err := b.holdAndMeasure(ctx, s, "hb-"+mode, name, "kf", keys, len(keys), scaleOpts.steady, "-heartbeat", mode)
	if err == nil && mode == "session" {
		w.holderRenewals = int64(float64(len(keys)) * w.length.Seconds() / (b.lease / 3).Seconds())
	}
	s.rep.windows = append(s.rep.windows, w)
	return err
}

// scaleClientGo holds held client-go Leases at kubefence's renewal interval
// (RetryPeriod L/3) and measures a steady window.
func (b *bench) scaleClientGo(ctx context.Context, s *scaleRun, held int) error {
	const ns = "cg-same-interval"
	retry := b.lease / 3
	if err := b.createNamespace(ctx, ns); err != nil {
		return err
	}
	keys := make([]string, held)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s/lease-%05d", ns, i)
	}
	w, err := b.holdAndMeasure(ctx, s, ns, fmt.Sprintf("client-go Leases, RetryPeriod %v (kubefence's renewal interval)", retry), "cg", keys, scalePerProc,
		cmp.Or(scaleOpts.baseline, scaleOpts.steady), "-retry", retry.String(), "-renew-deadline", (b.lease * 2 / 3).String())
	s.rep.windows = append(s.rep.windows, w)
	return err
}

// holdAndMeasure starts holder processes of kind over keys (per electors
// each, with the extra arguments), waits until all lead and settle, measures
// a window of length, then stops them and lets their releases finish.
func (b *bench) holdAndMeasure(ctx context.Context, s *scaleRun, tag, name, kind string, keys []string, per int, length time.Duration, extra ...string) (window, error) {
	fmt.Fprintf(os.Stderr, "bench: scale: %s: %d holders acquiring\n", name, len(keys))
	ps, err := b.startHolders(ctx, s, tag, kind, keys, per, extra...)
	if err != nil {
		return window{}, err
	}
	if err := waitFor(ctx, 5*time.Minute, time.Second, "every holder to lead ("+name+")", func(context.Context) (bool, error) {
		return leadCount(ps) == len(keys), nil
	}); err != nil {
		return window{}, err
	}
	if err := sleep(ctx, scaleSettle); err != nil {
		return window{}, err
	}
	w, err := b.measure(ctx, tag, name, length, len(keys), ps, nil)
	if err != nil {
		return w, err
	}
	s.stopAll()
	return w, sleep(ctx, b.lease)
}

// measure runs one steady-state window: the writes and renewals of the
// holders (and of others, the waiters), the controller's writes, and CPU and
// peak RSS (sampled every 10 s) of each part. With -apiserver-profile, the
// kube-apiserver's CPU profile of its first 5 s goes to <prefix>-<tag>.pprof.
func (b *bench) measure(ctx context.Context, tag, name string, length time.Duration, held int, holders, others []*scaleProc) (window, error) {
	w := window{name: name, held: held, length: length, usage: map[string]usage{}}
	fmt.Fprintf(os.Stderr, "bench: scale: steady state %v: %s\n", length, name)
	procs := append(slices.Clone(holders), others...)
	c0 := map[*scaleProc]procCounts{}
	for _, p := range procs {
		c0[p] = p.snapshot()
	}
	ctrl0 := b.ctrlRT.counted("")
	if b.opts.apiserverProfile != "" {
		b.profileAPIServer(ctx, b.opts.apiserverProfile+"-"+tag+".pprof")
	}
	var u0 map[string]usage // the first sample
	for end := time.Now().Add(length); ; {
		u, err := b.usages(ctx, procs)
		if err != nil {
			return w, err
		}
		if u0 == nil {
			u0 = u
		}
		for k, x := range u {
			w.usage[k] = usage{cpu: x.cpu - u0[k].cpu, rss: max(w.usage[k].rss, x.rss)}
		}
		if !time.Now().Before(end) {
			break
		}
		if err := sleep(ctx, min(time.Until(end), 10*time.Second)); err != nil {
			return w, err
		}
	}
	for _, p := range procs {
		c := p.snapshot()
		w.holderWrites += c.writes - c0[p].writes
		if slices.Contains(holders, p) {
			w.holderRenewals += c.completed - c0[p].completed
		}
	}
	w.controllerByCat = b.ctrlRT.counted("").sub(ctrl0)
	return w, nil
}

// installFlowControl creates the FlowSchemas and priority level of
// config/flowcontrol and the heartbeat Leases' admission policy of
// config/heartbeat, as written there.
func (b *bench) installFlowControl(ctx context.Context) error {
	root, err := devenv.ModuleRoot()
	if err != nil {
		return err
	}
	for _, f := range []string{"priority_level.yaml", "flow_schemas.yaml"} {
		raw, err := os.ReadFile(filepath.Join(root, "config", "flowcontrol", f))
		if err != nil {
			return err
		}
		for _, doc := range strings.Split(string(raw), "\n---") {
			obj := &unstructured.Unstructured{}
			if err := sigsyaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			if err := b.admin.Create(ctx, obj); err != nil {
				return fmt.Errorf("installing %s: %w", obj.GetName(), err)
			}
		}
	}
	return devenv.ApplyHeartbeatPolicy(ctx, b.admin, root)
}

// createLeases creates the namespaces and FencedLeases of keys and waits, up
// to timeout, until the controller has put its finalizer on each.
func (b *bench) createLeases(ctx context.Context, keys []string, timeout time.Duration) error {
	created := map[string]bool{}
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8) // creations in flight
	for _, k := range keys {
		ns, name, _ := strings.Cut(k, "/")
		if !created[ns] {
			if err := b.createNamespace(ctx, ns); err != nil {
				return err
			}
			created[ns] = true
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := b.admin.Create(ctx, &coordv1alpha1.FencedLease{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec:       coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: int32(scaleOpts.lease)},
			}); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", k, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return waitFor(ctx, timeout, 5*time.Second, "every lease to carry the epoch finalizer", func(ctx context.Context) (bool, error) {
		var list coordv1alpha1.FencedLeaseList
		err := b.admin.List(ctx, &list)
		n := 0
		for i := range list.Items {
			if len(list.Items[i].Finalizers) > 0 {
				n++
			}
		}
		return err == nil && n == len(keys), err
	})
}

// allQueued tells whether the controller lists a waiter in the status of
// every lease in keys.
func (b *bench) allQueued(ctx context.Context, keys []string) (bool, error) {
	for _, k := range keys {
		ns, name, _ := strings.Cut(k, "/")
		l, err := b.getFencedLease(ctx, ns, name)
		if err != nil {
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
		l, err := b.getFencedLease(ctx, ns, name)
		if err != nil {
			return nil, err
		}
		if q, ok := requestOf(l, holder(i)); ok && q.RenewTime != nil {
			out[k] = q.RenewTime.Time
		}
	}
	return out, nil
}

// serveOperator serves both webhooks and runs the controller; stop ends both.
func (b *bench) serveOperator(ctx context.Context) (stop func(), err error) {
	stopWebhooks, err := b.startWebhooks(ctx)
	if err != nil {
		return nil, err
	}
	if err := b.runController(ctx); err != nil {
		stopWebhooks()
		return nil, err
	}
	return func() { b.stopController(); stopWebhooks() }, nil
}
