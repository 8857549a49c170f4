package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// clientGoTiming is client-go's configuration for a lease of duration l:
// LeaseDuration l, RenewDeadline 3/4 l, RetryPeriod l/4 unless -clientgo-retry
// sets it. For l = 2 s that is 2 s / 1.5 s / 0.5 s. For comparison,
// controller-runtime's defaults (15 s / 10 s / 2 s) scaled to l are 2/3 l and
// 2/15 l (267 ms: faster waiters, 3.75 holder writes a second), and
// kubefence's holder renews every l/3 and gives up 9/10 l after its last
// renewal. Any choice must satisfy client-go's
// LeaseDuration > RenewDeadline > JitterFactor (1.2) * RetryPeriod.
func clientGoTiming(l, retryOverride time.Duration) (lease, renewDeadline, retry time.Duration) {
	retry = l / 4
	if retryOverride > 0 {
		retry = retryOverride
	}
	return l, l * 3 / 4, retry
}

// cgCandidate is one client-go LeaderElector (LeaseLock) with its own API
// connection. ReleaseOnCancel is on.
type cgCandidate struct {
	id string
	*leadership
	tr     *holderTransport
	cancel context.CancelFunc
	done   chan struct{}
}

func (b *bench) startCG(ctx context.Context, ns, name, id string) (*cgCandidate, error) {
	tr := newHolderTransport()
	cfg := rest.CopyConfig(b.cfg)
	cfg.WrapTransport = tr.wrap
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	lease, renewDeadline, retry := clientGoTiming(b.lease, b.opts.clientGoRetry)
	c := &cgCandidate{id: id, leadership: newLeadership(), tr: tr, done: make(chan struct{})}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: name},
			Client:     cs.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: id},
		},
		LeaseDuration:   lease,
		RenewDeadline:   renewDeadline,
		RetryPeriod:     retry,
		ReleaseOnCancel: true,
		Name:            name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: c.lead,
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	c.cancel = cancel
	go func() {
		defer close(c.done)
		le.Run(runCtx)
	}()
	return c, nil
}

// stop cancels Run (which releases a held lease unless the client is frozen)
// and waits for it to return.
func (c *cgCandidate) stop() {
	c.cancel()
	select {
	case <-c.done:
	case <-time.After(15 * time.Second):
		fmt.Fprintf(os.Stderr, "bench: client-go elector %s did not stop within 15s\n", c.id)
	}
}

// waitTried waits until the candidate has read the Lease at least once, so
// that it is polling for it.
func (c *cgCandidate) waitTried(ctx context.Context) error {
	return waitFor(ctx, 15*time.Second, 5*time.Millisecond, "the candidate's first attempt", func(context.Context) (bool, error) {
		return c.tr.counts().reads > 0, nil
	})
}

// cgTakeover mirrors kfTakeover with client-go.
func (b *bench) cgTakeover(ctx context.Context) (takeoverResult, error) {
	const ns, name = "cg-takeover", "takeover"
	res := takeoverResult{}
	if err := b.createNamespace(ctx, ns); err != nil {
		return res, err
	}
	_, _, retry := clientGoTiming(b.lease, b.opts.clientGoRetry)
	for i := range b.opts.takeovers {
		if err := b.cgTakeoverOnce(ctx, ns, name, i, retry, &res); err != nil {
			if err := tolerate(ctx, &res.failures, b.opts.takeovers, "client-go takeover", i, err); err != nil {
				return res, err
			}
		}
	}
	return res, nil
}

func (b *bench) cgTakeoverOnce(ctx context.Context, ns, name string, i int, retry time.Duration, res *takeoverResult) error {
	var started []*cgCandidate
	defer func() {
		// The waiter releases (ReleaseOnCancel); the frozen holder cannot.
		for _, c := range started {
			c.stop()
		}
	}()
	a, err := b.startCG(ctx, ns, name, fmt.Sprintf("a-%d", i))
	if err != nil {
		return err
	}
	started = append(started, a)
	// The previous iteration's holder released, so this is immediate, or one
	// lease duration when the previous iteration failed half way.
	if _, err := a.waitStart(ctx, 3*b.lease+5*time.Second); err != nil {
		return fmt.Errorf("holder: %w", err)
	}
	w, err := b.startCG(ctx, ns, name, fmt.Sprintf("b-%d", i))
	if err != nil {
		return err
	}
	started = append(started, w)
	if err := w.waitTried(ctx); err != nil {
		return err
	}
	if err := sleep(ctx, rand.N(retry)); err != nil {
		return err
	}
	a.tr.freeze()
	start, err := w.waitStart(ctx, 3*b.lease+5*time.Second)
	if err != nil {
		return fmt.Errorf("waiter: %w", err)
	}
	t0 := a.tr.lastWriteSent()
	res.beyond = append(res.beyond, start.Sub(t0)-b.lease)
	if stop := a.stoppedAt(); !stop.IsZero() {
		res.gap = append(res.gap, start.Sub(stop))
	} else {
		res.gap = append(res.gap, time.Until(start)) // the old holder still leads
	}
	return nil
}

