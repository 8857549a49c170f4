package fence

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// A machine suspended past the holder's deadline: Go's timers count on the
// monotonic clock, which stands still while suspended; CLOCK_BOOTTIME does
// not. With an injected boot clock, Token refuses as soon as the boot clock
// passes the deadline, and the watchdog, which looks at the boot clock every
// bootPoll, cancels the holder's context at its next look although the
// monotonic deadline is still ahead (2026-11-30 review, finding 14). Fails
// without the boot check in Token, or in the watchdog, or without the
// watchdog's bootPoll cap on its timer.
func TestWatchdogEndsATenureSuspendedPastItsDeadline(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	e, err := New(Config{Client: fake.NewClientBuilder().Build(), Namespace: "jobs", Name: "job", Identity: "a", User: "a", Clock: clk,
		Callbacks: Callbacks{OnStartedLeading: func(context.Context, int64) {}}})
	if err != nil {
		t.Fatal(err)
	}
	var boot atomic.Int64 // CLOCK_BOOTTIME, in nanoseconds
	boot.Store(int64(time.Hour))
	e.boot = func() time.Duration { return time.Duration(boot.Load()) }
	// A renewal sent now, as renew records it; the deadline L - margin = 9 s on.
	e.lastSent, e.sentBoot = clk.Now(), e.boot()
	e.setLeading(true, 42, clk.Now().Add(9*time.Second))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.watchdog(ctx, cancel, make(chan struct{}))
	}()
	waitForTimer := func() {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !clk.HasWaiters() {
			if time.Now().After(deadline) {
				t.Fatal("the watchdog set no timer")
			}
			time.Sleep(time.Millisecond)
		}
	}

	// Awake: both clocks advance together; the watchdog looks and lets be.
	for range 4 {
		waitForTimer()
		boot.Add(int64(bootPoll))
		clk.Step(bootPoll)
	}
	waitForTimer()
	if ctx.Err() != nil {
		t.Fatal("the watchdog ended the tenure before its deadline")
	}
	if tok, ok := e.Token(); !ok || tok != 42 {
		t.Fatalf("Token() = %d, %v before the deadline; want 42, true", tok, ok)
	}

	// Suspended for 10 s: the boot clock passes the deadline, the monotonic
	// clock does not move.
	boot.Add(int64(10 * time.Second))
	if _, ok := e.Token(); ok {
		t.Error("Token() still valid after a suspend past the deadline on CLOCK_BOOTTIME")
	}
	// Resumed: the watchdog's next look, bootPoll on (8 s before the
	// monotonic deadline).
	boot.Add(int64(bootPoll))
	clk.Step(bootPoll)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the watchdog did not end the tenure after a suspend past its deadline")
	}
	if ctx.Err() == nil {
		t.Fatal("the watchdog returned without cancelling the holder's context")
	}
	if left := e.Deadline().Sub(clk.Now()); left <= 0 {
		t.Fatalf("the monotonic deadline has passed (%v): the test shows nothing about CLOCK_BOOTTIME", left)
	}
}

// An Elector withdraws only its own request: one of its identity that another
// process made (or renewed since) stays, since withdrawing it would end that
// process's tenure without waiting for its writes.
func TestWithdrawLeavesARequestNotItsOwn(t *testing.T) {
	ev := &events{}
	c := recordingClient(t, ev)
	e := leadingElector(t, c)
	e.setLeading(false, 0, time.Time{})
	e.own.Disown() // a fresh Elector: it did not append the request it sees
	if err := e.withdraw(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Its own, then renewed by another process.
	e = leadingElector(t, c)
	e.setLeading(false, 0, time.Time{})
	twin := heldLease()
	twin.ResourceVersion = "999"
	twin.Spec.Requests[0].RenewSequence++
	e.view.offer(twin)
	if err := e.withdraw(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := ev.get(); len(got) != 0 {
		t.Fatalf("sent %v, want nothing", got)
	}
	// Its own: withdrawn.
	e = leadingElector(t, c)
	e.setLeading(false, 0, time.Time{})
	if err := e.withdraw(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := ev.get(); !slices.Equal(got, []string{"withdraw"}) {
		t.Fatalf("sent %v, want the withdraw of its own request", got)
	}
}
