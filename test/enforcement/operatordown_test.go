package enforcement_test

import (
	"fmt"
	"testing"
	"time"

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

	var lease coordv1alpha1.FencedLease
	must(t, h.admin.Get(h.ctx, client.ObjectKey{Namespace: ns, Name: "short"}, &lease))
	forged := lease.DeepCopy()
	forged.Spec.Requests[coordv1alpha1.RequestIndex(forged.Spec.Requests, "bob")].RenewSequence += 100
	checkLease(t, h, "operator down: alice renews bob's request", h.users["alice"].Update(h.ctx, forged), "only the holder can renew it", false)
	stolen := lease.DeepCopy()
	stolen.Status.HolderIdentity = "alice"
	stolen.Status.FencingToken = token + 1
	checkLease(t, h, "operator down: alice grants herself the lease in status", h.users["alice"].Status().Update(h.ctx, stolen), "status is written only by the kubefence controller", false)
	queued := lease.DeepCopy()
	queued.Spec.Requests = append([]coordv1alpha1.LeaseRequest{{HolderIdentity: "alice", User: "alice"}}, queued.Spec.Requests...)
	checkLease(t, h, "operator down: alice queues before bob", h.users["alice"].Update(h.ctx, queued), "new requests are appended at the end of the queue", false)
}