// cgHandover: the holder's context is cancelled (ReleaseOnCancel), the waiter
// takes over at its next retry; a fresh candidate then queues behind it.
func (b *bench) cgHandover(ctx context.Context) (handoverResult, error) {
	const ns, name = "cg-handover", "handover"
	res := handoverResult{}
	if err := b.createNamespace(ctx, ns); err != nil {
		return res, err
	}
	_, _, retry := clientGoTiming(b.lease, b.opts.clientGoRetry)
	var all []*cgCandidate
	defer func() {
		for _, c := range all {
			c.stop()
		}
	}()
	start := func(id string) (*cgCandidate, error) {
		c, err := b.startCG(ctx, ns, name, id)
		if err == nil {
			all = append(all, c)
		}
		return c, err
	}
	h, err := start("c-0")
	if err != nil {
		return res, err
	}
	if _, err := h.waitStart(ctx, 15*time.Second); err != nil {
		return res, err
	}
	var writes, reads int
	for i := range b.opts.handovers {
		w, err := start(fmt.Sprintf("c-%d", i+1))
		if err != nil {
			return res, err
		}
		if err := w.waitTried(ctx); err != nil {
			return res, err
		}
		// The waiter retries every RetryPeriod to 2.2 RetryPeriods (jitter
		// 1.2); release at a random point of its cycle.
		if err := sleep(ctx, retry/2+rand.N(retry*2)); err != nil {
			return res, err
		}
		hc, wc := h.tr.counts(), w.tr.counts()
		asked := time.Now()
		h.cancel()
		began, err := w.waitStart(ctx, 3*b.lease+5*time.Second)
		if err != nil {
			if err := tolerate(ctx, &res.failures, b.opts.handovers, "client-go hand-over", i, err); err != nil {
				return res, err
			}
			h.stop()
			h = w
			continue
		}
		res.latency = append(res.latency, began.Sub(asked))
		h.stop()
		// The new holder renews at once after acquiring; count that write too.
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return res, err
		}
		// Requests from the release to the new holder's start (the waiter's
		// polling before the release is not part of the hand-over).
		hc2, wc2 := h.tr.counts(), w.tr.counts()
		writes += hc2.writes - hc.writes + wc2.writes - wc.writes
		reads += hc2.reads - hc.reads + wc2.reads - wc.reads
		h = w
	}
	res.n = len(res.latency)
	res.clientWrites, res.clientReads = writes, reads
	return res, nil
}

// cgSteady: one holder; count its writes, and its renewals from a watch on the
// Lease (each renewal is one new renewTime).
func (b *bench) cgSteady(ctx context.Context) (steadyResult, error) {
	const ns, name = "cg-steady", "steady"
	var res steadyResult
	if err := b.createNamespace(ctx, ns); err != nil {
		return res, err
	}
	a, err := b.startCG(ctx, ns, name, "a")
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
	cs, err := kubernetes.NewForConfig(b.cfg)
	if err != nil {
		return res, err
	}
	leases := cs.CoordinationV1().Leases(ns)
	if err := alignToWrite(ctx, a.tr, 2*b.lease); err != nil {
		return res, err
	}
	begin := time.Now()
	l0, err := leases.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return res, err
	}
	c0 := a.tr.counts()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := leases.Watch(wctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", name).String(),
		ResourceVersion: l0.ResourceVersion,
	})
	if err != nil {
		return res, err
	}
	defer w.Stop()
	if err := sleep(ctx, b.opts.steady); err != nil {
		return res, err
	}
	if err := alignToWrite(ctx, a.tr, 2*b.lease); err != nil {
		return res, err
	}
	c1 := a.tr.counts()
	l1, err := leases.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return res, err
	}
	res.window = time.Since(begin)
	n, err := countRenewals(ctx, w, a.id, l0, l1.ResourceVersion)
	if err != nil {
		return res, err
	}
	res.renewals = n
	res.writes = c1.writes - c0.writes
	res.reads = c1.reads - c0.reads
	res.writeRTT = a.tr.writeLatencies(c0.completed, c1.completed)
	return res, nil
}

// countRenewals reads watch events up to resource version last and counts the
// modifications that are renewals by holder (a new renewTime).
func countRenewals(ctx context.Context, w watch.Interface, holder string, first *coordinationv1.Lease, last string) (int, error) {
	lastRV, err := strconv.ParseUint(last, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("resource version %q: %w", last, err)
	}
	prev := first.Spec.RenewTime
	n := 0
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return 0, errors.New("the watch on the Lease closed early")
			}
			l, isLease := ev.Object.(*coordinationv1.Lease)
			if !isLease {
				continue
			}
			if ev.Type == watch.Modified && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == holder &&
				l.Spec.RenewTime != nil && (prev == nil || !l.Spec.RenewTime.Equal(prev)) {
				n++
				prev = l.Spec.RenewTime
			}
			if rv, err := strconv.ParseUint(l.ResourceVersion, 10, 64); err == nil && rv >= lastRV {
				return n, nil
			}
		case <-timeout:
			return 0, errors.New("the watch on the Lease did not reach the end of the window")
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}
