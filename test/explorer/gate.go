package explorer

import (
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"

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
		p.w.Quiesce(context.Background(), clock.RealClock{}, time.Minute, time.Nanosecond)
		close(p.quiesced)
	}()
	select {
	case <-p.quiesced:
		p.early = true
	case <-time.After(quiesceWait):
	}
	return 1, true
}
