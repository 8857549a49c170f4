package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// leadership records the tenures of one candidate, whichever system it uses.
type leadership struct {
	started chan time.Time // one send per tenure, when OnStartedLeading runs

	mu       sync.Mutex
	lastStop time.Time // when the last tenure's context was cancelled
}

func newLeadership() *leadership { return &leadership{started: make(chan time.Time, 256)} }

// lead is the body of OnStartedLeading: note the start, wait for the end.
func (l *leadership) lead(ctx context.Context) {
	l.started <- time.Now()
	<-ctx.Done()
	l.mu.Lock()
	l.lastStop = time.Now()
	l.mu.Unlock()
}

func (l *leadership) stoppedAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastStop
}

// drain forgets tenures started so far.
func (l *leadership) drain() {
	for {
		select {
		case <-l.started:
		default:
			return
		}
	}
}

// waitStart returns when the next tenure started.
func (l *leadership) waitStart(ctx context.Context, timeout time.Duration) (time.Time, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case s := <-l.started:
		return s, nil
	case <-t.C:
		return time.Time{}, fmt.Errorf("no tenure started within %v", timeout)
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
}

// candidate is one elector, of either system, with its own API connection
// (tr counts and can freeze its requests).
type candidate struct {
	id string
	*leadership
	tr *holderTransport
	// what names the elector in messages.
	what   string
	cancel context.CancelFunc
	done   chan struct{}
}

// newCandidate is candidate id with a fresh transport, and the rest config
// its elector's client must use.
func (b *bench) newCandidate(id, what string) (*candidate, *rest.Config) {
	c := &candidate{id: id, leadership: newLeadership(), tr: newHolderTransport(), what: what, done: make(chan struct{})}
	cfg := rest.CopyConfig(b.cfg)
	cfg.WrapTransport = c.tr.wrap
	return c, cfg
}

// run runs the elector (its Run) in a goroutine until stop.
func (c *candidate) run(ctx context.Context, run func(context.Context)) {
	runCtx, cancel := context.WithCancel(ctx)
	c.cancel = cancel
	go func() {
		defer close(c.done)
		run(runCtx)
	}()
}

// stop cancels Run (which releases a held lease, or withdraws the request,
// unless the client is frozen) and waits for it to return.
func (c *candidate) stop() {
	c.cancel()
	select {
	case <-c.done:
	case <-time.After(15 * time.Second):
		fmt.Fprintf(os.Stderr, "bench: %s %s did not stop within 15s\n", c.what, c.id)
	}
}

// takeovers runs phase 1's iterations for one system (once), tolerating a
// few failed ones.
func (b *bench) takeovers(ctx context.Context, res *takeoverResult, what string, once func(i int) error) error {
	for i := range b.opts.takeovers {
		if err := once(i); err != nil {
			if err := tolerate(ctx, &res.failures, b.opts.takeovers, what, i, err); err != nil {
				return err
			}
		}
	}
	return nil
}

// takeOver freezes the holder a's client and waits for the waiter w to start
// leading: it records the start beyond the lease after a's last successful
// renewal, and the gap after a's tenure ended, and returns the start and that
// renewal's send time.
func (b *bench) takeOver(ctx context.Context, a, w *candidate, res *takeoverResult) (start, t0 time.Time, err error) {
	a.tr.freeze()
	start, err = w.waitStart(ctx, 3*b.lease+5*time.Second)
	if err != nil {
		return start, t0, fmt.Errorf("waiter: %w", err)
	}
	t0 = a.tr.lastWriteSent()
	res.beyond = append(res.beyond, start.Sub(t0)-b.lease)
	if stop := a.stoppedAt(); !stop.IsZero() {
		res.gap = append(res.gap, start.Sub(stop))
	} else {
		res.gap = append(res.gap, time.Until(start)) // the old holder still leads
	}
	return start, t0, nil
}

// renewalCounter counts a holder's renewals over the steady window: begin
// is called when the window begins, end when it ends, then count.
type renewalCounter struct {
	begin, end func() error
	count      func() (int, error)
}

// steadyHolder is phase 3 for one system: candidate a, started by start,
// holds the lease in namespace ns alone; over the steady window, count its
// writes and reads, the controller's writes, and its renewals (rc).
func (b *bench) steadyHolder(ctx context.Context, ns string, start func() (*candidate, error), rc renewalCounter) (steadyResult, error) {
	var res steadyResult
	a, err := start()
	if err != nil {
		return res, err
	}
	defer a.stop()
	if _, err := a.waitStart(ctx, 15*time.Second); err != nil {
		return res, err
	}
	if err := sleep(ctx, time.Second); err != nil {
		return res, err
	}
	if err := alignToWrite(ctx, a.tr, 2*b.lease); err != nil {
		return res, err
	}
	began := time.Now()
	if err := rc.begin(); err != nil {
		return res, err
	}
	c0, ctrl0 := a.tr.counts(), b.ctrlRT.snapshot(ns)
	if err := sleep(ctx, b.opts.steady); err != nil {
		return res, err
	}
	if err := alignToWrite(ctx, a.tr, 2*b.lease); err != nil {
		return res, err
	}
	c1, ctrl1 := a.tr.counts(), b.ctrlRT.snapshot(ns)
	if err := rc.end(); err != nil {
		return res, err
	}
	res.window = time.Since(began)
	if res.renewals, err = rc.count(); err != nil {
		return res, err
	}
	res.writes = c1.writes - c0.writes
	res.reads = c1.reads - c0.reads
	res.ctrl = ctrl1.sub(ctrl0)
	res.writeRTT = a.tr.writeLatencies(c0.completed, c1.completed)
	return res, nil
}

// alignToWrite waits until the candidate's next write succeeded, plus a
// settling pause, so that a window boundary never cuts a renewal in two.
func alignToWrite(ctx context.Context, tr *holderTransport, timeout time.Duration) error {
	ch := tr.nextWrite()
	select {
	case <-ch:
	case <-time.After(timeout):
		return fmt.Errorf("no write within %v", timeout)
	case <-ctx.Done():
		return ctx.Err()
	}
	return sleep(ctx, 150*time.Millisecond)
}
