package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// clientGoTiming is client-go's configuration for a lease of duration l:
// LeaseDuration l, RenewDeadline 3/4 l, RetryPeriod l/4 (2 s / 1.5 s / 0.5 s
// for l = 2 s; client-go needs LeaseDuration > RenewDeadline > 1.2 ×
// RetryPeriod). kubefence's holder renews every l/3.
func clientGoTiming(l time.Duration) (lease, renewDeadline, retry time.Duration) {
	return l, l * 3 / 4, l / 4
}

// startCG starts one client-go LeaderElector (LeaseLock) with its own API
// connection. ReleaseOnCancel is on.
func (b *bench) startCG(ctx context.Context, ns, name, id string) (*candidate, error) {
	c, cfg := b.newCandidate(id)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	lease, renewDeadline, retry := clientGoTiming(b.lease)
	le, err := cgElector(cs, ns, name, id, lease, renewDeadline, retry, c.lead)
	if err != nil {
		return nil, err
	}
	c.run(ctx, le.Run)
	return c, nil
}

// cgElector is a client-go LeaderElector on Lease ns/name, ReleaseOnCancel.
func cgElector(cs kubernetes.Interface, ns, name, id string, lease, renewDeadline, retry time.Duration, lead func(context.Context)) (*leaderelection.LeaderElector, error) {
	return leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: name},
			Client:     cs.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: id},
		},
		LeaseDuration: lease, RenewDeadline: renewDeadline, RetryPeriod: retry, ReleaseOnCancel: true, Name: name,
		Callbacks: leaderelection.LeaderCallbacks{OnStartedLeading: lead, OnStoppedLeading: func() {}},
	})
}

// waitTried waits until the candidate has read the Lease at least once, so
// that it is polling for it.
func waitTried(ctx context.Context, c *candidate) error {
	return waitFor(ctx, 15*time.Second, 5*time.Millisecond, "the candidate's first attempt", func(context.Context) (bool, error) {
		return c.tr.readsSent() > 0, nil
	})
}

// cgTakeover is phase 1 with client-go: the holder freezes at a random point
// of the waiter's retry period.
func (b *bench) cgTakeover(ctx context.Context) (takeoverResult, error) {
	const ns, name = "cg-takeover", "takeover"
	if err := b.createNamespace(ctx, ns); err != nil {
		return takeoverResult{}, err
	}
	_, _, retry := clientGoTiming(b.lease)
	return b.takeovers(ctx, "client-go takeover", retry,
		func(id string) (*candidate, error) { return b.startCG(ctx, ns, name, id) },
		func(w *candidate) error { return waitTried(ctx, w) }, nil)
}

// cgHandover: the holder's context is cancelled (ReleaseOnCancel), the waiter
// takes over at its next retry; a fresh candidate then queues behind it.
func (b *bench) cgHandover(ctx context.Context) (handoverResult, error) {
	const ns, name = "cg-handover", "handover"
	res := handoverResult{}
	if err := b.createNamespace(ctx, ns); err != nil {
		return res, err
	}
	_, _, retry := clientGoTiming(b.lease)
	var all []*candidate
	defer func() {
		for _, c := range all {
			c.stop()
		}
	}()
	start := func(id string) (*candidate, error) {
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
	for i := range b.opts.handovers {
		w, err := start(fmt.Sprintf("c-%d", i+1))
		if err != nil {
			return res, err
		}
		if err := waitTried(ctx, w); err != nil {
			return res, err
		}
		// The waiter retries every RetryPeriod to 2.2 RetryPeriods (jitter
		// 1.2); release at a random point of its cycle.
		if err := sleep(ctx, retry/2+rand.N(retry*2)); err != nil {
			return res, err
		}
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
		h = w
	}
	return res, nil
}
