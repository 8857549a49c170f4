package fence

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/kubefence/kubefence/pkg/fence/timing"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
)

// WriteCounter is a TokenSource whose holder waits, before it releases, for
// the writes sent with its token: a FencedClient takes the token of each write
// through Writes().Begin, which counts the write in flight in the same step.
// An *Elector and a pkg/fence/resourcelock Lock are WriteCounters.
type WriteCounter interface {
	TokenSource
	Writes() *Writes
}

// Writes counts the fenced writes of one holder in flight, so that a release
// withdraws the request only once every write of the tenure has returned: the
// controller grants the next request in the status write that sees the
// request gone, without waiting (docs/design.md, "How each way a tenure ends
// keeps the promise", release).
//
// Begin reads the token and counts the write under the lock Quiesce reads the
// count under. A release first makes its TokenSource stop answering (Token
// returns false) and then calls Quiesce, so every write either was counted
// before Quiesce looked, and Quiesce waits for it, or asks for the token after
// that and is refused with ErrNotLeading. The zero Writes is ready to use.
type Writes struct {
	mu sync.Mutex
	// n counts the writes in flight; unknown is set when one ended without
	// an answer from the API server (it may still commit); idle is closed
	// when n drops to zero while Quiesce waits.
	n       int
	unknown bool
	idle    chan struct{}
}

// Begin takes the token of one write from src and counts the write in flight,
// in one step; end must be called with the write's error once it returned (nil
// if it was never sent). Begin returns ErrNotLeading, and counts nothing, when
// src has no token.
func (w *Writes) Begin(src TokenSource) (token int64, end func(error), err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	token, ok := src.Token()
	if !ok {
		return 0, nil, ErrNotLeading
	}
	w.n++
	return token, w.end, nil
}

func (w *Writes) end(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n--
	if err != nil && outcomeUnknown(err) {
		w.unknown = true
	}
	if w.n == 0 && w.idle != nil {
		close(w.idle)
		w.idle = nil
	}
}

// Quiesce waits (at most max, on clk) until no write is in flight; if a write
// ended without an answer, or one is still in flight at max, it then waits
// lag more (timing.DefaultCommitLag if lag is not positive), the longest the API
// server may take to commit a write it admitted. It returns early when ctx
// ends. Call it after the TokenSource stopped answering and before the
// request is withdrawn.
func (w *Writes) Quiesce(ctx context.Context, clk clock.Clock, max, lag time.Duration) {
	w.mu.Lock()
	var idle chan struct{}
	if w.n > 0 {
		if w.idle == nil {
			w.idle = make(chan struct{})
		}
		idle = w.idle
	}
	w.mu.Unlock()
	if idle != nil {
		t := clk.NewTimer(max)
		select {
		case <-idle:
		case <-t.C():
		case <-ctx.Done():
		}
		t.Stop()
	}
	w.mu.Lock()
	unknown := w.unknown || w.n > 0
	w.unknown = false
	w.mu.Unlock()
	if unknown {
		if lag <= 0 {
			lag = timing.DefaultCommitLag
		}
		sleep(ctx, clk, lag)
	}
}

// outcomeUnknown tells whether a write's error leaves open whether the API
// server committed it: no answer (a cancelled context, a broken connection) or
// a server-side timeout.
func outcomeUnknown(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true
	}
	return apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err)
}
