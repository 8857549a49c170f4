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
