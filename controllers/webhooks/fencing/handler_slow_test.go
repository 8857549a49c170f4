package fencing

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/fence/timing"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	lease := h.Leases.(*LeaseReader).Reader.(cacheLike).lease
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
	lease := h.Leases.(*LeaseReader).Reader.(cacheLike).lease
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

// A decision must end early enough for the write it admits to commit before
// the controller may expire the tenure: half of the tenure's commit-lag
// budget before expire - skew (AnswerBy). For a lease of 10 (skew + commit
// lag) or longer that is what "at most half the commit lag" already gives;
// for a shorter one the cut-off margin is only L/10, and a decision that
// started just before the cut-off must end quickly. Review of 1 December
// 2026, finding 2: a 2 s lease's decision starting 250 ms before the
// persisted expireTime, whose live read took 400 ms (less than half the 1 s
// commit lag), was answered 150 ms after expireTime, when the controller may
// already have granted the next tenure.
func TestDecisionThatEndsPastTheCutOffIsRefused(t *testing.T) {
	e := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, c := range []struct {
		name         string
		seconds      int32
		before, took time.Duration // the decision starts before expireTime and takes took
		allowed      bool
	}{
		// L = 2 s, S = 100 ms, C = 1 s: the cut-off is expireTime - 200 ms
		// (L/10), the commit-lag budget is 200 - 100 = 100 ms, and the
		// answer must leave by expireTime - 100 ms - 50 ms.
		{"2 s lease: the review's decision, answered 150 ms after expireTime", 2, ms(250), ms(400), false},
		{"2 s lease: started before the cut-off, answered 140 ms before expireTime", 2, ms(220), ms(80), false},
		{"2 s lease: started before the cut-off, answered 200 ms before expireTime", 2, ms(300), ms(100), true},
		{"2 s lease: a slow read long before the cut-off", 2, ms(1000), ms(400), true},
		// L = 15 s: margin S + C = 1.1 s, budget C; a decision started
		// before the cut-off and within C/2 always answers by
		// expireTime - 100 ms - 500 ms.
		{"15 s lease: started just before the cut-off, within half the commit lag", 15, ms(1150), ms(450), true},
		{"15 s lease: slower than half the commit lag", 15, ms(1500), ms(600), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, req, _ := benchHandler(t)
			lease := h.Leases.(*LeaseReader).Reader.(cacheLike).lease.DeepCopy()
			lease.Spec.LeaseDurationSeconds, lease.Status.LeaseDurationSeconds = c.seconds, c.seconds
			exp := metav1.NewMicroTime(e)
			lease.Status.ExpireTime = &exp
			fake := clocktesting.NewFakePassiveClock(e.Add(-c.before))
			h.Clock, h.CommitLag, h.Skew = fake, time.Second, timing.DefaultSkew
			// The webhook's clock moves on by took while the lease is read.
			h.Leases = &LeaseReader{Reader: readerAfter{cacheLike{lease}, func() { fake.SetTime(fake.Now().Add(c.took)) }}}
			resp := h.Handle(context.Background(), req)
			answered := fake.Now().Sub(e)
			if resp.Allowed != c.allowed {
				t.Fatalf("decision started %v before expireTime, answered at expireTime%+v: allowed %v, want %v (%v)", c.before, answered, resp.Allowed, c.allowed, resp.Result)
			}
			if !c.allowed && (resp.Result.Code != 503 || !strings.Contains(resp.Result.Message, "retry")) {
				t.Fatalf("refused with %d %q, want 503 (retry): the holder may have renewed meanwhile", resp.Result.Code, resp.Result.Message)
			}
		})
	}
}
