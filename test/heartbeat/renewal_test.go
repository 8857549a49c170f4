package heartbeat_test

import (
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/test/testenv"
)

// leaseSeconds is the tenures' duration here: short, so that expiries come
// quickly; heartbeats every interval.
const (
	leaseSeconds = 3
	interval     = time.Second
)

func createLease(t *testing.T, ns, name string) {
	t.Helper()
	l := &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: leaseSeconds}}
	if err := cluster.Admin.Create(suiteCtx, l); err != nil {
		t.Fatal(err)
	}
}

// request appends the request of identity (by user, through c), naming
// heartbeat if not empty.
func request(t *testing.T, c client.Client, ns, name, identity, user, heartbeat string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var l coordv1alpha1.FencedLease
		if err := c.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: name}, &l); err != nil {
			return err
		}
		l.Spec.Requests = append(l.Spec.Requests, coordv1alpha1.LeaseRequest{HolderIdentity: identity, User: user, Heartbeat: heartbeat})
		return c.Update(suiteCtx, &l)
	})
	if err != nil {
		t.Fatalf("requesting %s/%s as %s: %v", ns, name, identity, err)
	}
}

// waitHolder waits until the lease names holder (empty: nobody) and returns it.
func waitHolder(t *testing.T, ns, name, holder string, timeout time.Duration) *coordv1alpha1.FencedLease {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var l coordv1alpha1.FencedLease
		if err := cluster.Admin.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: name}, &l); err != nil {
			t.Fatal(err)
		}
		if l.Status.HolderIdentity == holder {
			return &l
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s: holder %q after %v, want %q", ns, name, l.Status.HolderIdentity, timeout, holder)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// acknowledge renews identity's request once (the grant's acknowledgement),
// stamped now, through c.
func acknowledge(t *testing.T, c client.Client, ns, name, identity string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var l coordv1alpha1.FencedLease
		if err := c.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: name}, &l); err != nil {
			return err
		}
		i := coordv1alpha1.RequestIndex(l.Spec.Requests, identity)
		l.Spec.Requests[i].RenewSequence++
		now := metav1.NewMicroTime(time.Now())
		l.Spec.Requests[i].RenewTime = &now
		return c.Update(suiteCtx, &l)
	})
	if err != nil {
		t.Fatalf("acknowledging %s/%s as %s: %v", ns, name, identity, err)
	}
}

// beat renews the heartbeat Lease (one Update, the holder's only write of a
// renewal) and returns when it was sent.
func beat(t *testing.T, c client.Client, hb *coordinationv1.Lease) time.Time {
	t.Helper()
	sent := time.Now()
	rt := metav1.NewMicroTime(sent)
	hb.Spec.RenewTime = &rt
	if err := c.Update(suiteCtx, hb); err != nil {
		t.Fatalf("renewing heartbeat %s: %v", hb.Name, err)
	}
	return sent
}

// versions are the resourceVersions of the leases.
func versions(t *testing.T, ns string, names []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range names {
		var l coordv1alpha1.FencedLease
		if err := cluster.Admin.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: n}, &l); err != nil {
			t.Fatal(err)
		}
		out[n] = l.ResourceVersion
	}
	return out
}

// heldBySession: n leases held by alice's identity proc, each request naming
// the session heartbeat proc-session, acknowledged (the session beating
// after each); bob's worker-b waits on each.
func heldBySession(t *testing.T, n int) (ns string, names []string, hb *coordinationv1.Lease) {
	t.Helper()
	ns, err := cluster.Namespace(suiteCtx, "hb-session")
	if err != nil {
		t.Fatal(err)
	}
	alice, bob := users["alice"], users["bob"]
	hb = heartbeatLease(ns, "proc-session", "proc", "alice", time.Now())
	if err := alice.Create(suiteCtx, hb); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		// One lease at a time, each grant acknowledged at once and the
		// session beating on, so that no tenure of the process lapses
		// while it takes up the next (a loaded machine is slow).
		name := fmt.Sprintf("l%d", i)
		names = append(names, name)
		createLease(t, ns, name)
		request(t, alice, ns, name, "proc", "alice", hb.Name)
		request(t, bob, ns, name, "worker-b", "bob", "")
		waitHolder(t, ns, name, "proc", 10*time.Second)
		acknowledge(t, alice, ns, name, "proc")
		beat(t, alice, hb)
	}
	return ns, names, hb
}

