// Command bench measures kubefence against one real kube-apiserver and etcd
// (envtest) started in this process, with the operator in this process too.
// `make bench` runs takeover and hand-over side by side with client-go's
// tools/leaderelection (kubefence.go, clientgo.go), then the cost of a
// guarded write in webhook and policy mode (guarded.go), with the webhooks
// installed only for that phase. `make bench-scale` (-only=scale) runs the
// scale benchmark (scale.go). Flags go in BENCH_ARGS and SCALE_ARGS; see
// docs/benchmarks.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/kubefence/kubefence/hack/devenv"
	"github.com/kubefence/kubefence/test/testenv"
)

const operatorNamespace = "kubefence-system"

type options struct {
	takeovers, handovers, leaseSeconds int
	timeout                            time.Duration
	verbose                            bool
	// only selects the phases: "" (1 to 4), "leases" (1 to 3), "guarded" (4)
	// or "scale".
	only string
	// The guarded-write passes: measured rounds in webhook mode (unguarded,
	// allow-all, guarded) and in each policy-mode pass, and the leases in the
	// second policy pass's tenure table.
	baselineWrites, policyWrites, policyTableLeases int
	// apiserverProfile, if set, is the path prefix of the kube-apiserver's
	// CPU profiles taken during each policy-mode pass's measured rounds and
	// each scale window.
	apiserverProfile string
}

func main() {
	var o options
	flag.IntVar(&o.takeovers, "takeovers", 20, "takeover iterations per system")
	flag.IntVar(&o.handovers, "handovers", 50, "hand-over iterations per system")
	flag.IntVar(&o.leaseSeconds, "lease", 2, "lease duration in seconds (both systems)")
	flag.BoolVar(&o.verbose, "v", false, "log the controller, the electors and client-go")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up after this long")
	flag.StringVar(&o.only, "only", "", `run only these phases: "leases" (takeover, hand-over), "guarded" (guarded writes) or "scale" (make bench-scale); default: leases and guarded`)
	flag.IntVar(&o.baselineWrites, "baseline-writes", 1000, "measured rounds of the webhook-mode pass: an unguarded write, one through an allow-all webhook, and one through the fencing webhook (0: skip)")
	flag.IntVar(&o.policyWrites, "policy-writes", 1000, "measured rounds (an unguarded and a guarded write) of each policy-mode pass: the fencing ValidatingAdmissionPolicy instead of the webhook (0: skip)")
	flag.IntVar(&o.policyTableLeases, "policy-table-leases", 1000, "leases in the tenure table of the second policy pass")
	flag.StringVar(&o.apiserverProfile, "apiserver-profile", "", "write the kube-apiserver's CPU profile (5 s) of each policy-mode pass's measured rounds, or of each scale window's start, to <prefix>-<pass or window>.pprof")
	flag.Parse()

	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// bench is the shared state of one run.
type bench struct {
	opts           options
	lease          time.Duration
	cfg            *rest.Config
	scheme         *runtime.Scheme
	admin          client.Client
	adminUser      string
	cluster        *testenv.Cluster
	testEnv        *envtest.Environment
	ctrlRT         *controllerTransport
	stopController func() // set by runController
	// policyTableBytes is the size of the tenure table's data in the policy pass.
	policyTableBytes int
	// leases is the fencing handlers' lease source; allowed counts the
	// allow-all webhook's calls (startWebhooks).
	allowed atomic.Int64
}

func run(o options) error {
	switch {
	case o.takeovers < 1 || o.handovers < 1 || o.leaseSeconds < 1:
		return errors.New("-takeovers, -handovers and -lease must be at least 1")
	case o.only != "" && o.only != "leases" && o.only != "guarded" && o.only != "scale":
		return fmt.Errorf(`-only is %q: expected "leases", "guarded" or "scale"`, o.only)
	case o.policyWrites < 0 || o.policyTableLeases < 1 || o.baselineWrites < 0:
		return errors.New("-policy-table-leases must be at least 1, -policy-writes and -baseline-writes at least 0")
	case os.Getenv("KUBEBUILDER_ASSETS") == "":
		return errors.New("KUBEBUILDER_ASSETS is unset: run `make bench`, which supplies kube-apiserver and etcd")
	}
	if o.verbose {
		logf.SetLogger(zap.New(zap.UseDevMode(true)))
	} else {
		logf.SetLogger(logr.Discard())
		klog.SetLogger(logr.Discard())
	}
	root, err := devenv.ModuleRoot()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()

	b := &bench{opts: o, lease: time.Duration(o.leaseSeconds) * time.Second, scheme: devenv.NewScheme(), ctrlRT: newControllerTransport()}
	fmt.Fprintln(os.Stderr, "bench: starting kube-apiserver and etcd (envtest)")
	// No webhooks yet: startWebhooks installs them before phase 4. The CRDs,
	// and the example guarded kind (Widget) of phase 4.
	if b.cluster, err = testenv.Start(ctx, testenv.Input{Scheme: b.scheme, Namespace: operatorNamespace, Configure: func(env *envtest.Environment) {
		env.CRDDirectoryPaths = []string{filepath.Join(root, "config", "crd", "bases"), filepath.Join(root, "test", "crds")}
		env.ErrorIfCRDPathMissing = true
		if o.only == "scale" {
			scaleOpts.configureAPIServer(env)
		}
	}}); err != nil {
		return err
	}
	b.testEnv, b.cfg, b.admin, b.adminUser = b.cluster.Env, b.cluster.Config, b.cluster.Admin, b.cluster.AdminUser
	defer func() {
		if err := b.testEnv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "bench: stopping envtest:", err)
		}
	}()
	env, err := b.setup(ctx)
	if err != nil {
		return err
	}
	if o.only == "scale" {
		return b.scale(ctx, env) // scale.go: its own webhooks, controller and report
	}

	// Stopped after the controller (defers run last in, first out): the
	// FencedLease validator must answer as long as the controller writes.
	stopWebhooks := func() {}
	defer func() { stopWebhooks() }()
	if err := b.runController(ctx); err != nil {
		return err
	}
	defer b.stopController()

	rep := report{env: env}
	started := time.Now()
	if o.only == "" || o.only == "leases" {
		if err := b.leasePhases(ctx, &rep); err != nil {
			return err
		}
	}
	if o.only == "" || o.only == "guarded" {
		fmt.Fprintln(os.Stderr, "bench: guarded writes: installing and serving the webhooks")
		if stopWebhooks, err = b.startWebhooks(ctx); err != nil {
			return err
		}
		g, err := b.guarded(ctx)
		if err != nil {
			return fmt.Errorf("guarded-write phase: %w", err)
		}
		rep.guarded = &g
	}
	rep.elapsed = time.Since(started)
	rep.print(os.Stdout, b)
	return nil
}

