package heartbeat_test

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/test/testenv"
)

// heartbeatLease is a heartbeat Lease of holder made by user, renewed at at.
func heartbeatLease(ns, name, holder, user string, at time.Time) *coordinationv1.Lease {
	rt := metav1.NewMicroTime(at)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels:      map[string]string{coordv1alpha1.HeartbeatLabel: "true"},
			Annotations: map[string]string{coordv1alpha1.HeartbeatUserAnnotation: user}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, RenewTime: &rt},
	}
}

// refusedBy asserts err is the heartbeat policy's refusal, its message
// containing want.
func refusedBy(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: accepted, want refused by the heartbeat policy (%q)", what, want)
	}
	if !strings.Contains(err.Error(), "kubefence") && !strings.Contains(err.Error(), "heartbeats") || !strings.Contains(err.Error(), want) {
		t.Fatalf("%s: refused with %v, want the heartbeat policy's refusal saying %q", what, err, want)
	}
}

// Only the heartbeat's creator may write it; its holderIdentity and its
// annotation are fixed; its renewTime never moves back (the policy
// kubefence-heartbeats as shipped, against the real API server).
func TestHeartbeatPolicy(t *testing.T) {
	testenv.SkipIfShort(t)
	ctx := suiteCtx
	ns, err := cluster.Namespace(ctx, "hb-policy")
	if err != nil {
		t.Fatal(err)
	}
	alice, mallory := users["alice"], users["mallory"]
	now := time.Now()

	// The policy takes a moment to reach the API server's admission: wait
	// until a create under another user's name is refused.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := mallory.Create(ctx, heartbeatLease(ns, "probe", "x", "alice", now))
		if err != nil {
			refusedBy(t, "mallory creating a heartbeat annotated alice", err, "annotation kubefence.io/heartbeat-user")
			break
		}
		_ = cluster.Admin.Delete(ctx, heartbeatLease(ns, "probe", "x", "alice", now))
		if time.Now().After(deadline) {
			t.Fatal("the heartbeat policy was not enforced within 30 s")
		}
		time.Sleep(200 * time.Millisecond)
	}

	hb := heartbeatLease(ns, "hb-alice", "worker-a", "alice", now)
	if err := alice.Create(ctx, hb); err != nil {
		t.Fatalf("alice creating her heartbeat: %v", err)
	}
	noHolder := heartbeatLease(ns, "hb-none", "", "alice", now)
	noHolder.Spec.HolderIdentity = nil
	refusedBy(t, "a heartbeat without holderIdentity", alice.Create(ctx, noHolder), "holderIdentity")

	renew := func(c client.Client, change func(*coordinationv1.Lease)) error {
		var l coordinationv1.Lease
		if err := cluster.Admin.Get(ctx, client.ObjectKeyFromObject(hb), &l); err != nil {
			t.Fatal(err)
		}
		change(&l)
		return c.Update(ctx, &l)
	}
	at := func(d time.Duration) func(*coordinationv1.Lease) {
		return func(l *coordinationv1.Lease) {
			rt := metav1.NewMicroTime(now.Add(d))
			l.Spec.RenewTime = &rt
		}
	}
	if err := renew(alice, at(time.Second)); err != nil {
		t.Fatalf("alice renewing her heartbeat: %v", err)
	}
	refusedBy(t, "mallory renewing alice's heartbeat", renew(mallory, at(2*time.Second)), "mallory may not write it")
	refusedBy(t, "alice moving renewTime back", renew(alice, at(0)), "never moves back")
	refusedBy(t, "alice removing renewTime", renew(alice, func(l *coordinationv1.Lease) { l.Spec.RenewTime = nil }), "never moves back")
	refusedBy(t, "alice changing holderIdentity", renew(alice, func(l *coordinationv1.Lease) {
		other := "worker-b"
		l.Spec.HolderIdentity = &other
	}), "holderIdentity")
	refusedBy(t, "alice re-annotating her heartbeat as mallory's", renew(alice, func(l *coordinationv1.Lease) {
		l.Annotations[coordv1alpha1.HeartbeatUserAnnotation] = "mallory"
	}), "kept as created")
	refusedBy(t, "alice removing the label", renew(alice, func(l *coordinationv1.Lease) {
		delete(l.Labels, coordv1alpha1.HeartbeatLabel)
	}), "kept as created")
	refusedBy(t, "mallory deleting alice's heartbeat", mallory.Delete(ctx, hb), "may not delete it")

	// Leases without the label are not judged: client-go's own.
	plain := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain"}}
	if err := mallory.Create(ctx, plain); err != nil {
		t.Fatalf("mallory creating an unlabelled Lease: %v", err)
	}
	if err := alice.Delete(ctx, hb); err != nil {
		t.Fatalf("alice deleting her heartbeat: %v", err)
	}
}
