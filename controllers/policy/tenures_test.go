package policy

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// lateProber answers as an API server whose cache shows the new entry only
// from caughtUp on (before, it still accepts the old token), and records
// when it first showed it.
type lateProber struct {
	mu       sync.Mutex
	caughtUp time.Time
	old, new int64
	shownAt  time.Time
}

func (p *lateProber) Probe(_ context.Context, _ APIServer, _, _ string, token int64) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Now().Before(p.caughtUp) {
		return token == p.old, nil
	}
	if p.shownAt.IsZero() {
		p.shownAt = time.Now()
	}
	return token == p.new, nil
}

// TestGrantWaitsTheCommitLagAfterTheBarrier: after a tenure, however it
// ended, the old holder may have had a write admitted by an API server up to
// the moment that server shows the new entry (the barrier's end), and that
// write may commit up to CommitLag later. A holder's own release included:
// the table names the holder until the controller writes it after the
// release, so a write with the released token sent after the release is
// admitted too (the soak's violations; on a real API server
// TestPolicyStaleWriteAfterReleaseCommitsBeforeTheNextGrant in test/history). So the grant may be written
// to status (Grant returns) no sooner than CommitLag after the barrier, not
// after the table write: with a barrier slower than the lag, counting from
// the table write would not wait at all.
func TestGrantWaitsTheCommitLagAfterTheBarrier(t *testing.T) {
	for _, reason := range []coordv1alpha1.EndReason{coordv1alpha1.EndReasonExpired, coordv1alpha1.EndReasonReleased} {
		t.Run(string(reason), func(t *testing.T) { grantWaitsTheCommitLagAfterTheBarrier(t, reason) })
	}
}

func grantWaitsTheCommitLagAfterTheBarrier(t *testing.T, reason coordv1alpha1.EndReason) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	installed := Settings{ControllerUsers: []string{"kubefence"}, Incarnation: "one"}.FencingPolicy()
	table := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: coordv1alpha1.TenureTableName},
		Data: map[string]string{IncarnationKey: "one", coordv1alpha1.TenureTableKey: "\njob " + Entry{Token: 5, Held: true, User: "alice", Attempt: "1"}.encode()}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(installed, table).Build()

	const lag = 200 * time.Millisecond
	p := &lateProber{caughtUp: time.Now().Add(3 * lag), old: 5, new: 6}
	tn := &Tenures{
		Table:     &Table{Reader: c, Writer: c},
		Barrier:   &Barrier{Servers: servers("a"), Prober: p, Interval: 5 * time.Millisecond, Timeout: 5 * time.Second},
		CommitLag: lag,
	}
	lease := &coordv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "job", UID: "u1", ResourceVersion: "7"},
		Spec: coordv1alpha1.FencedLeaseSpec{Requests: []coordv1alpha1.LeaseRequest{
			{HolderIdentity: "alice", User: "alice"}, {HolderIdentity: "bob", User: "bob"}}},
		Status: coordv1alpha1.FencedLeaseStatus{HolderIdentity: "alice", FencingToken: 5},
	}
	next := &coordv1alpha1.FencedLeaseStatus{HolderIdentity: "bob", FencingToken: 6,
		PreviousHolder: &coordv1alpha1.PreviousHolder{HolderIdentity: "alice", FencingToken: 5, Reason: reason}}

	if _, err := tn.Grant(context.Background(), lease, next); err != nil {
		t.Fatalf("Grant: %v", err)
	}
	returned := time.Now()
	p.mu.Lock()
	shown := p.shownAt
	p.mu.Unlock()
	if shown.IsZero() {
		t.Fatal("the barrier passed before the API server showed the new entry")
	}
	if waited := returned.Sub(shown); waited < lag {
		t.Errorf("the grant may be written %v after the last API server showed the new entry; want at least the commit lag %v", waited, lag)
	}
}

// Sync runs at the top of every reconcile, before the controller decides:
// for a tenure whose holder's identity was queued again by another user
// than the one granted (status.holderUser), it must not write that user
// into the table as the holder's ("same tenure, the status is the truth")
// but end the tenure there: the fencing policy then passes nobody on the
// identity path and refuses the token.
func TestSyncDoesNotPassTheTenureToARequestMadeAgainByAnotherUser(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := coordv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	installed := Settings{ControllerUsers: []string{"kubefence"}, Incarnation: "one"}.FencingPolicy()
	table := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: coordv1alpha1.TenureTableName},
		Data: map[string]string{IncarnationKey: "one", coordv1alpha1.TenureTableKey: "\njob " + Entry{Token: 42, Held: true, User: "alice", Attempt: "1"}.encode()}}
	lease := &coordv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "job", UID: "u1"},
		Spec: coordv1alpha1.FencedLeaseSpec{Requests: []coordv1alpha1.LeaseRequest{
			{HolderIdentity: "bob", User: "bob"}, {HolderIdentity: "alice", User: "mallory"}}},
		Status: coordv1alpha1.FencedLeaseStatus{HolderIdentity: "alice", HolderUser: "alice", FencingToken: 42},
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(installed, table, lease).Build()
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(lease), lease); err != nil {
		t.Fatal(err)
	}
	tn := &Tenures{Table: &Table{Reader: c, Writer: c}, Leases: c}
	if err := tn.Sync(t.Context(), lease); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	e, found, err := tn.Table.Get(t.Context(), "ns", "job")
	if err != nil || !found {
		t.Fatalf("entry: found %v, %v", found, err)
	}
	if e.Held || e.Token != 42 {
		t.Fatalf("entry %+v after Sync, want token 42 with no holder: mallory's request under alice's identity is not alice's tenure", e)
	}
}
