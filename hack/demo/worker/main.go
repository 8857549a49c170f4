// Command worker is one worker process of the kubefence demo. It competes for
// a FencedLease with the client helper (pkg/fence) and, while it holds the
// lease, appends "<identity>@<token>" to a guarded Widget's spec.entries every
// interval. It reports what happens as JSON lines on stdout (hack/demo/internal/event).
//
// Each write follows the pattern the seeds warn about: check the lease (take
// the current token), then read, modify and write the object with that token.
// With --pause-before-write N the worker stops itself with SIGSTOP between the
// check and the send of its Nth write, like a process frozen by a long GC or a
// suspended VM; once continued (SIGCONT) it sends the write it prepared, with
// the token it took before the pause. Only the API server, through the
// kubefence fencing webhook, can then refuse it.
//
//	worker --kubeconfig k.yaml --namespace demo --lease job-a --identity worker-a --object report
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubefence/kubefence/hack/demo/internal/event"
	"github.com/kubefence/kubefence/hack/devenv"
	"github.com/kubefence/kubefence/hack/worker"
	"github.com/kubefence/kubefence/pkg/fence"
)

type options struct {
	kubeconfig, namespace, lease, identity, object string
	interval                                       time.Duration
	maxWrites, pauseBeforeWrite                    int
	exitOnStdinEOF                                 bool
}

func main() {
	var o options
	flag.StringVar(&o.namespace, "namespace", "demo", "Namespace of the FencedLease and the Widget.")
	flag.StringVar(&o.lease, "lease", "job-a", "Name of the FencedLease.")
	flag.StringVar(&o.identity, "identity", "", "Holder identity of this worker. Required.")
	flag.StringVar(&o.object, "object", "report", "Name of the guarded Widget this worker writes.")
	flag.DurationVar(&o.interval, "interval", 400*time.Millisecond, "Time between writes while leading.")
	flag.IntVar(&o.maxWrites, "max-writes", 0, "Write at most this many times per tenure (then just hold the lease); 0: no limit.")
	flag.IntVar(&o.pauseBeforeWrite, "pause-before-write", 0,
		"Stop this process with SIGSTOP after checking the lease for its Nth write (counted over all tenures) and before sending it; 0: never.")
	flag.BoolVar(&o.exitOnStdinEOF, "exit-on-stdin-eof", false, "Exit when stdin closes (the demo's life line).")
	o.kubeconfig = worker.ParseFlags()

	if o.kubeconfig == "" || o.identity == "" {
		fmt.Fprintln(os.Stderr, "worker: --kubeconfig and --identity are required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.exitOnStdinEOF {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			cancel()
		}()
	}
	out := &reporter{identity: o.identity, enc: json.NewEncoder(os.Stdout)}
	out.emit(event.Event{Kind: event.Started, PID: os.Getpid()})
	err := run(ctx, o, out)
	ex := event.Event{Kind: event.Exited}
	if err != nil {
		ex.Message = err.Error()
	}
	out.emit(ex)
	if err != nil {
		os.Exit(1)
	}
}

// reporter prints events as JSON lines; it is safe for concurrent use.
type reporter struct {
	identity string
	mu       sync.Mutex
	enc      *json.Encoder
}

func (r *reporter) emit(ev event.Event) {
	ev.Time = time.Now()
	ev.Identity = r.identity
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.enc.Encode(ev)
}

func run(ctx context.Context, o options, out *reporter) error {
	c, err := worker.NewClient(o.kubeconfig, nil)
	if err != nil {
		return err
	}

	w := &writer{o: o, c: c, out: out}
	elector, err := fence.New(fence.Config{
		Client: c, Namespace: o.namespace, Name: o.lease, Identity: o.identity,
		Callbacks: fence.Callbacks{
			OnStartedLeading: func(leadCtx context.Context, token int64) {
				out.emit(event.Event{Kind: event.Granted, Token: token})
				w.lead(ctx, leadCtx)
			},
			OnStoppedLeading: func(token int64) {
				reason := "lost"
				if ctx.Err() != nil {
					reason = "released"
				}
				out.emit(event.Event{Kind: event.StoppedLeading, Token: token, Reason: reason})
			},
			OnNewHolder: func(holder string, token int64) {
				if holder != o.identity {
					out.emit(event.Event{Kind: event.Holder, Holder: holder, Token: token})
				}
			},
		},
	})
	if err != nil {
		return err
	}
	w.elector = elector
	return elector.Run(ctx)
}

