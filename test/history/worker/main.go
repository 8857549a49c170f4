// Command worker is one worker process of the kubefence history test
// (test/history). It competes for several FencedLeases with the client helper
// (pkg/fence) and, while it leads one, appends "<worker>:<token>:<seq>" to
// spec.entries of the Widgets guarded by that lease, through a
// fence.FencedClient: read the Widget, then update it with the value appended
// and the read's resourceVersion as precondition (a create when it does not
// exist yet). A conflict is re-read and retried; every attempt is a new value.
//
// After a tenure ends (it releases the lease at random, or loses it), the
// worker may keep writing with its last token for a while: a stale holder,
// whose writes only the fencing webhook can refuse.
//
// Each lease guards --objects-per-lease slots; a slot is a chain of Widgets
// "<lease>-<slot>-<segment>", and a writer moves to the next segment once one
// holds --segment-cap entries, so that no object grows without bound.
//
// Every attempt is a JSON line on stdout (test/history/checker.Record):
// reads and appends with their token, value, outcome, and invoke and complete
// times in nanoseconds since --start (wall clock); an append is announced by
// an "invoke" line before it is sent, so that one in flight when the process
// is killed is known. SIGTERM stops new attempts and waits for those in flight.
//
//	worker --kubeconfig k.yaml --namespace history --leases job-a,job-b --identity w1 --start 1700000000000000000
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubefence/kubefence/hack/devenv"
	workercore "github.com/kubefence/kubefence/hack/worker"
	"github.com/kubefence/kubefence/pkg/fence"
	"github.com/kubefence/kubefence/test/history/checker"
)

type options struct {
	kubeconfig, namespace, identity, user string
	leases                                []string
	objectsPerLease, segmentCap           int
	start                                 int64
	seqStart                              int64
	seed                                  int64
	writeTimeout, interval                time.Duration
	minTenure, maxTenure                  time.Duration
	staleProbability                      float64
	maxStaleWrites                        int
	// heartbeat: "" renews by request patches, "lease" by a heartbeat Lease
	// per lease, "session" by one heartbeat Lease for all of this worker's
	// leases (docs/design.md, "Heartbeats").
	heartbeat string
}

