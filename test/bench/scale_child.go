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
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kubefence/kubefence/pkg/fence"
	"github.com/kubefence/kubefence/test/testenv"
)

const scaleChildEnv = "KUBEFENCE_BENCH_SCALE_CHILD"

func init() {
	if os.Getenv(scaleChildEnv) != "" {
		os.Exit(scaleChild(os.Args[1:]))
	}
}

// childCounter counts one process's API requests and the round trips of its
// successful writes.
type childCounter struct {
	writes, completed, failed, reads atomic.Int64
	mu                               sync.Mutex
	lat                              []latSample // not yet reported
}

// latSample is one successful write: when it was sent and its round trip.
type latSample struct {
	sent time.Time
	d    time.Duration
}

// take returns the samples not reported yet.
func (c *childCounter) take() []latSample {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.lat
	c.lat = nil
	return out
}

func (c *childCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper{next: rt, fn: func(next http.RoundTripper, req *http.Request) (*http.Response, error) {
		write := isWrite(req.Method)
		if write {
			c.writes.Add(1)
		} else if !isWatch(req) {
			c.reads.Add(1)
		}
		sent := time.Now()
		resp, err := next.RoundTrip(req)
		if write {
			if err == nil && resp.StatusCode < 300 {
				c.completed.Add(1)
				c.mu.Lock()
				c.lat = append(c.lat, latSample{sent: sent, d: time.Since(sent)})
				c.mu.Unlock()
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
	leasesFile := fs.String("leases", "", "file of ns/name lines, one elector each")
	id := fs.String("id", "", "identity prefix")
	user := fs.String("user", "", "the identity's username (kf)")
	leaseSeconds := fs.Int("lease", 15, "lease duration (cg)")
	retry := fs.Duration("retry", 2*time.Second, "client-go RetryPeriod (cg)")
	renewDeadline := fs.Duration("renew-deadline", 10*time.Second, "client-go RenewDeadline (cg)")
	workers := fs.Int("workers", 64, "writers (load)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	logf.SetLogger(logr.Discard())
	klog.SetLogger(logr.Discard())
	raw, err := os.ReadFile(*kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(raw)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	cfg.QPS, cfg.Burst = -1, 0 // no client-side throttling: one process, many electors
	var counter childCounter
	cfg.WrapTransport = counter.wrap
	data, err := os.ReadFile(*leasesFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	leases := strings.Fields(string(data))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	out := bufio.NewWriter(os.Stdout)
	var outMu sync.Mutex
	emit := func(format string, a ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(out, format+"\n", a...)
		_ = out.Flush()
	}

	var wg sync.WaitGroup
	// each starts one elector per lease with start, which returns its loop.
	each := func(start func(i int, key, ns, name string, started time.Time) (func(), error)) error {
		for i, key := range leases {
			ns, name, _ := strings.Cut(key, "/")
			run, err := start(i, key, ns, name, time.Now())
			if err != nil {
				return err
			}
			wg.Go(run)
		}
		return nil
	}
	switch *kind {
	case "kf":
		err = childKubefence(ctx, cfg, each, emit, *id, *user)
	case "cg":
		err = childClientGo(ctx, cfg, each, emit, *id, time.Duration(*leaseSeconds)*time.Second, *renewDeadline, *retry)
	case "load":
		var cs kubernetes.Interface
		if cs, err = kubernetes.NewForConfig(cfg); err == nil {
			// The namespace is the first line of -leases.
			for i := range *workers {
				wg.Go(func() { loadWriter(ctx, cs, leases[0], fmt.Sprintf("%s-%d", *id, i)) })
			}
		}
	default:
		fmt.Fprintln(os.Stderr, "child: unknown -kind", *kind)
		return 2
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	report := func() {
		if *kind != "load" {
			for _, l := range counter.take() {
				emit("lat %d %d", l.sent.UnixNano(), l.d.Nanoseconds())
			}
		}
		emit("count %d %d %d %d", counter.writes.Load(), counter.completed.Load(), counter.failed.Load(), counter.reads.Load())
	}
	for {
		select {
		case <-tick.C:
			report()
		case <-ctx.Done():
			wg.Wait()
			report()
			emit("done")
			return 0
		}
	}
}

// electorStarter is the child's each: it starts one elector per lease.
type electorStarter func(start func(i int, key, ns, name string, started time.Time) (func(), error)) error

// childKubefence starts a pkg/fence elector per lease; each reports "lead"
// when it leads, with its token.
func childKubefence(ctx context.Context, cfg *rest.Config, each electorStarter, emit func(string, ...any), id, user string) error {
	cl, err := client.NewWithWatch(cfg, client.Options{Scheme: testenv.NewScheme()})
	if err != nil {
		return err
	}
	return each(func(i int, key, ns, name string, started time.Time) (func(), error) {
		el, err := fence.New(fence.Config{
			Client: cl, Namespace: ns, Name: name, Identity: fmt.Sprintf("%s-%d", id, i), User: user,
			Callbacks: fence.Callbacks{OnStartedLeading: func(ctx context.Context, token int64) {
				emit("lead %s %d %d %d", key, started.UnixNano(), time.Now().UnixNano(), token)
				<-ctx.Done()
			}},
		})
		if err != nil {
			return nil, err
		}
		return func() { _ = el.Run(ctx) }, nil
	})
}

// childClientGo starts a client-go leader elector on a Lease per lease; each
// reports "lead" when it leads (token 0).
func childClientGo(ctx context.Context, cfg *rest.Config, each electorStarter, emit func(string, ...any), id string, lease, renewDeadline, retry time.Duration) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return each(func(i int, key, ns, name string, started time.Time) (func(), error) {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: &resourcelock.LeaseLock{
				LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: name},
				Client:     cs.CoordinationV1(),
				LockConfig: resourcelock.ResourceLockConfig{Identity: fmt.Sprintf("%s-%d", id, i)},
			},
			LeaseDuration: lease, RenewDeadline: renewDeadline, RetryPeriod: retry,
			ReleaseOnCancel: true, Name: name,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) {
					emit("lead %s %d %d 0", key, started.UnixNano(), time.Now().UnixNano())
				},
				OnStoppedLeading: func() {},
			},
		})
		if err != nil {
			return nil, err
		}
		return func() { le.Run(ctx) }, nil
	})
}

// loadWriter writes one ConfigMap of its own in namespace ns, as fast as the
// API server takes it, until ctx ends: the load that saturates the API server
// while holders renew.
func loadWriter(ctx context.Context, cs kubernetes.Interface, ns, name string) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"v": strings.Repeat("x", 1024)}}
	for ctx.Err() == nil {
		var err error
		if cm.ResourceVersion == "" {
			cm, err = cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
		} else {
			cm.Data["n"] = fmt.Sprint(time.Now().UnixNano())
			cm, err = cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
		}
		if err != nil {
			// Throttled or refused: read it afresh and go on.
			if got, gerr := cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{}); gerr == nil {
				cm = got
			} else {
				cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"v": strings.Repeat("x", 1024)}}
			}
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
	}
}