// writer does the work of one holder: it writes the Widget while leading.
type writer struct {
	o       options
	c       client.Client
	out     *reporter
	elector *fence.Elector

	mu       sync.Mutex
	attempts int // over all tenures
}

// lead writes every interval until the tenure ends. Writes are sent with the
// process's context, not the tenure's: a write that is on its way when the
// tenure ends (or, here, when the process freezes) is not called back, just
// like in a real process.
func (w *writer) lead(procCtx, leadCtx context.Context) {
	tick := time.NewTicker(w.o.interval)
	defer tick.Stop()
	for n := 0; ; n++ {
		if (w.o.maxWrites == 0 || n < w.o.maxWrites) && !w.writeOnce(procCtx) {
			return
		}
		select {
		case <-leadCtx.Done():
			return
		case <-tick.C:
		}
	}
}

// writeOnce checks the lease, then writes with the token it found. It reports
// false when the worker should stop writing in this tenure.
func (w *writer) writeOnce(ctx context.Context) bool {
	token, leading := w.elector.Token() // the check
	if !leading {
		return false
	}
	w.mu.Lock()
	w.attempts++
	n := w.attempts
	w.mu.Unlock()

	if n == w.o.pauseBeforeWrite {
		w.out.emit(event.Event{Kind: event.Pausing, Token: token, Write: n})
		frozen := time.Now()
		if err := stopSelf(); err != nil {
			w.out.emit(event.Event{Kind: event.Failed, Token: token, Write: n, Message: "SIGSTOP: " + err.Error()})
		}
		w.out.emit(event.Event{Kind: event.Resumed, Token: token, Write: n, PausedMillis: time.Since(frozen).Milliseconds()})
	}

	// The token was taken before any pause: this client stamps exactly that
	// token, without asking the elector again, so the API server decides.
	fc := fence.NewFencedClient(w.c, w.o.lease, devenv.FixedToken(token), fence.ClientConfig{OnStale: func(error) { w.elector.StepDown() }})
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	entries, created, err := w.appendEntry(wctx, fc, fmt.Sprintf("%s@%d", w.o.identity, token))
	switch {
	case err == nil:
		w.out.emit(event.Event{Kind: event.Wrote, Token: token, Write: n, Entries: entries, Created: created})
		return true
	case fence.IsStale(err):
		ev := event.Event{Kind: event.Refused, Token: token, Write: n, Message: err.Error()}
		var st apierrors.APIStatus
		if errors.As(err, &st) {
			ev.Code, ev.Reason, ev.Message = st.Status().Code, string(st.Status().Reason), st.Status().Message
		}
		w.out.emit(ev)
		return false
	default:
		w.out.emit(event.Event{Kind: event.Failed, Token: token, Write: n, Message: err.Error()})
		return ctx.Err() == nil
	}
}

// appendEntry reads the Widget and writes it back with entry appended and
// spec.writer set, creating it on first use. An optimistic-concurrency
// conflict (not a fencing refusal) is retried with a fresh read.
func (w *writer) appendEntry(ctx context.Context, fc *fence.FencedClient, entry string) ([]string, bool, error) {
	key := types.NamespacedName{Namespace: w.o.namespace, Name: w.o.object}
	for {
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(devenv.WidgetGVK)
		err := w.c.Get(ctx, key, obj)
		created := apierrors.IsNotFound(err)
		if err != nil && !created {
			return nil, false, fmt.Errorf("reading widget %s: %w", key, err)
		}
		if created {
			obj.SetNamespace(key.Namespace)
			obj.SetName(key.Name)
		}
		entries, _, _ := unstructured.NestedStringSlice(obj.Object, "spec", "entries")
		entries = append(entries, entry)
		if err := unstructured.SetNestedStringSlice(obj.Object, entries, "spec", "entries"); err != nil {
			return nil, false, err
		}
		if err := unstructured.SetNestedField(obj.Object, w.o.identity, "spec", "writer"); err != nil {
			return nil, false, err
		}
		if created {
			err = fc.Create(ctx, obj)
		} else {
			err = fc.Update(ctx, obj)
		}
		if err == nil {
			return entries, created, nil
		}
		if fence.IsStale(err) || !(apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)) || ctx.Err() != nil {
			return nil, false, err
		}
	}
}

// stopSelf stops the whole process with SIGSTOP and returns once it is
// continued. The signal is sent to the calling thread: a signal sent to the
// process may be taken by another thread, and this one would run on for a
// moment before the process stops.
func stopSelf() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
}
