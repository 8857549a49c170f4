package main

import (
	"context"
	"fmt"
	"math/rand/v2"
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
	tr     *holderTransport
	cancel context.CancelFunc
	done   chan struct{}
}

// newCandidate is candidate id with a fresh transport, and the rest config
// its elector's client must use.
func (b *bench) newCandidate(id string) (*candidate, *rest.Config) {
	c := &candidate{id: id, leadership: newLeadership(), tr: &holderTransport{}, done: make(chan struct{})}
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
		fmt.Fprintf(os.Stderr, "bench: elector %s did not stop within 15s\n", c.id)
	}
}

// takeovers runs phase 1 for one system on lease ns/name. Per iteration:
// holder A and waiter B (start), wait until B waits (queued), then freeze
// A's client at a random point within period and wait for B to lead. It
// records the start beyond the lease after A's last successful renewal, and
// the gap after A's tenure ended; settle (may be nil) runs once both are
// stopped.
func (b *bench) takeovers(ctx context.Context, what string, period time.Duration, start func(id string) (*candidate, error),
	queued func(w *candidate) error, settle func()) (takeoverResult, error) {
	var res takeoverResult
	once := func(i int) error {
		var started []*candidate
		defer func() {
			for _, c := range started {
				c.stop()
			}
			if settle != nil {
				settle()
			}
		}()
		a, err := start(fmt.Sprintf("a-%d", i))
		if err != nil {
			return err
		}
		started = append(started, a)
		// Immediate, or one lease when the previous iteration failed half way.
		if _, err := a.waitStart(ctx, 3*b.lease+5*time.Second); err != nil {
			return fmt.Errorf("holder: %w", err)
		}
		w, err := start(fmt.Sprintf("b-%d", i))
		if err != nil {
			return err
		}
		started = append(started, w)
		if err := queued(w); err != nil {
			return err
		}
		if err := sleep(ctx, rand.N(period)); err != nil {
			return err
		}
		a.tr.freeze()
		st, err := w.waitStart(ctx, 3*b.lease+5*time.Second)
		if err != nil {
			return fmt.Errorf("waiter: %w", err)
		}
		t0 := a.tr.lastWriteSent()
		res.beyond = append(res.beyond, st.Sub(t0)-b.lease)
		if stop := a.stoppedAt(); !stop.IsZero() {
			res.gap = append(res.gap, st.Sub(stop))
		} else {
			res.gap = append(res.gap, time.Until(st)) // the old holder still leads
		}
		return nil
	}
	for i := range b.opts.takeovers {
		if err := once(i); err != nil {
			if err := tolerate(ctx, &res.failures, b.opts.takeovers, what, i, err); err != nil {
				return res, err
			}
		}
	}
	return res, nil
}
