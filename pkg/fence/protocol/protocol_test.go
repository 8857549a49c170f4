package protocol

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// applyTo applies ops to lease as JSON and returns the resulting queue.
func applyTo(t *testing.T, lease *coordv1alpha1.FencedLease, ops Patch) (string, error) {
	t.Helper()
	doc, err := json.Marshal(lease)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	p, err := jsonpatch.DecodePatch(raw)
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Apply(doc)
	if err != nil {
		return "", err
	}
	var got coordv1alpha1.FencedLease
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	return queueNames(&got), nil
}

func requests(ids ...string) []coordv1alpha1.LeaseRequest {
	var out []coordv1alpha1.LeaseRequest
	for _, id := range ids {
		out = append(out, coordv1alpha1.LeaseRequest{HolderIdentity: id, User: "user-" + id})
	}
	return out
}

func leaseWith(holder string, ids ...string) *coordv1alpha1.FencedLease {
	l := &coordv1alpha1.FencedLease{Spec: coordv1alpha1.FencedLeaseSpec{Requests: requests(ids...)}}
	l.Name, l.Namespace = "l", "ns"
	l.Status.HolderIdentity = holder
	return l
}

func TestHandoverPatch(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lease  *coordv1alpha1.FencedLease
		to     string
		want   string
		errors string
	}{
		{name: "next in line", lease: leaseWith("a", "a", "b", "c"), to: "b", want: "[b, c]"},
		{name: "from the back", lease: leaseWith("a", "a", "b", "c", "d"), to: "d", want: "[d, b, c]"},
		{name: "holder not first", lease: leaseWith("b", "a", "b", "c"), to: "c", want: "[c, a]"},
		{name: "ahead of the holder", lease: leaseWith("b", "a", "b", "c"), to: "a", want: "[a, c]"},
		{name: "to the holder", lease: leaseWith("a", "a", "b"), to: "a", errors: "already holds"},
		{name: "not waiting", lease: leaseWith("a", "a", "b"), to: "x", errors: "is not waiting"},
		{name: "no holder", lease: leaseWith("", "a", "b"), to: "b", errors: "has no holder"},
		{name: "release pending", lease: leaseWith("a", "b"), to: "b", errors: "release is pending"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ops, err := HandoverPatch(tc.lease, tc.to)
			if tc.errors != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errors) {
					t.Fatalf("error %v, want %q", err, tc.errors)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := applyTo(t, tc.lease, ops)
			if err != nil || got != tc.want {
				t.Errorf("queue = %s (%v), want %s", got, err, tc.want)
			}
		})
	}
}

func TestReleasePatch(t *testing.T) {
	l := leaseWith("a", "a", "b", "c")
	for id, want := range map[string]string{"a": "[b, c]", "b": "[a, c]", "c": "[a, b]"} {
		ops, err := ReleasePatch(l, id)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := applyTo(t, l, ops); err != nil || got != want {
			t.Errorf("release %s: queue = %s (%v), want %s", id, got, err, want)
		}
	}

	// The tests pin the entry and the holder, not the renewal count.
	ops, _ := ReleasePatch(l, "a")
	renewed := l.DeepCopy()
	renewed.Spec.Requests[0].RenewSequence = 9
	if _, err := applyTo(t, renewed, ops); err != nil {
		t.Errorf("a renewal made the release fail: %v", err)
	}
	moved := leaseWith("a", "b", "a", "c")
	if _, err := applyTo(t, moved, ops); err == nil {
		t.Error("the release applied to a queue that changed order")
	}
	regranted := leaseWith("b", "a", "b", "c")
	if _, err := applyTo(t, regranted, ops); err == nil {
		t.Error("the release applied after the holder changed")
	}
}

func TestRenewPatch(t *testing.T) {
	l := leaseWith("a", "a", "b")
	sent := time.Date(2026, 11, 30, 12, 0, 0, 1500, time.UTC)
	p, err := RenewPatch(l, "a", sent)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := applyTo(t, l, p); err != nil {
		t.Fatalf("renewal of an unchanged request: %v", err)
	}
	renewed := p[1].Value.(coordv1alpha1.LeaseRequest)
	if renewed.RenewSequence != 1 || !renewed.RenewTime.Time.Equal(sent.Truncate(time.Microsecond)) {
		t.Errorf("renewed request %+v, want renewSequence 1 and renewTime %v", renewed, sent.Truncate(time.Microsecond))
	}
	// The test operation pins the whole request: a renewal read before another
	// one does not apply.
	after := l.DeepCopy()
	after.Spec.Requests[0] = renewed
	if _, err := applyTo(t, after, p); err == nil {
		t.Error("a renewal built from an older read applied")
	}
	// renewTime never moves back.
	back, err := RenewPatch(after, "a", sent.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if got := back[1].Value.(coordv1alpha1.LeaseRequest).RenewTime; !got.Equal(renewed.RenewTime) {
		t.Errorf("a clock stepped back moved renewTime to %v, want it kept at %v", got, renewed.RenewTime)
	}
	if _, err := RenewPatch(l, "x", sent); err == nil || !strings.Contains(err.Error(), `no request of "x"`) {
		t.Errorf("renewing a missing request: %v", err)
	}
}

func TestWithdrawPatch(t *testing.T) {
	l := leaseWith("a", "a", "b", "c")
	if got, err := applyTo(t, l, WithdrawPatch(l, "b")); err != nil || got != "[a, c]" {
		t.Errorf("withdraw b: queue = %s (%v), want [a, c]", got, err)
	}
	if p := WithdrawPatch(l, "x"); p != nil {
		t.Errorf("withdrawing a missing request gave %v, want nil", p)
	}
	renewed := l.DeepCopy()
	renewed.Spec.Requests[1].RenewSequence++
	if _, err := applyTo(t, renewed, WithdrawPatch(l, "b")); err == nil {
		t.Error("a withdrawal built from an older read applied")
	}
}
