package explorer

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kubefence/kubefence/pkg/fence"
)

// The honest client's write gate is the shipped fence.Writes, but its steps
// are a mutex and goroutines (a FencedClient write's Begin, the Elector's
// release calling Quiesce), which the explorer cannot run as a pure step. So
// it asks the shipped code once, by a probe, which interleaving it allows:
// whether a release's Quiesce that runs while Begin is asking the
// TokenSource for the token can return without waiting for that write. If it
// can (the FencedClient of 40a8d95: the token first, the count in a second
// step; finding 4a of the 2026-12-01 review), an honest client's guarded
// write takes two steps in the model, the token and then the count, and a
// release may quiesce and withdraw in between (ClientSpec.SplitGate).

// quiesceWait bounds how long the probe lets Quiesce run while Begin asks
// for the token: a Quiesce that need not wait returns in microseconds.
const quiesceWait = 300 * time.Millisecond

var gateProbe struct {
	once  sync.Once
	split bool
}

// writeGateSplit tells whether the shipped fence.Writes lets a Quiesce
// return between Begin's token and its count (probed once per process).
func writeGateSplit() bool {
	gateProbe.once.Do(func() { gateProbe.split = probeWriteGate() })
	return gateProbe.split
}

// probeWriteGate runs fence.Writes.Begin with a TokenSource that, when
// asked for the token, starts Quiesce (as Elector.Release does, after its
// TokenSource stopped answering) and waits quiesceWait for it to return.
func probeWriteGate() bool {
	var w fence.Writes
	src := &probeSource{w: &w, quiesced: make(chan struct{})}
	_, end, err := w.Begin(src)
	if err != nil {
		panic("explorer: the write gate probe's TokenSource answers, but fence.Writes.Begin refused: " + err.Error())
	}
	end(nil)
	// Quiesce returns once the write ended, whichever way it went.
	<-src.quiesced
	return src.early
}

type probeSource struct {
	w        *fence.Writes
	quiesced chan struct{}
	early    bool
}

func (p *probeSource) Token() (int64, bool) {
	go func() {
		p.w.Quiesce(context.Background(), clock.RealClock{}, time.Minute, 1)
		close(p.quiesced)
	}()
	select {
	case <-p.quiesced:
		p.early = true
	case <-time.After(quiesceWait):
	}
	return 1, true
}

// A release's Quiesce decides, too, what follows a write whose answer its
// client gave up on (or one still under way when it stops waiting): whether
// the release withdraws the request, and after how long. The model asks the
// shipped fence.Writes once, by a second probe, and the honest client's
// release does what it answered (model.quiesced): with the fix it keeps the
// request and lets the tenure expire; with it reverted
// (testdata/revert/f-readmit.patch) it waits the commit lag and withdraws.

var releaseProbe struct {
	once     sync.Once
	withdraw bool
	after    time.Duration
}

// releaseAfterUnknown tells whether the shipped fence.Writes lets a release
// withdraw after a write of its tenure ended without an answer, and how long
// after its writes quiesced (probed once per process).
func releaseAfterUnknown() (withdraw bool, after time.Duration) {
	releaseProbe.once.Do(func() { releaseProbe.withdraw, releaseProbe.after = probeRelease() })
	return releaseProbe.withdraw, releaseProbe.after
}

// probeRelease counts one write with token 1 that ends without an answer
// (its client gave up: context.DeadlineExceeded), then runs Quiesce for the
// tenure of token 1 on a fake clock, stepped in small steps while Quiesce
// waits on it, and measures that clock's time until it returned.
func probeRelease() (bool, time.Duration) {
	var w fence.Writes
	_, end, err := w.Begin(probeToken{})
	if err != nil {
		panic("explorer: the release probe's TokenSource answers, but fence.Writes.Begin refused: " + err.Error())
	}
	end(context.DeadlineExceeded)
	start := time.Unix(0, 0)
	clk := clocktesting.NewFakeClock(start)
	done := make(chan bool, 1)
	go func() { done <- w.Quiesce(context.Background(), clk, time.Hour, 1) }()
	const step = 10 * time.Millisecond
	for {
		select {
		case withdraw := <-done:
			return withdraw, clk.Since(start)
		case <-time.After(time.Millisecond):
		}
		if clk.HasWaiters() {
			clk.Step(step)
		}
		if clk.Since(start) > time.Hour {
			panic(errors.New("explorer: the release probe's Quiesce waited an hour after a write without an answer"))
		}
	}
}

type probeToken struct{}

func (probeToken) Token() (int64, bool) { return 1, true }
