package fencedlease

import (
	"testing"
	"time"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// A Step remembers what the reconcile loop remembers: a grant counts from
// when its status write returned; a write that failed, and a request
// removal, leave the memory as it was; a step without a write remembers its
// observation.
func TestStepRemembersWhatTheReconcilerDoes(t *testing.T) {
	s := newSim(t, 10, 0)
	s.join("a")
	now := s.clock.Now()
	grant, err := Decide(s.lease, Memory{}, 0, now, s.timing)
	if err != nil {
		t.Fatal(err)
	}
	updated, statusWrite := grant.Write(s.lease)
	if updated == nil || !statusWrite || updated.Status.HolderIdentity != "a" {
		t.Fatalf("a lease with one request: want a status write granting a, got %v (status write %v)", updated, statusWrite)
	}
	if m := grant.Remember(false, now); m != (Memory{}) {
		t.Fatalf("a grant whose write failed changed the memory: %v", m)
	}
	returned := now.Add(300 * time.Millisecond)
	m := grant.Remember(true, returned)
	o, ok := m.Observed()
	if !ok || o.Holder != "a" || !o.At.Equal(returned) || !o.Recorded.Equal(now) || o.Acknowledged {
		t.Fatalf("after the grant's write returned at +300ms: remembered %v, want a counted from +300ms, recorded at the decision, not acknowledged", m)
	}
	if again := grant.Remember(true, returned.Add(time.Second)); again.obs == m.obs {
		t.Fatal("Remember returned the memory of an earlier call: it must not change what an earlier step remembered")
	}

	// Nothing to write: the observation is remembered (a stamped renewal
	// observed).
	*s.lease = *updated
	later := now.Add(time.Second)
	s.renewStampedAt("a", later)
	quiet, err := Decide(s.lease, m, 0, later, s.timing)
	if err != nil {
		t.Fatal(err)
	}
	if u, _ := quiet.Write(s.lease); u != nil {
		t.Fatalf("a renewal: want no write, got %v", u.Status)
	}
	if o, _ := quiet.Remember(false, later).Observed(); o.RenewSequence != 1 || !o.At.Equal(later) || !quiet.Renewed() {
		t.Fatalf("a renewal observed at +1s: remembered %+v", o)
	}

	// A request removal (the holder never renewed past its expiry) keeps
	// the memory as it was.
	s2 := newSim(t, 10, 0)
	s2.join("a")
	g, _ := Decide(s2.lease, Memory{}, 0, now, s2.timing)
	u, _ := g.Write(s2.lease)
	*s2.lease = *u
	mem := g.Remember(true, now)
	expired := now.Add(11 * time.Second)
	removal, err := Decide(s2.lease, mem, 0, expired, s2.timing)
	if err != nil {
		t.Fatal(err)
	}
	if u, statusWrite := removal.Write(s2.lease); u == nil || statusWrite || coordv1alpha1.RequestIndex(u.Spec.Requests, "a") >= 0 {
		t.Fatalf("a holder that never renewed, past its expiry: want its request removed, got %v (status write %v)", u, statusWrite)
	}
	if got := removal.Remember(true, expired); got != mem {
		t.Fatalf("a request removal changed the memory: %v, want %v", got, mem)
	}
}
