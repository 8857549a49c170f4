package main

import (
	"cmp"
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
	gap []time.Duration
	// ctrl counts the controller's writes from the freeze until the new holder
	// settled (kubefence only).
	ctrl     writeCounts
	failures int
	stages   stages // kubefence's takeovers taken apart
}

// stages collects durations by stage (the stage constants).
type stages map[string][]time.Duration

func (s stages) add(name string, d time.Duration) { s[name] = append(s[name], d) }

// Stages of a kubefence takeover (they add up to the time beyond the lease) and of a hand-over (they add up to its latency).
const (
	stageExpiry  = "old holder's last renewal sent + L -> expiry write sent (delivery, allowance, reconcile)"
	stageExpire  = "expiry-and-grant write sent -> written"
	stageAck     = "grant written -> new holder's OnStartedLeading (watch + ack renewal)"
	stageRelease = "Release() called -> grant write sent (withdraw write + watch + reconcile)"
	stageGrant   = "grant write sent -> written"
)

// kfTakeover: A holds, B waits, A's client freezes at a random point of its
// renewal cycle; measure when B starts leading and take each takeover apart
// with the controller's writes.
func (b *bench) kfTakeover(ctx context.Context) (takeoverResult, error) {
	const ns, name = "kf-takeover", "takeover"
	if err := b.createFencedLease(ctx, ns, name, b.opts.leaseSeconds); err != nil {
		return takeoverResult{}, err
	}
	renewEvery := b.lease / 3 // fence.Config's default RenewInterval
	var before writeCounts    // the controller's writes when the waiter queued
	return b.takeovers(ctx, "kubefence takeover", renewEvery,
		func(id string) (*candidate, error) {
			c, err := b.startKF(ctx, ns, name, id)
			if err != nil {
				return nil, err
			}
			return c.candidate, nil
		},
		func(w *candidate) error {
			err := b.waitLease(ctx, ns, name, "the controller to list the waiter", func(l *coordv1alpha1.FencedLease) bool { return isWaiting(l, w.id) })
			before = b.ctrlRT.counted(ns)
			return err
		},
		func(res *takeoverResult, i int, began, start, t0 time.Time, w *candidate) error {
			return b.kfTakeoverStages(ctx, ns, i, began, start, t0, w, before, res)
		},
		func() {
			// The next iteration starts from a free lease with nobody queued.
			_ = b.waitLease(ctx, ns, name, "the lease to be free", func(l *coordv1alpha1.FencedLease) bool {
				return l.Status.HolderIdentity == "" && len(l.Spec.Requests) == 0
			})
		})
}

// kfTakeoverStages counts the controller's writes of one takeover and
// takes it apart.
func (b *bench) kfTakeoverStages(ctx context.Context, ns string, i int, began, start, t0 time.Time, w *candidate, before writeCounts, res *takeoverResult) error {
	// Let the controller record the new holder's first renewal and its events;
	// the new holder's next periodic renewal is a third of a lease away.
	if err := sleep(ctx, min(300*time.Millisecond, b.lease/6)); err != nil {
		return err
	}
	for k, v := range b.ctrlRT.counted(ns).sub(before) {
		res.ctrl[k] += v
	}
	// The controller expires and grants in one status write; only a holder
	// that never renewed needs a spec write (removing its request) first. It
	// counts the lease from when it observed the last renewal (in memory
	// only), so the first stage holds the renewal's delivery and the
	// allowance too.
	var expiry, grant *ctrlWrite
	writes := b.ctrlRT.trace(ns, began)
	for i := range writes {
		cw := &writes[i]
		if cw.ok && cw.category == catStatusGrant && cw.holder == w.id {
			grant = cw
			break
		}
		if cw.ok && cw.category == catSpecExpiry && expiry == nil {
			expiry = cw
		}
	}
	if grant == nil {
		fmt.Fprintf(os.Stderr, "bench: kubefence takeover %d: no grant write to the waiter\n", i)
		return nil
	}
	expiry = cmp.Or(expiry, grant)
	res.stages.add(stageExpiry, expiry.sent.Sub(t0.Add(b.lease)))
	res.stages.add(stageExpire, grant.done.Sub(expiry.sent))
	res.stages.add(stageAck, start.Sub(grant.done))
	return nil
}

// handoverResult is phase 2 for one system.
type handoverResult struct {
	// latency is, per iteration, the next holder's start minus the moment the
	// release was asked for.
	latency  []time.Duration
	ctrl     writeCounts
	n        int
	failures int
	stages   stages
}

// kfHandover: two electors pass the lease back and forth with Release; the
// one releasing queues again by itself.
func (b *bench) kfHandover(ctx context.Context) (handoverResult, error) {
	const ns, name = "kf-handover", "handover"
	res := handoverResult{stages: stages{}}
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
	ctrlBefore := b.ctrlRT.counted(ns)
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
		for _, cw := range b.ctrlRT.trace(ns, asked) {
			if cw.ok && cw.category == catStatusGrant && cw.holder == w.id {
				res.stages.add(stageRelease, cw.sent.Sub(asked))
				res.stages.add(stageGrant, cw.done.Sub(cw.sent))
				res.stages.add(stageAck, start.Sub(cw.done))
				break
			}
		}
		holder = 1 - holder
	}
	// The last hand-over's queueing and events.
	if err := ready(cands[holder], cands[1-holder]); err != nil {
		return res, err
	}
	if err := sleep(ctx, 200*time.Millisecond); err != nil {
		return res, err
	}
	res.n = len(res.latency)
	res.ctrl = b.ctrlRT.counted(ns).sub(ctrlBefore)
	return res, nil
}
