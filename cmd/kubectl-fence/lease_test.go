package main

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

func TestTokenState(t *testing.T) {
	for _, tc := range []struct {
		annotation string
		present    bool
		want       string
	}{
		{"7", true, stateCurrent},
		{"5", true, stateStale},
		{"9", true, stateAhead},
		{"", false, stateInvalid},
		{"", true, stateInvalid},
		{"seven", true, stateInvalid},
		{"-1", true, stateInvalid},
	} {
		if got := tokenState(tc.annotation, tc.present, 7); got != tc.want {
			t.Errorf("tokenState(%q, %v) = %s, want %s", tc.annotation, tc.present, got, tc.want)
		}
	}
}

func TestWaiters(t *testing.T) {
	l := leaseWith("a", "a", "c", "b")
	since := metav1.NewMicroTime(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	// status.waiting may still list a withdrawn request (x): spec is the truth.
	l.Status.Waiting = []coordv1alpha1.WaitingRequest{{HolderIdentity: "x", Since: since}, {HolderIdentity: "c", Since: since}}
	got := waiters(l)
	if len(got) != 2 || got[0].HolderIdentity != "c" || got[0].Since == nil || got[1].HolderIdentity != "b" || got[1].Since != nil {
		t.Errorf("waiters = %+v, want c (seen) then b (not yet seen)", got)
	}
	if got := waiters(leaseWith("", "a", "b")); len(got) != 2 {
		t.Errorf("without a holder every request waits: %+v", got)
	}
}

func TestLockDelay(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	l := leaseWith("")
	if got := lockDelay(l, now); got != "-" {
		t.Errorf("no lock-delay: %q", got)
	}
	l.Spec.LockDelaySeconds = 15
	if got := lockDelay(l, now); got != "15s" {
		t.Errorf("inactive lock-delay: %q", got)
	}
	until := metav1.NewMicroTime(now.Add(9800 * time.Millisecond))
	l.Status.LockDelayUntil = &until
	if got := lockDelay(l, now); got != "15s (until +9.8s)" {
		t.Errorf("active lock-delay: %q", got)
	}
	if got := lockDelay(l, now.Add(10*time.Second)); got != "15s" {
		t.Errorf("lock-delay that has passed: %q", got)
	}
}

func leaseWith(holder string, ids ...string) *coordv1alpha1.FencedLease {
	l := &coordv1alpha1.FencedLease{Spec: coordv1alpha1.FencedLeaseSpec{Requests: requests(ids...)}}
	l.Name, l.Namespace = "l", "ns"
	l.Status.HolderIdentity = holder
	return l
}
