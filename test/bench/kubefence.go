package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence"
)

// kfCandidate is one fence.Elector with its own API connection.
type kfCandidate struct {
	*candidate
	el *fence.Elector
}

func (b *bench) startKF(ctx context.Context, ns, name, id string) (*kfCandidate, error) {
	cand, cfg := b.newCandidate(id)
	cl, err := client.NewWithWatch(cfg, client.Options{Scheme: b.scheme})
	if err != nil {
		return nil, err
	}
	c := &kfCandidate{candidate: cand}
	c.el, err = fence.New(fence.Config{
		Client: cl, Namespace: ns, Name: name, Identity: id, User: b.adminUser,
		Callbacks: fence.Callbacks{
			OnStartedLeading: func(ctx context.Context, _ int64) { c.lead(ctx) },
		},
	})
	if err != nil {
		return nil, err
	}
	c.run(ctx, func(ctx context.Context) {
		if err := c.el.Run(ctx); err != nil && b.opts.verbose {
			fmt.Fprintf(os.Stderr, "bench: elector %s: %v\n", id, err)
		}
	})
	return c, nil
}

// createFencedLease creates namespace ns and FencedLease ns/name.
func (b *bench) createFencedLease(ctx context.Context, ns, name string, seconds int) error {
	if err := b.createNamespace(ctx, ns); err != nil {
		return err
	}
	l := &coordv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: int32(seconds)},
	}
	if err := b.admin.Create(ctx, l); err != nil {
		return fmt.Errorf("creating FencedLease %s/%s: %w", ns, name, err)
	}
	return nil
}

func (b *bench) getFencedLease(ctx context.Context, ns, name string) (*coordv1alpha1.FencedLease, error) {
	var l coordv1alpha1.FencedLease
	if err := b.admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

func requestOf(l *coordv1alpha1.FencedLease, id string) (coordv1alpha1.LeaseRequest, bool) {
	if i := coordv1alpha1.RequestIndex(l.Spec.Requests, id); i >= 0 {
		return l.Spec.Requests[i], true
	}
	return coordv1alpha1.LeaseRequest{}, false
}

// isWaiting reports whether the controller lists id as waiting (so it has
// processed the request).
func isWaiting(l *coordv1alpha1.FencedLease, id string) bool {
	_, ok := requestOf(l, id)
	return ok && slices.ContainsFunc(l.Status.Waiting, func(w coordv1alpha1.WaitingRequest) bool { return w.HolderIdentity == id })
}

// waitLease polls the lease (as the admin, whose requests are not counted)
// until cond holds.
func (b *bench) waitLease(ctx context.Context, ns, name, what string, cond func(*coordv1alpha1.FencedLease) bool) error {
	return waitFor(ctx, 15*time.Second, 10*time.Millisecond, what, func(ctx context.Context) (bool, error) {
		l, err := b.getFencedLease(ctx, ns, name)
		if err != nil {
			return false, err
		}
		return cond(l), nil
	})
}

// takeoverResult is phase 1 for one system.
type takeoverResult struct {
	// beyond is, per iteration, the new holder's start minus the send time of
	// the old holder's last successful renewal minus the lease duration.
	beyond []time.Duration
	// gap is, per iteration, the new holder's start minus the moment the old
	// holder's context was cancelled; negative means both believed they led.
	gap      []time.Duration
	failures int
}

// kfTakeover: A holds, B waits, A's client freezes at a random point of its
// renewal cycle; measure when B starts leading.
func (b *bench) kfTakeover(ctx context.Context) (takeoverResult, error) {
	const ns, name = "kf-takeover", "takeover"
	if err := b.createFencedLease(ctx, ns, name, b.opts.leaseSeconds); err != nil {
		return takeoverResult{}, err
	}
	renewEvery := b.lease / 3 // fence.Config's default RenewInterval
	return b.takeovers(ctx, "kubefence takeover", renewEvery,
		func(id string) (*candidate, error) {
			c, err := b.startKF(ctx, ns, name, id)
			if err != nil {
				return nil, err
			}
			return c.candidate, nil
		},
		func(w *candidate) error {
			return b.waitLease(ctx, ns, name, "the controller to list the waiter", func(l *coordv1alpha1.FencedLease) bool { return isWaiting(l, w.id) })
		},
		func() {
			// The next iteration starts from a free lease with nobody queued.
			_ = b.waitLease(ctx, ns, name, "the lease to be free", func(l *coordv1alpha1.FencedLease) bool {
				return l.Status.HolderIdentity == "" && len(l.Spec.Requests) == 0
			})
		})
}

// handoverResult is phase 2 for one system.
type handoverResult struct {
	// latency is, per iteration, the next holder's start minus the moment the
	// release was asked for.
	latency  []time.Duration
	failures int
}

// kfHandover: two electors pass the lease back and forth with Release; the
// one releasing queues again by itself.
func (b *bench) kfHandover(ctx context.Context) (handoverResult, error) {
	const ns, name = "kf-handover", "handover"
	var res handoverResult
	if err := b.createFencedLease(ctx, ns, name, b.opts.leaseSeconds); err != nil {
		return res, err
	}
	x, err := b.startKF(ctx, ns, name, "x")
	if err != nil {
		return res, err
	}
	defer x.stop()
	if _, err := x.waitStart(ctx, 15*time.Second); err != nil {
		return res, err
	}
	y, err := b.startKF(ctx, ns, name, "y")
	if err != nil {
		return res, err
	}
	defer y.stop()
	cands := []*kfCandidate{x, y}
	holder := 0

	ready := func(h, w *kfCandidate) error {
		if err := b.waitLease(ctx, ns, name, "the next candidate to queue", func(l *coordv1alpha1.FencedLease) bool {
			return isWaiting(l, w.id) && l.Status.HolderIdentity == h.id
		}); err != nil {
			return err
		}
		return waitFor(ctx, 15*time.Second, 5*time.Millisecond, "the holder to lead", func(context.Context) (bool, error) {
			_, ok := h.el.Token()
			return ok, nil
		})
	}
	if err := ready(x, y); err != nil {
		return res, err
	}
	for i := range b.opts.handovers {
		h, w := cands[holder], cands[1-holder]
		if err := ready(h, w); err != nil {
			return res, err
		}
		if err := sleep(ctx, 20*time.Millisecond+rand.N(100*time.Millisecond)); err != nil {
			return res, err
		}
		w.drain()
		asked := time.Now()
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := h.el.Release(rctx)
		cancel()
		if err != nil {
			return res, fmt.Errorf("release %d: %w", i, err)
		}
		start, err := w.waitStart(ctx, 10*time.Second)
		if err != nil {
			if err := tolerate(ctx, &res.failures, b.opts.handovers, "kubefence hand-over", i, err); err != nil {
				return res, err
			}
			continue
		}
		res.latency = append(res.latency, start.Sub(asked))
		holder = 1 - holder
	}
	// The last hand-over's queueing and events.
	if err := ready(cands[holder], cands[1-holder]); err != nil {
		return res, err
	}
	if err := sleep(ctx, 200*time.Millisecond); err != nil {
		return res, err
	}
	return res, nil
}