// scaleProc is one holder process as the benchmark sees it.
type scaleProc struct {
	name string
	cmd  *exec.Cmd

	mu        sync.Mutex
	counts    [4]int64 // writes, completed, failed, reads
	leads     map[string][]leadEvent
	latencies []latSample
	done      chan struct{}
}

type leadEvent struct {
	started, leading time.Time
	token            int64
}

// startProc runs a holder process: kind "kf" or "cg", one elector per lease
// in leases, as the identity of kubeconfig.
func (b *bench) startProc(ctx context.Context, s *scaleRun, name, kind string, leases []string, extra ...string) (*scaleProc, error) {
	file := filepath.Join(s.dir, name+".leases")
	if err := os.WriteFile(file, []byte(strings.Join(leases, "\n")+"\n"), 0o600); err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := append([]string{"-kind", kind, "-kubeconfig", s.kubeconfig, "-leases", file, "-id", name, "-user", scaleHolderUser,
		"-lease", fmt.Sprint(b.opts.leaseSeconds)}, extra...)
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(os.Environ(), scaleChildEnv+"=1")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p := &scaleProc{name: name, cmd: cmd, leads: map[string][]leadEvent{}, done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 0 {
				continue
			}
			p.mu.Lock()
			switch f[0] {
			case "lead":
				if len(f) == 5 {
					var st, ld, tok int64
					if _, err := fmt.Sscan(strings.Join(f[2:5], " "), &st, &ld, &tok); err != nil {
						fmt.Fprintf(os.Stderr, "bench: holder process sent a malformed lead line %q: %v\n", sc.Text(), err)
						break
					}
					p.leads[f[1]] = append(p.leads[f[1]], leadEvent{started: time.Unix(0, st), leading: time.Unix(0, ld), token: tok})
				}
			case "count":
				for i := 0; i < 4 && i+1 < len(f); i++ {
					if _, err := fmt.Sscan(f[i+1], &p.counts[i]); err != nil {
						fmt.Fprintf(os.Stderr, "bench: holder process sent a malformed count line %q: %v\n", sc.Text(), err)
					}
				}
			case "lat":
				var sent, d int64
				if len(f) != 3 {
					fmt.Fprintf(os.Stderr, "bench: holder process sent a malformed lat line %q\n", sc.Text())
					break
				}
				if _, err := fmt.Sscan(f[1]+" "+f[2], &sent, &d); err != nil {
					fmt.Fprintf(os.Stderr, "bench: holder process sent a malformed lat line %q: %v\n", sc.Text(), err)
					break
				}
				p.latencies = append(p.latencies, latSample{sent: time.Unix(0, sent), d: time.Duration(d)})
			}
			p.mu.Unlock()
		}
		_ = cmd.Wait()
	}()
	return p, nil
}

func (p *scaleProc) pid() int { return p.cmd.Process.Pid }

func (p *scaleProc) snapshot() [4]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts
}

// leading returns, per lease, its tenures started in this process so far.
func (p *scaleProc) leading() map[string][]leadEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string][]leadEvent, len(p.leads))
	for k, v := range p.leads {
		out[k] = append([]leadEvent(nil), v...)
	}
	return out
}

// writeLatencies returns the round trips of the successful writes sent in
// [from, to).
func (p *scaleProc) writeLatencies(from, to time.Time) []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []time.Duration
	for _, l := range p.latencies {
		if !l.sent.Before(from) && l.sent.Before(to) {
			out = append(out, l.d)
		}
	}
	return out
}

// kill ends the process at once (SIGKILL): its electors renew no more and
// release nothing.
func (p *scaleProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// stop ends the process gracefully (SIGTERM: electors release) and waits.
func (p *scaleProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.kill()
	}
}
