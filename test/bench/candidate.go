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
	c := &candidate{id: id, leadership: newLeadership(), tr: &holderTransport{}, what: what, done: make(chan struct{})}
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
