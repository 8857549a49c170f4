// Package fault holds the faults the suites inject into a client's traffic:
// a Gate that stalls whoever waits on it, as a paused process or a partition
// would, and the transports that wrap a rest.Config's round tripper with it
// (Stall, StallWrites, RoundTripperFunc for a suite's own).
package fault

import (
	"context"
	"sync"
)

// Gate stalls whoever waits on it while it is closed, as a paused process, a
// stalled network path or a partition would. The zero Gate is open; it is
// safe for concurrent use.
type Gate struct {
	mu     sync.Mutex
	closed chan struct{}
}

// Close makes Wait block until Open.
func (g *Gate) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed == nil {
		g.closed = make(chan struct{})
	}
}

// Open releases every waiter.
func (g *Gate) Open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed != nil {
		close(g.closed)
		g.closed = nil
	}
}

// Wait returns at once while the gate is open; while it is closed, it waits
// until it opens (nil) or ctx ends (ctx's error).
func (g *Gate) Wait(ctx context.Context) error {
	g.mu.Lock()
	c := g.closed
	g.mu.Unlock()
	if c == nil {
		return nil
	}
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
