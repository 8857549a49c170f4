package protocol

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// committed is lease l as o's renewal of the request of a at sent leaves it,
// had the renewal committed (o is not told).
func committed(t *testing.T, o *OwnRequest, l *coordv1alpha1.FencedLease, sent time.Time) *coordv1alpha1.FencedLease {
	t.Helper()
	p, err := o.RenewPatch(l, "a", sent)
	if err != nil {
		t.Fatal(err)
	}
	c := l.DeepCopy()
	c.Spec.Requests[0] = p[1].Value.(coordv1alpha1.LeaseRequest)
	return c
}

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
	renewed := committed(t, &o, l, sent)
	o.Renewed(renewed, "a")
	if !o.Owns(renewed.Spec.Requests[0]) || o.Owns(mine) {
		t.Fatal("after an answered renewal it owns the renewed request only")
	}

	// A renewal without an answer: the request as it would leave it is its
	// own too, if it committed.
	lost := committed(t, &o, renewed, sent.Add(time.Second))
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

// The previous release's controller writes the whole lease (its finalizer,
// an expired request's removal) with types that lack renewTime, so a renewed
// request loses its stamp without anyone renewing it: still this client's
// own. A renewal by another process raises renewSequence: not.
func TestOwnsARequestWhoseRenewTimeAnOlderWriterDropped(t *testing.T) {
	sent := time.Date(2026, 12, 1, 12, 0, 0, 1500, time.UTC)
	l := leaseWith("a", "a")
	var o OwnRequest
	o.Appended(l.Spec.Requests[0])
	renewed := committed(t, &o, l, sent)
	o.Renewed(renewed, "a")

	dropped := renewed.Spec.Requests[0]
	dropped.RenewTime = nil
	if !o.Owns(dropped) {
		t.Fatalf("owns %+v not, want owned: only its renewTime was dropped", dropped)
	}
	moved := dropped
	moved.RenewSequence++
	if o.Owns(moved) {
		t.Fatalf("owns %+v, want not: someone renewed it", moved)
	}
	stamped := renewed.Spec.Requests[0]
	later := metav1.NewMicroTime(stamped.RenewTime.Add(time.Millisecond))
	stamped.RenewTime = &later
	if o.Owns(stamped) {
		t.Fatalf("owns %+v, want not: its renewTime is not the one this client wrote", stamped)
	}
}