// A holder that renews only its heartbeat keeps the lease for three lease
// durations with no FencedLease write at all (the controller's nor its
// own), and is expired once it stops, the waiter granted.
func TestHeartbeatRenewalsNeedNoFencedLeaseWrite(t *testing.T) {
	testenv.SkipIfShort(t)
	ns, err := cluster.Namespace(suiteCtx, "hb-renew")
	if err != nil {
		t.Fatal(err)
	}
	alice, bob := users["alice"], users["bob"]
	hb := heartbeatLease(ns, "hb-worker-a", "worker-a", "alice", time.Now())
	if err := alice.Create(suiteCtx, hb); err != nil {
		t.Fatal(err)
	}
	createLease(t, ns, "l")
	request(t, alice, ns, "l", "worker-a", "alice", hb.Name)
	request(t, bob, ns, "l", "worker-b", "bob", "")
	granted := waitHolder(t, ns, "l", "worker-a", 10*time.Second)
	acknowledge(t, alice, ns, "l", "worker-a")
	time.Sleep(500 * time.Millisecond) // whatever the controller writes after the acknowledgement
	before := versions(t, ns, []string{"l"})
	var last time.Time
	for range 3 * leaseSeconds {
		time.Sleep(interval)
		last = beat(t, alice, hb)
	}
	l := waitHolder(t, ns, "l", "worker-a", 0)
	if l.Status.FencingToken != granted.Status.FencingToken {
		t.Fatalf("token %d after heartbeat renewals, want the grant's %d (I2)", l.Status.FencingToken, granted.Status.FencingToken)
	}
	if after := versions(t, ns, []string{"l"}); after["l"] != before["l"] {
		t.Fatalf("the FencedLease was written during heartbeat renewals (resourceVersion %s -> %s): %+v", before["l"], after["l"], l.Status)
	}
	l = waitHolder(t, ns, "l", "worker-b", 10*time.Second)
	took := l.Status.AcquireTime.Sub(last)
	if took < leaseSeconds*time.Second || took > leaseSeconds*time.Second+3*time.Second {
		t.Fatalf("worker-b granted %v after worker-a's last heartbeat, want within [L, L + 3 s] (L = %ds)", took, leaseSeconds)
	}
	if p := l.Status.PreviousHolder; p == nil || p.HolderIdentity != "worker-a" || p.Reason != coordv1alpha1.EndReasonSuperseded {
		t.Fatalf("previous holder %+v, want worker-a superseded", p)
	}
}

// One session heartbeat renews every tenure of its process: five tenures
// held for three lease durations by one Lease update per interval, and no
// FencedLease write.
func TestSessionHeartbeatWritesOncePerInterval(t *testing.T) {
	testenv.SkipIfShort(t)
	const n = 5
	ns, names, hb := heldBySession(t, n)
	time.Sleep(500 * time.Millisecond)
	before := versions(t, ns, names)
	hbVersion := hb.ResourceVersion
	writes := 0
	for range 3 * leaseSeconds {
		time.Sleep(interval)
		beat(t, users["alice"], hb)
		writes++
	}
	for _, name := range names {
		waitHolder(t, ns, name, "proc", 0)
	}
	if after := versions(t, ns, names); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("FencedLeases written while one session heartbeat renewed them: %v -> %v", before, after)
	}
	var l coordinationv1.Lease
	if err := cluster.Admin.Get(suiteCtx, client.ObjectKeyFromObject(hb), &l); err != nil {
		t.Fatal(err)
	}
	if l.ResourceVersion == hbVersion {
		t.Fatal("the session heartbeat was not written")
	}
	t.Logf("%d tenures held for %ds by %d writes (one per %v) of one Lease", n, 3*leaseSeconds, writes, interval)
}

// A silent session heartbeat expires every tenure naming it: each waiter is
// granted about L after the last heartbeat.
func TestSilentSessionHeartbeatExpiresEveryTenure(t *testing.T) {
	testenv.SkipIfShort(t)
	ns, names, hb := heldBySession(t, 5)
	var last time.Time
	for range 2 {
		time.Sleep(interval)
		last = beat(t, users["alice"], hb)
	}
	for _, name := range names {
		l := waitHolder(t, ns, name, "worker-b", 10*time.Second)
		if took := l.Status.AcquireTime.Sub(last); took < leaseSeconds*time.Second {
			t.Fatalf("%s granted to worker-b %v after the session's last heartbeat, before L = %ds", name, took, leaseSeconds)
		}
	}
}
