package enforcement_test

import (
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence"
)

// renewalsKeepWorking is policy mode with every operator process down: the
// policy kubefence-fencedleases, not a webhook, admits FencedLease writes,
// so bob's elector keeps renewing lease ns/short (L = 2 s) for 3 L, its tenure
// does not end at its own deadline, and its guarded writes succeed
// throughout; a forged renewal of its request and a stolen grant are refused
// by the policy.
// forgeLease sends write on a fresh read of lease ns/short, again while bob's
// renewals (every L/3) make it conflict: a conflict is decided before
// admission, and the test wants admission's answer.
func forgeLease(t *testing.T, h *harness, ns string, write func(*coordv1alpha1.FencedLease) error) error {
	t.Helper()
	for i := 0; ; i++ {
		var lease coordv1alpha1.FencedLease
		must(t, h.admin.Get(h.ctx, client.ObjectKey{Namespace: ns, Name: "short"}, &lease))
		err := write(&lease)
		if !apierrors.IsConflict(err) || i == 20 {
			return err
		}
	}
}

func renewalsKeepWorking(t *testing.T, h *harness, ns string, bob *elector) {
	t.Helper()
	const l = 2 * time.Second
	renewSeq := func() int64 {
		var lease coordv1alpha1.FencedLease
		must(t, h.admin.Get(h.ctx, client.ObjectKey{Namespace: ns, Name: "short"}, &lease))
		return lease.Spec.Requests[coordv1alpha1.RequestIndex(lease.Spec.Requests, "bob")].RenewSequence
	}
	token, ok := bob.el.Token()
	if !ok {
		t.Fatalf("operator down: bob does not lead ns/short when the operator stops")
	}
	first := renewSeq()
	writer := fence.NewFencedClient(h.users["bob"], "short", bob.el)
	must(t, writer.Create(h.ctx, widget(ns, "renewing", "", "", "bob")))
	start := time.Now()
	for i := 0; time.Since(start) < 3*l; i++ {
		time.Sleep(l / 4)
		tok, ok := bob.el.Token()
		if !ok || tok != token {
			t.Fatalf("operator down: bob stopped leading ns/short %v after the operator stopped (L = %v): its renewals failed", time.Since(start), l)
		}
		w := widget(ns, "renewing", "", "", "")
		must(t, h.admin.Get(h.ctx, client.ObjectKeyFromObject(w), w))
		_ = unstructured.SetNestedField(w.Object, fmt.Sprintf("bob-%d", i), "spec", "writer")
		check(t, h, fmt.Sprintf("operator down: bob's guarded write %v in", time.Since(start).Round(time.Millisecond)), writer.Update(h.ctx, w), accepted)
	}
	if got := renewSeq(); got < first+3 {
		t.Errorf("operator down: bob's renewSequence went from %d to %d in %v, want at least 3 renewals admitted", first, got, 3*l)
	}

	alice := h.users["alice"]
	checkLease(t, h, "operator down: alice renews bob's request", forgeLease(t, h, ns, func(l *coordv1alpha1.FencedLease) error {
		l.Spec.Requests[coordv1alpha1.RequestIndex(l.Spec.Requests, "bob")].RenewSequence += 100
		return alice.Update(h.ctx, l)
	}), "only the holder can renew it", false)
	checkLease(t, h, "operator down: alice grants herself the lease in status", forgeLease(t, h, ns, func(l *coordv1alpha1.FencedLease) error {
		l.Status.HolderIdentity = "alice"
		l.Status.FencingToken = token + 1
		return alice.Status().Update(h.ctx, l)
	}), "status is written only by the kubefence controller", false)
	checkLease(t, h, "operator down: alice queues before bob", forgeLease(t, h, ns, func(l *coordv1alpha1.FencedLease) error {
		l.Spec.Requests = append([]coordv1alpha1.LeaseRequest{{HolderIdentity: "alice", User: "alice"}}, l.Spec.Requests...)
		return alice.Update(h.ctx, l)
	}), "new requests are appended at the end of the queue", false)
}