func main() {
	var o options
	var leases string
	flag.StringVar(&o.namespace, "namespace", "history", "Namespace of the FencedLeases and Widgets.")
	flag.StringVar(&leases, "leases", "", "Comma-separated FencedLease names to compete for. Required.")
	flag.StringVar(&o.identity, "identity", "", "Holder identity (and the <worker> of every value). Required.")
	flag.StringVar(&o.user, "user", "", "This worker's username (skips asking the API server).")
	flag.StringVar(&o.heartbeat, "heartbeat", "", `How to renew: "" (request patches), "lease" (a heartbeat Lease per lease) or "session" (one heartbeat Lease for every lease of this worker).`)
	flag.IntVar(&o.objectsPerLease, "objects-per-lease", 2, "Widget slots guarded by each lease.")
	flag.IntVar(&o.segmentCap, "segment-cap", 250, "Entries per Widget before writers move to the slot's next segment.")
	flag.Int64Var(&o.start, "start", 0, "The run's shared start, Unix nanoseconds: times are logged relative to it. Required.")
	flag.Int64Var(&o.seqStart, "seq-start", 0, "First sequence number (distinct per incarnation, so values stay unique).")
	flag.Int64Var(&o.seed, "seed", 1, "Seed of this worker's random choices.")
	flag.DurationVar(&o.writeTimeout, "write-timeout", time.Second, "Client-side timeout of one read or write (short, so that held traffic makes answers go missing).")
	flag.DurationVar(&o.interval, "interval", 15*time.Millisecond, "Pause between writes (jittered).")
	flag.DurationVar(&o.minTenure, "min-tenure", 300*time.Millisecond, "Shortest time a holder writes before releasing.")
	flag.DurationVar(&o.maxTenure, "max-tenure", 3*time.Second, "Longest time a holder writes before releasing.")
	flag.Float64Var(&o.staleProbability, "stale-probability", 0.6, "Probability that a tenure is followed by stale writes.")
	flag.IntVar(&o.maxStaleWrites, "max-stale-writes", 5, "Most stale writes after one tenure.")
	o.kubeconfig = workercore.ParseFlags() // this worker's user
	for _, l := range strings.Split(leases, ",") {
		if l = strings.TrimSpace(l); l != "" {
			o.leases = append(o.leases, l)
		}
	}
	if o.kubeconfig == "" || o.identity == "" || len(o.leases) == 0 || o.start == 0 {
		fmt.Fprintln(os.Stderr, "worker: --kubeconfig, --identity, --leases and --start are required")
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

// logger writes records as JSON lines, one write per line, straight to the
// file descriptor (no buffer that a kill -9 would lose).
type logger struct {
	mu     sync.Mutex
	worker string
	start  int64
}

func (l *logger) now() int64 { return time.Now().UnixNano() - l.start }

func (l *logger) write(r checker.Record) {
	r.Worker = l.worker
	b, err := json.Marshal(r)
	if err != nil {
		panic(err)
	}
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = os.Stdout.Write(b)
}

func (l *logger) event(name, lease string, token int64, msg string) {
	l.write(checker.Record{Type: checker.TypeEvent, Event: name, Lease: lease, Token: token, Invoke: l.now(), Msg: msg})
}

type worker struct {
	o   options
	c   client.WithWatch
	log *logger

	// stopping: no new attempts; inflight counts attempts under way.
	stopping chan struct{}
	inflight sync.WaitGroup

	mu  sync.Mutex
	seq int64
	rnd *rand.Rand
	// segment is the current segment of each "<lease>-<slot>".
	segment map[string]int
}

func run(o options) error {
	c, err := workercore.NewClient(o.kubeconfig, func(cfg *rest.Config) {
		// No client-side rate limit: the API server and the faults decide the pace.
		cfg.QPS, cfg.Burst = 1000, 2000
		// Short dial and TLS timeouts, so that a partition shows as errors promptly.
		cfg.Dial = (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 5 * time.Second}).DialContext
		cfg.Timeout = 0
	})
	if err != nil {
		return err
	}
	w := &worker{o: o, c: c, log: &logger{worker: o.identity, start: o.start}, stopping: make(chan struct{}),
		seq: o.seqStart, rnd: rand.New(rand.NewSource(o.seed)), segment: map[string]int{}}
	w.log.event("started", "", 0, fmt.Sprintf("pid %d", os.Getpid()))

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var hb *fence.Heartbeat
	switch o.heartbeat {
	case "":
	case "lease":
		hb = &fence.Heartbeat{}
	case "session":
		hb = &fence.Heartbeat{Session: fence.NewSession(c, o.namespace, o.identity+"-session", o.identity)}
	default:
		return fmt.Errorf("--heartbeat=%q: expected \"\", \"lease\" or \"session\"", o.heartbeat)
	}
	var electors sync.WaitGroup
	for _, lease := range o.leases {
		lw := &leaseWorker{w: w, lease: lease}
		e, err := fence.New(fence.Config{
			Client: c, Namespace: o.namespace, Name: lease, Identity: o.identity, User: o.user, Heartbeat: hb,
			Callbacks: fence.Callbacks{
				OnStartedLeading: lw.lead,
				OnStoppedLeading: func(token int64) { w.log.event("stopped", lease, token, "") },
			},
		})
		if err != nil {
			return err
		}
		lw.elector = e
		electors.Add(1)
		go func() {
			defer electors.Done()
			for ctx.Err() == nil {
				if err := e.Run(ctx); err != nil && ctx.Err() == nil {
					w.log.event("elector-error", lease, 0, err.Error())
					time.Sleep(500 * time.Millisecond)
				}
			}
		}()
	}

	<-sigs
	w.log.event("exiting", "", 0, "")
	close(w.stopping)
	w.inflight.Wait()
	// Withdraw the requests (bounded: the API server may be unreachable).
	cancel()
	done := make(chan struct{})
	go func() { electors.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	return nil
}

func (w *worker) stopped() bool {
	select {
	case <-w.stopping:
		return true
	default:
		return false
	}
}

func (w *worker) random(f func(r *rand.Rand) float64) float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return f(w.rnd)
}

func (w *worker) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(w.random(func(r *rand.Rand) float64 { return r.Float64() })*float64(hi-lo))
}

func (w *worker) nextSeq() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seq++
	return w.seq
}

// leaseWorker is the work done under one lease.
type leaseWorker struct {
	w       *worker
	lease   string
	elector *fence.Elector
}

// lead runs one tenure: write while the elector says this worker leads, until
// a random tenure length passes (then release), and then, sometimes, go on
// writing as a stale holder with the same token.
func (lw *leaseWorker) lead(ctx context.Context, token int64) {
	w := lw.w
	w.log.event("granted", lw.lease, token, "")
	tenureEnd := time.Now().Add(w.between(w.o.minTenure, w.o.maxTenure))
	// Honest: each write takes the token from the elector first (the check),
	// and a stale refusal makes the elector step down.
	fc := fence.NewFencedClient(w.c, lw.lease, devenv.FixedToken(token), fence.ClientConfig{OnStale: func(error) { lw.elector.StepDown() }})
	for ctx.Err() == nil && !w.stopped() {
		if time.Now().After(tenureEnd) {
			rctx, cancel := context.WithTimeout(context.Background(), w.o.writeTimeout)
			_ = lw.elector.Release(rctx)
			cancel()
			break
		}
		if t, ok := lw.elector.Token(); !ok || t != token {
			break
		}
		lw.write(fc, token, "leader")
		lw.pause()
	}
	// Stale: keep the old token, as a process that missed the end of its tenure.
	if w.random(func(r *rand.Rand) float64 { return r.Float64() }) >= w.o.staleProbability {
		return
	}
	n := 1 + int(w.random(func(r *rand.Rand) float64 { return float64(r.Intn(w.o.maxStaleWrites)) }))
	stale := fence.NewFencedClient(w.c, lw.lease, devenv.FixedToken(token))
	for i := 0; i < n && !w.stopped(); i++ {
		time.Sleep(w.between(0, 150*time.Millisecond))
		lw.write(stale, token, "stale")
	}
}

