package fence

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// A session Elector stepping down from a tenure it keeps (a stale refusal)
// removes the heartbeat from its own request, testing it first, so that
// the session's beats for its other tenures stop renewing this one; a
// request that is not its own is left alone. (The patch's effect on expiry
// is the controller's TestHeartbeatRenewalsKeepTheTenureWithoutWrites rule:
// a request without heartbeat renews only by patches.)
func TestDetachRemovesTheHeartbeatFromItsOwnRequestOnly(t *testing.T) {
	s := runtime.NewScheme()
	if err := coordv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	req := coordv1alpha1.LeaseRequest{HolderIdentity: "proc", User: "alice", RenewSequence: 1, Heartbeat: "proc-session"}
	lease := &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "l"},
		Spec: coordv1alpha1.FencedLeaseSpec{Requests: []coordv1alpha1.LeaseRequest{{HolderIdentity: "other", User: "bob"}, req}}}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(lease).Build()
	session := NewSession(c, "ns", "proc-session", "proc")
	e, err := New(Config{Client: c, Namespace: "ns", Name: "l", Identity: "proc", User: "alice", Heartbeat: &Heartbeat{Session: session},
		Callbacks: Callbacks{OnStartedLeading: func(context.Context, int64) {}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var cur coordv1alpha1.FencedLease
	if err := c.Get(ctx, client.ObjectKeyFromObject(lease), &cur); err != nil {
		t.Fatal(err)
	}
	e.view.offer(&cur)

	// Not its own (another process's request of the identity): left alone.
	if err := e.detach(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(lease), &cur); err != nil {
		t.Fatal(err)
	}
	if cur.Spec.Requests[1].Heartbeat == "" {
		t.Fatal("detached a request this Elector did not make")
	}

	e.own.Appended(req)
	if err := e.detach(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(lease), &cur); err != nil {
		t.Fatal(err)
	}
	if got := cur.Spec.Requests[1]; got.Heartbeat != "" || got.RenewSequence != 1 || cur.Spec.Requests[0].HolderIdentity != "other" {
		t.Fatalf("requests after detach: %+v; want proc's without heartbeat, the rest unchanged", cur.Spec.Requests)
	}
	if !e.own.Owns(cur.Spec.Requests[1]) {
		t.Fatal("the detached request is no longer this Elector's own: it could not withdraw it")
	}
}
