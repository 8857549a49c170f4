package fencing

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// slowReader serves the lease after the webhook's clock moved on by took.
type slowReader struct {
	cacheLike
	clock *clocktesting.FakePassiveClock
	took  time.Duration
}

func (s slowReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	s.clock.SetTime(s.clock.Now().Add(s.took))
	return s.cacheLike.Get(ctx, key, obj, opts...)
}

// The commit-lag bound runs from the lease read to the commit: a decision
// that took more than half of it (a slow or delayed read) is refused, since
// the lease may have changed hands after the read, and a write admitted on it
// could commit after the next grant.
func TestDecisionSlowerThanHalfTheCommitLagIsRefused(t *testing.T) {
	h, body := benchHandler(t)
	var ar admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &ar); err != nil {
		t.Fatal(err)
	}
	lease := h.Leases.Reader.(cacheLike).lease
	for _, c := range []struct {
		took    time.Duration
		allowed bool
	}{{100 * time.Millisecond, true}, {600 * time.Millisecond, false}} {
		fake := clocktesting.NewFakePassiveClock(time.Now())
		h.Clock, h.CommitLag = fake, time.Second
		h.Leases = &LeaseReader{Reader: slowReader{cacheLike: cacheLike{lease: lease}, clock: fake, took: c.took}}
		resp := h.Handle(context.Background(), admission.Request{AdmissionRequest: *ar.Request})
		if resp.Allowed != c.allowed {
			t.Fatalf("decision taking %v with a 1s commit lag: allowed %v, want %v (%v)", c.took, resp.Allowed, c.allowed, resp.Result)
		}
		if !c.allowed && resp.Result.Code != 503 {
			t.Fatalf("slow decision refused with %d, want 503 (retry)", resp.Result.Code)
		}
	}
}

// delayedReader serves the lease after a real delay, ignoring ctx as a read
// under way on the API server does.
type delayedReader struct {
	cacheLike
	delay time.Duration
}

func (d delayedReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	time.Sleep(d.delay)
	return d.cacheLike.Get(ctx, key, obj, opts...)
}

// A stopping manager cancels the context of every webhook call in flight
// (controller-runtime's webhook server derives them from the manager's) and
// then waits for their answers: a terminating replica still decides them
// within the call's time, rather than refuse a live holder's write with
// "context canceled" (test/upgrade saw it when a replica stopped during a
// rolling upgrade).
func TestCallsInFlightAreDecidedWhileTheManagerStops(t *testing.T) {
	h, body := benchHandler(t)
	var ar admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &ar); err != nil {
		t.Fatal(err)
	}
	lease := h.Leases.Reader.(cacheLike).lease
	h.Clock, h.CommitLag = clocktesting.NewFakePassiveClock(time.Now()), time.Second
	h.Leases = &LeaseReader{Reader: delayedReader{cacheLike: cacheLike{lease: lease}, delay: 20 * time.Millisecond}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the manager stops while the call is in flight
	resp := h.Handle(ctx, admission.Request{AdmissionRequest: *ar.Request})
	if !resp.Allowed {
		t.Fatalf("a live holder's write refused while the manager stops: %v", resp.Result)
	}
}