func (lw *leaseWorker) pause() {
	time.Sleep(lw.w.between(lw.w.o.interval/2, lw.w.o.interval*3/2))
}

// write appends one value to a random slot of this lease: read, then update
// with the read's resourceVersion (or create), retrying conflicts with a
// fresh read. Every read and every append is logged.
func (lw *leaseWorker) write(fc *fence.FencedClient, token int64, phase string) {
	w := lw.w
	w.inflight.Add(1)
	defer w.inflight.Done()
	slot := int(w.random(func(r *rand.Rand) float64 { return float64(r.Intn(w.o.objectsPerLease)) }))
	slotKey := fmt.Sprintf("%s-%d", lw.lease, slot)
	for attempt := 0; attempt < 8 && !w.stopped(); attempt++ {
		w.mu.Lock()
		seg := w.segment[slotKey]
		w.mu.Unlock()
		name := fmt.Sprintf("%s-%d", slotKey, seg)
		key := types.NamespacedName{Namespace: w.o.namespace, Name: name}

		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(devenv.WidgetGVK)
		read := checker.Record{Type: checker.TypeOp, ID: fmt.Sprintf("%s/r%d", w.o.identity, w.nextSeq()), Lease: lw.lease, Object: name,
			Op: checker.Read, Phase: phase}
		ctx, cancel := context.WithTimeout(context.Background(), w.o.writeTimeout)
		read.Invoke = w.log.now()
		err := w.c.Get(ctx, key, obj)
		read.Complete = w.log.now()
		cancel()
		exists := err == nil
		if err != nil && !apierrors.IsNotFound(err) {
			read.Outcome, read.Msg = classify(err)
			w.log.write(read)
			return
		}
		var entries []string
		if exists {
			entries, _, _ = unstructured.NestedStringSlice(obj.Object, "spec", "entries")
		}
		read.Outcome, read.Len, read.Hash = checker.OK, len(entries), checker.HashList(entries)
		w.log.write(read)
		if len(entries) >= w.o.segmentCap {
			w.mu.Lock()
			if w.segment[slotKey] == seg {
				w.segment[slotKey] = seg + 1
			}
			w.mu.Unlock()
			continue
		}

		seq := w.nextSeq()
		value := checker.Value(w.o.identity, token, seq)
		if !exists {
			obj.SetNamespace(key.Namespace)
			obj.SetName(key.Name)
		}
		if err := unstructured.SetNestedStringSlice(obj.Object, append(entries, value), "spec", "entries"); err != nil {
			panic(err)
		}
		_ = unstructured.SetNestedField(obj.Object, w.o.identity, "spec", "writer")
		rec := checker.Record{Type: checker.TypeInvoke, ID: fmt.Sprintf("%s/a%d", w.o.identity, seq), Lease: lw.lease, Object: name,
			Op: checker.Append, Token: token, Value: value, Phase: phase}
		ctx, cancel = context.WithTimeout(context.Background(), w.o.writeTimeout)
		rec.Invoke = w.log.now()
		w.log.write(rec)
		if exists {
			err = fc.Update(ctx, obj)
		} else {
			err = fc.Create(ctx, obj)
		}
		rec.Complete = w.log.now()
		cancel()
		rec.Type = checker.TypeOp
		if err == nil {
			after, _, _ := unstructured.NestedStringSlice(obj.Object, "spec", "entries")
			rec.Outcome, rec.Len, rec.Hash = checker.OK, len(after), checker.HashList(after)
		} else {
			rec.Outcome, rec.Msg = classify(err)
		}
		w.log.write(rec)
		if rec.Outcome != checker.Conflict {
			return
		}
	}
}

// classify sorts a failed request into the checker's outcomes. Only answers
// that certainly precede the write (a fencing refusal, an optimistic-lock
// conflict, an admission refusal or a failed webhook call, a 4xx) are
// definite; everything else may have been committed.
func classify(err error) (checker.Outcome, string) {
	msg := err.Error()
	if len(msg) > 300 {
		msg = msg[:300]
	}
	if fence.IsStale(err) {
		return checker.Stale, msg
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return checker.Timeout, msg // no answer: timeout, reset, refused connection
	}
	s := st.Status()
	admission := strings.Contains(s.Message, "admission webhook") || strings.Contains(s.Message, "failed calling webhook")
	switch {
	case admission:
		return checker.Error, msg
	case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
		return checker.Conflict, msg
	case s.Code >= 400 && s.Code < 500 && s.Code != http.StatusRequestTimeout:
		return checker.Error, msg
	}
	return checker.Timeout, msg // 5xx, 408, 504: the write may have been committed
}
