package fencing

import (
	"context"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// readerAfter serves the lease after running before: a read that is slow,
// delayed, or (for the webhook's clock) took a while.
type readerAfter struct {
	cacheLike
	before func()
}

func (r readerAfter) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.before()
	return r.cacheLike.Get(ctx, key, obj, opts...)
}

// The commit-lag bound runs from the lease read to the commit: a decision
// that took more than half of it (a slow or delayed read) is refused, since
// the lease may have changed hands after the read, and a write admitted on it
// could commit after the next grant.
func TestDecisionSlowerThanHalfTheCommitLagIsRefused(t *testing.T) {
	h, req, _ := benchHandler(t)
	lease := h.Leases.Reader.(cacheLike).lease
	for _, c := range []struct {
		took    time.Duration
		allowed bool
	}{{100 * time.Millisecond, true}, {600 * time.Millisecond, false}} {
		fake := clocktesting.NewFakePassiveClock(time.Now())
		h.Clock, h.CommitLag = fake, time.Second
		// The webhook's clock moves on by took while the lease is read.
		h.Leases = &LeaseReader{Reader: readerAfter{cacheLike{lease}, func() { fake.SetTime(fake.Now().Add(c.took)) }}}
		resp := h.Handle(context.Background(), req)
		if resp.Allowed != c.allowed {
			t.Fatalf("decision taking %v with a 1s commit lag: allowed %v, want %v (%v)", c.took, resp.Allowed, c.allowed, resp.Result)
		}
		if !c.allowed && resp.Result.Code != 503 {
			t.Fatalf("slow decision refused with %d, want 503 (retry)", resp.Result.Code)
		}
	}
}

// A stopping manager cancels the context of every webhook call in flight
// (controller-runtime's webhook server derives them from the manager's) and
// then waits for their answers: a terminating replica still decides them
// within the call's time, rather than refuse a live holder's write with
// "context canceled" (test/upgrade saw it when a replica stopped during a
// rolling upgrade).
func TestCallsInFlightAreDecidedWhileTheManagerStops(t *testing.T) {
	h, req, _ := benchHandler(t)
	lease := h.Leases.Reader.(cacheLike).lease
	h.Clock, h.CommitLag = clocktesting.NewFakePassiveClock(time.Now()), time.Second
	// The lease is served after a real delay, ignoring ctx as a read under
	// way on the API server does.
	h.Leases = &LeaseReader{Reader: readerAfter{cacheLike{lease}, func() { time.Sleep(20 * time.Millisecond) }}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the manager stops while the call is in flight
	resp := h.Handle(ctx, req)
	if !resp.Allowed {
		t.Fatalf("a live holder's write refused while the manager stops: %v", resp.Result)
	}
}