// leasePhases runs phases 1 to 3, each with both systems side by side.
func (b *bench) leasePhases(ctx context.Context, rep *report) error {
	o := b.opts
	rep.leases = true
	for _, p := range []struct {
		name, says string
		kf, cg     func(context.Context) error
	}{
		{"takeover", fmt.Sprintf("phase 1/2: takeover after the holder stops renewing (%d iterations each)", o.takeovers),
			func(ctx context.Context) (err error) { rep.kfTakeover, err = b.kfTakeover(ctx); return },
			func(ctx context.Context) (err error) { rep.cgTakeover, err = b.cgTakeover(ctx); return }},
		{"hand-over", fmt.Sprintf("phase 2/2: hand-over after a voluntary release (%d iterations each)", o.handovers),
			func(ctx context.Context) (err error) { rep.kfHandover, err = b.kfHandover(ctx); return },
			func(ctx context.Context) (err error) { rep.cgHandover, err = b.cgHandover(ctx); return }},
	} {
		fmt.Fprintln(os.Stderr, "bench:", p.says)
		var wg sync.WaitGroup
		var kfErr, cgErr error
		wg.Go(func() { kfErr = p.kf(ctx) })
		wg.Go(func() { cgErr = p.cg(ctx) })
		wg.Wait()
		if kfErr != nil || cgErr != nil {
			return fmt.Errorf("%s phase: kubefence: %v; client-go: %v", p.name, kfErr, cgErr)
		}
	}
	return nil
}

// environment describes where the numbers were taken.
type environment struct {
	serverVersion, cpuModel, loadStart string
	cpus                               int
}

// setup describes where the numbers are taken (testenv.Start made the admin
// client and the operator namespace).
func (b *bench) setup(ctx context.Context) (environment, error) {
	var env environment
	dc, err := discovery.NewDiscoveryClientForConfig(b.cfg)
	if err != nil {
		return env, err
	}
	if v, err := dc.ServerVersion(); err == nil {
		env.serverVersion = v.GitVersion
	}
	// A kube-apiserver built from source without version stamping reports
	// v0.0.0-master; the asset directory names the release.
	if env.serverVersion == "" || strings.Contains(env.serverVersion, "master") {
		env.serverVersion = fmt.Sprintf("%s (assets %s)", env.serverVersion, filepath.Base(os.Getenv("KUBEBUILDER_ASSETS")))
	}
	env.cpus, env.cpuModel = cpuInfo()
	env.loadStart = loadAverage()
	return env, nil
}

func (b *bench) createNamespace(ctx context.Context, name string) error {
	if err := b.admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}

// runController runs the kubefence controller manager (webhook mode), as the
// admin, with a transport that counts its writes; stopController stops it.
func (b *bench) runController(ctx context.Context) error {
	m, err := b.cluster.StartController(ctx, b.cluster.Operator(), func(cfg *rest.Config, _ *ctrl.Options) {
		cfg.WrapTransport = b.ctrlRT.wrap
	})
	if err != nil {
		return err
	}
	b.stopController = stopper("controller manager", m)
	syncCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !m.GetCache().WaitForCacheSync(syncCtx) {
		b.stopController()
		return errors.New("controller manager cache did not sync within 30s")
	}
	return nil
}

// stopper stops m within 30 s; an error it ends with is printed (what names
// it).
func stopper(what string, m *testenv.Manager) (stop func()) {
	return func() {
		if err := m.Stop(30 * time.Second); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %s: %v\n", what, err)
		}
	}
}

// waitFor polls cond every interval until it holds, it fails, or timeout.
func waitFor(ctx context.Context, timeout, interval time.Duration, what string, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		ok, err := cond(ctx)
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last error: %v)", what, ctx.Err(), last)
		case <-time.After(interval):
		}
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// tolerate counts a failed iteration of n, reporting it on stderr, and returns
// an error only when the run must stop: its context is done, or more than a
// quarter of the n iterations failed.
func tolerate(ctx context.Context, failures *int, n int, what string, i int, err error) error {
	if ctx.Err() != nil {
		return err
	}
	*failures++
	fmt.Fprintf(os.Stderr, "bench: %s %d: %v\n", what, i, err)
	if *failures > n/4 {
		return fmt.Errorf("too many failed iterations (%s): %w", what, err)
	}
	return nil
}
