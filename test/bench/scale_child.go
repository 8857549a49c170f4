package main

// The holder processes of the scale benchmark (-only=scale): the bench binary
// re-executed with scaleChildEnv set runs many electors (kubefence or
// client-go) over one API connection, as one workload process would, and
// reports on stdout. Separate processes make their CPU attributable apart
// from the operator (which runs in the bench process) and let the benchmark
// kill a holder for real (SIGKILL).

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kubefence/kubefence/hack/devenv"
	"github.com/kubefence/kubefence/pkg/fence"
)

const scaleChildEnv = "KUBEFENCE_BENCH_SCALE_CHILD"

func init() {
	if os.Getenv(scaleChildEnv) != "" {
		os.Exit(scaleChild(os.Args[1:]))
	}
}

// childCounter counts one process's API writes.
type childCounter struct{ writes, completed, failed atomic.Int64 }

func (c *childCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper{next: rt, fn: func(next http.RoundTripper, req *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		if isWrite(req.Method) {
			c.writes.Add(1)
			if err == nil && resp.StatusCode < 300 {
				c.completed.Add(1)
			} else {
				c.failed.Add(1)
			}
		}
		return resp, err
	}}
}

func scaleChild(args []string) int {
	fs := flag.NewFlagSet("scale-child", flag.ContinueOnError)
	kind := fs.String("kind", "kf", "kf (pkg/fence electors on FencedLeases) or cg (client-go leader election on Leases)")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the holder identity")
	leases := fs.String("leases", "", "ns/name of the leases, separated by commas: one elector each")
	id := fs.String("id", "", "identity prefix")
	user := fs.String("user", "", "the identity's username (kf)")
	lease := fs.Duration("lease", 15*time.Second, "lease duration (cg)")
	retry := fs.Duration("retry", 2*time.Second, "client-go RetryPeriod (cg)")
	renewDeadline := fs.Duration("renew-deadline", 10*time.Second, "client-go RenewDeadline (cg)")
	heartbeat := fs.String("heartbeat", "", "kf: renew on heartbeat Leases, one per lease (lease) or one for the process (session, all electors under the identity -id); empty: FencedLease patches")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	logf.SetLogger(logr.Discard())
	klog.SetLogger(logr.Discard())
	if err := runChild(*kind, *heartbeat, *kubeconfig, *leases, *id, *user, *lease, *retry, *renewDeadline); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

// runChild runs one elector per lease until SIGTERM. It reports on stdout
// "lead <key> <leading>" (Unix ns) when an elector leads, and
// every 500 ms "count <writes> <completed> <failed> <cpu ns>".
func runChild(kind, heartbeat, kubeconfig, leases, id, user string, lease, retry, renewDeadline time.Duration) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = -1, 0 // no client-side throttling: one process, many electors
	var counter childCounter
	cfg.WrapTransport = counter.wrap
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var outMu sync.Mutex
	emit := func(format string, a ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Printf(format+"\n", a...)
	}
	// elector returns the loop of elector i on ns/name, which calls lead
	// when it leads.
	var elector func(i int, ns, name string, lead func()) (func(), error)
	switch kind {
	case "kf":
		cl, err := client.NewWithWatch(cfg, client.Options{Scheme: devenv.NewScheme()})
		if err != nil {
			return err
		}
		var session *fence.Session // one per namespace
		elector = func(i int, ns, name string, lead func()) (func(), error) {
			c := fence.Config{
				Client: cl, Namespace: ns, Name: name, Identity: fmt.Sprintf("%s-%d", id, i), User: user,
				Callbacks: fence.Callbacks{OnStartedLeading: func(ctx context.Context, _ int64) { lead(); <-ctx.Done() }},
			}
			switch heartbeat {
			case "":
			case "lease":
				c.Heartbeat = &fence.Heartbeat{}
			case "session":
				if session == nil || session.Namespace != ns {
					session = fence.NewSession(cl, ns, id+"-session", id)
				}
				c.Identity, c.Heartbeat = id, &fence.Heartbeat{Session: session}
			default:
				return nil, fmt.Errorf("unknown -heartbeat %q: want lease, session or empty", heartbeat)
			}
			el, err := fence.New(c)
			return func() { _ = el.Run(ctx) }, err
		}
	case "cg":
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		elector = func(i int, ns, name string, lead func()) (func(), error) {
			le, err := cgElector(cs, ns, name, fmt.Sprintf("%s-%d", id, i), lease, renewDeadline, retry, func(context.Context) { lead() })
			return func() { le.Run(ctx) }, err
		}
	default:
		return fmt.Errorf("unknown -kind %q", kind)
	}
	var wg sync.WaitGroup
	for i, key := range strings.Split(leases, ",") {
		ns, name, _ := strings.Cut(key, "/")
		run, err := elector(i, ns, name, func() { emit("lead %s %d", key, time.Now().UnixNano()) })
		if err != nil {
			return err
		}
		wg.Go(run)
	}
	report := func() {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		emit("count %d %d %d %d", counter.writes.Load(), counter.completed.Load(), counter.failed.Load(), ru.Utime.Nano()+ru.Stime.Nano())
	}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			report()
		case <-ctx.Done():
			wg.Wait()
			report()
			return nil
		}
	}
}

// scaleProc is one holder process as the benchmark sees it.
type scaleProc struct {
	*devenv.Proc // SIGKILL if the bench dies
	mu           sync.Mutex
	last         procCounts             // as last reported
	leads        map[string][]time.Time // per lease, when each tenure started
}

// procCounts is what a holder process reports: its API writes (sent,
// succeeded, failed) and its CPU time.
type procCounts struct {
	writes, completed, failed int64
	cpu                       time.Duration
}

// startProc runs a holder process: kind "kf" or "cg", one elector per lease
// in leases, as the holders' identity.
func (b *bench) startProc(ctx context.Context, s *scaleRun, name, kind string, leases []string, extra ...string) (*scaleProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := append([]string{"-kind", kind, "-kubeconfig", s.kubeconfig, "-leases", strings.Join(leases, ","), "-id", name, "-user", scaleHolderUser,
		"-lease", b.lease.String()}, extra...)
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(os.Environ(), scaleChildEnv+"=1")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p := &scaleProc{leads: map[string][]time.Time{}}
	if p.Proc, err = devenv.StartProc(name, cmd); err != nil {
		return nil, err
	}
	s.procs = append(s.procs, p)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 0 {
				continue
			}
			p.mu.Lock()
			var err error
			switch f[0] {
			case "lead": // lead <key> <leading> (Unix ns)
				var ld int64
				if _, err = fmt.Sscan(strings.Join(f[2:], " "), &ld); err == nil {
					p.leads[f[1]] = append(p.leads[f[1]], time.Unix(0, ld))
				}
			case "count": // count <writes> <completed> <failed> <cpu ns>
				c := &p.last
				_, err = fmt.Sscan(strings.Join(f[1:], " "), &c.writes, &c.completed, &c.failed, &c.cpu)
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "bench: holder process sent a malformed line %q: %v\n", sc.Text(), err)
			}
			p.mu.Unlock()
		}
	}()
	return p, nil
}

// snapshot is what the process last reported.
func (p *scaleProc) snapshot() procCounts {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// leading returns, per lease, its tenures started in this process so far.
func (p *scaleProc) leading() map[string][]time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string][]time.Time, len(p.leads))
	for k, v := range p.leads {
		out[k] = slices.Clone(v)
	}
	return out
}
