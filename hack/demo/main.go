// Command demo plays the seeds' story on a real control plane, with real
// processes: etcd and kube-apiserver (started by envtest in a temporary
// directory), the kubefence operator (controller and webhooks, in this
// process), and two worker processes built from hack/demo/worker.
//
// Worker A holds the lease and writes a guarded Widget; it checks its lease,
// then freezes (SIGSTOP) before sending its next write. The controller expires
// it on its own clock and grants worker B a larger token; B writes. A is
// continued (SIGCONT) and sends its write with the old token: the API server
// refuses it, because the fencing webhook sees that the Widget has already
// accepted B's token. The demo prints the timeline, `kubectl get fencedleases`
// and the Widget, then stops everything it started and removes its files.
//
// Run it with `make demo` (which supplies kube-apiserver, etcd and kubectl
// through KUBEBUILDER_ASSETS); `make demo DEMO_ARGS=--keep` keeps the control
// plane and the workers running for kubectl until Ctrl-C.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// options configure a run of the demo.
type options struct {
	// keep keeps the control plane and the workers running after the story,
	// until ctx ends.
	keep bool
	// leaseSeconds is the FencedLease's leaseDurationSeconds.
	leaseSeconds int
	// interval is the time between a leading worker's writes.
	interval time.Duration
	// verbose also writes the operator's and envtest's logs to logs.
	verbose bool
	out     io.Writer
	logs    io.Writer
}

func main() {
	o := options{out: os.Stdout, logs: os.Stderr}
	flag.BoolVar(&o.keep, "keep", false,
		"Keep the control plane and the workers running after the story, print a kubeconfig for kubectl, and wait for Ctrl-C.")
	flag.IntVar(&o.leaseSeconds, "lease-seconds", 3, "leaseDurationSeconds of the demo's FencedLease.")
	flag.DurationVar(&o.interval, "interval", 400*time.Millisecond, "Time between a leading worker's writes.")
	flag.BoolVar(&o.verbose, "v", false, "Also print the operator's and envtest's logs on stderr.")
	flag.Parse()
	if o.leaseSeconds < 1 || o.interval <= 0 {
		fmt.Fprintln(os.Stderr, "demo: --lease-seconds must be at least 1 and --interval positive")
		os.Exit(2)
	}

	// Ctrl-C (or SIGTERM, or a closed terminal) ends the demo; it then stops
	// everything it started, which may take a few seconds. So does a reader
	// of its output that goes away (make demo | head): SIGPIPE would kill the
	// demo before it could clean up, so it is ignored and a failed write to
	// stdout ends the demo instead.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	signal.Ignore(syscall.SIGPIPE)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	o.out = &closedReaderGuard{w: os.Stdout, cancel: cancel}
	_, err := run(ctx, o)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		if cause := context.Cause(ctx); errors.Is(cause, errOutputClosed) {
			fmt.Fprintf(os.Stderr, "demo: %v\n", cause)
		} else {
			fmt.Fprintln(os.Stderr, "demo: interrupted")
		}
		stop()
		os.Exit(130)
	default:
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		stop()
		os.Exit(1)
	}
}

var setLoggerOnce sync.Once

// setUpLogging routes controller-runtime's logs (operator, envtest) through
// the refusal tap, and to o.logs when verbose.
func setUpLogging(o options) {
	setLoggerOnce.Do(func() {
		sink := &tapSink{}
		if o.verbose {
			sink.next = zap.New(zap.WriteTo(o.logs), zap.UseDevMode(true)).GetSink()
		}
		ctrl.SetLogger(logr.New(sink))
	})
}

// assetsDir is the directory of kube-apiserver, etcd and kubectl.
func assetsDir() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		return "", errors.New("KUBEBUILDER_ASSETS is unset: run `make demo`, which supplies kube-apiserver, etcd and kubectl " +
			"(or set KUBEBUILDER_ASSETS=\"$(./hack/setup-envtest.sh | tail -n1)\")")
	}
	for _, b := range []string{"kube-apiserver", "etcd", "kubectl"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("KUBEBUILDER_ASSETS=%s has no %s: run `make demo`, which supplies it", dir, b)
		}
	}
	return dir, nil
}

// errOutputClosed ends the demo when nobody reads its output any more.
var errOutputClosed = errors.New("stopped: the reader of the output went away")

// closedReaderGuard writes to w and cancels the demo once a write fails.
type closedReaderGuard struct {
	w      io.Writer
	cancel context.CancelCauseFunc
}

func (g *closedReaderGuard) Write(p []byte) (int, error) {
	n, err := g.w.Write(p)
	if err != nil {
		g.cancel(fmt.Errorf("%w (%v)", errOutputClosed, err))
	}
	return n, err
}
