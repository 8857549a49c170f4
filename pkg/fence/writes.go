package fence

import (
	"context"
	"errors"
	"sync"
	"time"

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
// withdraws the request only once every write of the tenure has returned with
// the API server's answer: the controller grants the next request in the
// status write that sees the request gone, without waiting (docs/design.md,
// "How each way a tenure ends keeps the promise", release). After a write
// without an answer the release keeps the request and lets the tenure expire.
//
// Begin reads the token and counts the write under the lock Quiesce reads the
// count under. A release first makes its TokenSource stop answering (Token
// returns false) and then calls Quiesce, so every write either was counted
// before Quiesce looked, and Quiesce waits for it, or asks for the token after
// that and is refused with ErrNotLeading. The zero Writes is ready to use.
type Writes struct {
	mu sync.Mutex
	// n counts the writes in flight; abandoned is the largest token of a
	// write that ended without an answer from the API server (it may still
	// be admitted and commit), or that a Quiesce gave up waiting for; idle
	// is closed when n drops to zero while Quiesce waits.
	n         int
	abandoned int64
	idle      chan struct{}
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
	return token, func(err error) { w.end(token, err) }, nil
}

func (w *Writes) end(token int64, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n--
	if err != nil && outcomeUnknown(err) {
		w.abandoned = max(w.abandoned, token)
	}
	if w.n == 0 && w.idle != nil {
		close(w.idle)
		w.idle = nil
	}
}

// Quiesce waits (at most limit, on clk) until no write is in flight, and tells
// whether the release may withdraw the request of the tenure with token (0:
// the request holds no tenure) now. It may not once a write sent with that
// token ended without an answer from the API server (its client gave up, or
// the server timed out), or is still in flight at limit: the API server may
// admit such a write later than any wait counted from here (a conflict in its
// compare-and-swap re-runs admission, with a live lease read that still shows
// the tenure; a request held in the network arrives late), and a withdraw
// lets the next holder be granted at once. The release then keeps the
// request, stops renewing and lets the tenure expire: the fencing webhook's
// cut-off and the controller's expiry (in policy mode, its wait after the
// barrier) cover a write admitted at any time (docs/design.md, "How each way
// a tenure ends keeps the promise"). It returns early when ctx ends. Call it
// after the TokenSource stopped answering and before the request is
// withdrawn.
func (w *Writes) Quiesce(ctx context.Context, clk clock.Clock, limit time.Duration, token int64) (withdraw bool) {
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
		t := clk.NewTimer(limit)
		select {
		case <-idle:
		case <-t.C():
		case <-ctx.Done():
		}
		t.Stop()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n > 0 {
		// Those still in flight carry token or an older one.
		w.abandoned = max(w.abandoned, token)
	}
	return token <= 0 || w.abandoned < token
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
