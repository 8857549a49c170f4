package protocol

import (
	"errors"
	"strings"
	"testing"
	"time"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// A client owns the request it appended, as its own writes left it: not a
// request of its identity it found, nor one another process renewed since.
func TestOwnRequest(t *testing.T) {
	sent := time.Date(2026, 12, 1, 12, 0, 0, 1500, time.UTC)
	l := leaseWith("a", "a", "b")
	mine := l.Spec.Requests[0]
	notOwn := func(o *OwnRequest, lease *coordv1alpha1.FencedLease, why string) {
		t.Helper()
		if o.Owns(lease.Spec.Requests[0]) {
			t.Fatalf("owns %+v, want not (%s)", lease.Spec.Requests[0], why)
		}
		if _, err := o.RenewPatch(lease, "a", sent); !errors.Is(err, ErrNotOwnRequest) || !strings.Contains(err.Error(), why) {
			t.Fatalf("renewing: %v, want ErrNotOwnRequest saying %q", err, why)
		}
		if p := o.WithdrawPatch(lease, "a"); p != nil {
			t.Fatalf("withdraw patch %v of a request not its own", p)
		}
	}

	// A fresh client finds a request of its identity: not its own.
	var fresh OwnRequest
	notOwn(&fresh, l, "not made by this client")

	// Appended: its own, renewed: still its own.
	var o OwnRequest
	o.Appended(mine)
	if !o.Owns(mine) || !o.Made() || o.WithdrawPatch(l, "a") == nil {
		t.Fatal("the appended request is not owned")
	}
	p, err := o.RenewPatch(l, "a", sent)
	if err != nil {
		t.Fatal(err)
	}
	renewed := l.DeepCopy()
	renewed.Spec.Requests[0] = p[1].Value.(coordv1alpha1.LeaseRequest)
	o.Renewed(renewed, "a")
	if !o.Owns(renewed.Spec.Requests[0]) || o.Owns(mine) {
		t.Fatal("after an answered renewal it owns the renewed request only")
	}

	// A renewal without an answer: the request as it would leave it is its
	// own too, if it committed.
	p, err = o.RenewPatch(renewed, "a", sent.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	lost := renewed.DeepCopy()
	lost.Spec.Requests[0] = p[1].Value.(coordv1alpha1.LeaseRequest)
	if !o.Owns(lost.Spec.Requests[0]) {
		t.Fatal("a renewal sent without an answer, then seen committed, is not owned")
	}

	// Another process renews it: no longer its own.
	twin := lost.DeepCopy()
	twin.Spec.Requests[0].RenewSequence++
	twin.Spec.Requests[0].RenewTime.Time = twin.Spec.Requests[0].RenewTime.Add(time.Millisecond)
	notOwn(&o, twin, "changed by another process")

	// Gone: disowned for good, even if the same request comes back.
	o.Appended(mine)
	o.Observe(leaseWith("", "b"), "a")
	if o.Made() {
		t.Fatal("a request seen gone is still owned")
	}
	notOwn(&o, l, "not made by this client")
}
