package main

import (
	"encoding/json"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// applyTo applies ops to lease as JSON and returns the resulting queue.
func applyTo(t *testing.T, lease *coordv1alpha1.FencedLease, ops []patchOp) (string, error) {
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
			ops, err := handoverPatch(tc.lease, tc.to)
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
		ops, err := releasePatch(l, id)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := applyTo(t, l, ops); err != nil || got != want {
			t.Errorf("release %s: queue = %s (%v), want %s", id, got, err, want)
		}
	}

	// The tests pin the entry and the holder, not the renewal count.
	ops, _ := releasePatch(l, "a")
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
