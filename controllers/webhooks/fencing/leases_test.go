package fencing

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/flowcontrol"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence/timing"
)

// gatedReader serves a lease whose token is the number of reads sent so
// far; each read waits for a release.
type gatedReader struct {
	client.Reader
	started atomic.Int64
	release chan struct{}
}

func (g *gatedReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	n := g.started.Add(1)
	<-g.release
	l := obj.(*coordv1alpha1.FencedLease)
	exp := metav1.NewMicroTime(time.Now().Add(time.Minute))
	*l = coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Spec:   coordv1alpha1.FencedLeaseSpec{Requests: []coordv1alpha1.LeaseRequest{{HolderIdentity: "a", User: "alice"}}},
		Status: coordv1alpha1.FencedLeaseStatus{HolderIdentity: "a", FencingToken: n, ExpireTime: &exp}}
	return nil
}

// fakeNow is a clock that moves only when told.
type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeNow) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeNow) step() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Millisecond)
	return c.t
}

// The coalescing rule: a decision shares a read only if the read was sent
// after the decision arrived. One sent before it (or at the same instant)
// might miss a grant or a tenure end committed just before the write
// arrived, and is never shared; the decision waits for the next read, and
// every decision that arrived meanwhile shares that one. A read sent after
// a decision arrived is shared, even if the decision asks for it later (it
// was slow to ask, decoding its review): one read running and one queued
// per lease.
func TestLeaseReaderJoinsOnlyReadsSentAfterArrival(t *testing.T) {
	g := &gatedReader{release: make(chan struct{})}
	clk := &fakeNow{t: time.Unix(1000, 0)}
	r := &LeaseReader{Reader: g, now: clk.now}
	ctx := context.Background()
	read := func(arrived time.Time, into chan<- LeaseState) {
		st, err := r.Read(ctx, "ns", "job", arrived)
		if err != nil {
			t.Error(err)
		}
		into <- st
	}

	// Decision E arrives at t+1 ms but asks only after decision A, which
	// arrives at t+2 ms and sends read 1 at t+2 ms.
	eArrived := clk.step()
	aArrived := clk.step()
	first := make(chan LeaseState, 1)
	go read(aArrived, first)
	waitUntil(t, func() bool { return g.started.Load() == 1 })

	// Decisions that arrived at the instant read 1 was sent (A's own
	// arrival), and after: none may use it.
	var wg sync.WaitGroup
	later := make(chan LeaseState, 10)
	for i := range 10 {
		arrived := aArrived
		if i%2 == 1 {
			arrived = clk.step()
		}
		wg.Add(1)
		go func() { defer wg.Done(); read(arrived, later) }()
	}
	// Decision E arrived before read 1 was sent: it shares it.
	early := make(chan LeaseState, 1)
	go read(eArrived, early)
	time.Sleep(50 * time.Millisecond)
	if got := g.started.Load(); got != 1 {
		t.Fatalf("%d reads sent while read 1 runs, want 1", got)
	}

	clk.step()
	g.release <- struct{}{} // read 1 ends; read 2 is sent
	if st := <-first; st.Token != 1 {
		t.Fatalf("decision A got read %d, want 1", st.Token)
	}
	if st := <-early; st.Token != 1 {
		t.Fatalf("a decision that arrived before read 1 was sent got read %d, want 1 (shared)", st.Token)
	}
	waitUntil(t, func() bool { return g.started.Load() == 2 })
	g.release <- struct{}{}
	wg.Wait()
	close(later)
	for st := range later {
		if st.Token != 2 {
			t.Fatalf("a decision that arrived when read 1 was sent, or after, got read %d, want 2 (a read sent after it arrived)", st.Token)
		}
	}
	if got := r.Reads(); got != 2 {
		t.Fatalf("API reads %d for 12 decisions, want 2", got)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

// staticReader serves one lease: alice holds token 5 and stamped her last
// renewal an hour ahead (policy mode bounds no stamp by a clock).
type staticReader struct{ client.Reader }

func (staticReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	exp := metav1.NewMicroTime(time.Now().Add(-time.Second))
	future := metav1.NewMicroTime(time.Now().Add(time.Hour))
	*obj.(*coordv1alpha1.FencedLease) = coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Spec: coordv1alpha1.FencedLeaseSpec{Requests: []coordv1alpha1.LeaseRequest{
			{HolderIdentity: "a", User: "alice", RenewTime: &future}, {HolderIdentity: "b", User: "bob"}}},
		Status: coordv1alpha1.FencedLeaseStatus{HolderIdentity: "a", FencingToken: 5, ExpireTime: &exp, LeaseDurationSeconds: 15}}
	return nil
}

// In policy mode the webhook still judges /scale and evictions. A holder's
// stamp is bounded by no clock there, so the expiry it implies can lie past
// the next grant; the tenure table, written before the grant's barrier and
// commit-lag wait, is what ends the tenure for the webhook: once it names
// another token (or no holder), the status's holder counts as gone.
func TestLeaseReaderEndsATenureTheTenureTableNoLongerNames(t *testing.T) {
	ctx := context.Background()
	for name, c := range map[string]struct {
		token      int64
		held       bool
		wantHolder string
	}{
		"the table names the tenure":      {5, true, "a"},
		"the table names the next grant":  {6, true, ""},
		"the table says the tenure ended": {5, false, ""},
	} {
		t.Run(name, func(t *testing.T) {
			r := &LeaseReader{Reader: staticReader{}, Tenures: func(context.Context, string, string) (int64, bool, error) {
				return c.token, c.held, nil
			}}
			st, err := r.Read(ctx, "ns", "job", time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if st.Holder != c.wantHolder {
				t.Errorf("holder %q, want %q", st.Holder, c.wantHolder)
			}
			if c.wantHolder == "" {
				in := Input{Namespace: "ns", Now: time.Now(), Skew: timing.DefaultSkew}
				if v := current(in, "job", st, 5); v.Allowed {
					t.Errorf("token 5 accepted after the table moved on: %+v", v)
				}
			}
		})
	}
}

// The reader counts a tenure as ended as soon as the lease says so in the API
// server, before the controller writes the end to status: the holder's
// request is gone, made again (its renewSequence below the acknowledged
// one), or made again by another user than the one granted the tenure
// (status.holderUser). alice was granted token 42 with a fresh request and
// renewed with stamps, so status still says renewSequence 0; a request made
// again also starts at 0, and only its user tells it from hers.
func TestReadLeaseEndsATenureItsRequestNoLongerCarries(t *testing.T) {
	exp := metav1.NewMicroTime(time.Now().Add(10 * time.Second))
	stamp := metav1.NewMicroTime(time.Now())
	alice := coordv1alpha1.LeaseRequest{HolderIdentity: "alice", User: "alice", RenewSequence: 3, RenewTime: &stamp}
	bob := coordv1alpha1.LeaseRequest{HolderIdentity: "bob", User: "bob"}
	for _, c := range []struct {
		name       string
		requests   []coordv1alpha1.LeaseRequest
		holderUser string
		ackedSeq   int64
		deleting   bool
		// wantUser is the holder's user the reader must name ("" for no holder).
		wantUser string
	}{
		{"the holder's request, renewed with stamps", []coordv1alpha1.LeaseRequest{alice, bob}, "alice", 0, false, "alice"},
		{"the holder's request is gone (released)", []coordv1alpha1.LeaseRequest{bob}, "alice", 0, false, ""},
		{"made again by another user than status.holderUser", []coordv1alpha1.LeaseRequest{bob, {HolderIdentity: "alice", User: "mallory"}}, "alice", 0, false, ""},
		{"made again, its renewSequence below the acknowledged one", []coordv1alpha1.LeaseRequest{bob, {HolderIdentity: "alice", User: "alice"}}, "alice", 3, false, ""},
		{"the lease is being deleted", []coordv1alpha1.LeaseRequest{alice, bob}, "alice", 0, true, ""},
		// docs/versioning.md: an earlier controller's status names no user,
		// and the request of the holder's identity counts, whoever made it.
		{"a status without holderUser (an earlier controller's)", []coordv1alpha1.LeaseRequest{bob, {HolderIdentity: "alice", User: "mallory"}}, "", 0, false, "mallory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			lease := &coordv1alpha1.FencedLease{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "job"},
				Spec:       coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: 15, Requests: c.requests},
				Status: coordv1alpha1.FencedLeaseStatus{HolderIdentity: "alice", HolderUser: c.holderUser, FencingToken: 42,
					RenewSequence: c.ackedSeq, LeaseDurationSeconds: 15, ExpireTime: &exp},
			}
			if c.deleting {
				now := metav1.Now()
				lease.DeletionTimestamp = &now
			}
			st, err := readLease(context.Background(), cacheLike{lease}, "ns", "job")
			if err != nil {
				t.Fatal(err)
			}
			if st.HolderUser != c.wantUser || (st.Holder != "") != (c.wantUser != "") {
				t.Fatalf("holder %q, user %q (token %d); want user %q", st.Holder, st.HolderUser, st.Token, c.wantUser)
			}
			if c.wantUser == "" {
				in := Input{Namespace: "ns", Now: time.Now(), Skew: timing.DefaultSkew}
				if v := current(in, "job", st, 42); v.Allowed {
					t.Errorf("token 42 accepted after its tenure ended in the API server: %+v", v)
				}
				if isHolder(Requester{Username: "mallory"}, st) {
					t.Errorf("mallory's tokenless writes (DELETE, /status, /scale) pass as the holder's")
				}
			}
		})
	}
}

// apiReader stands for the API server: every GET takes latency; every
// namespace holds lease "job" (held by bob), nothing else exists.
type apiReader struct {
	client.Reader
	latency time.Duration
}

func (a apiReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	select {
	case <-time.After(a.latency):
	case <-ctx.Done():
		return ctx.Err()
	}
	if key.Name != "job" {
		return apierrors.NewNotFound(coordv1alpha1.GroupVersion.WithResource("fencedleases").GroupResource(), key.Name)
	}
	exp := metav1.NewMicroTime(time.Now().Add(time.Minute))
	*obj.(*coordv1alpha1.FencedLease) = coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Spec:   coordv1alpha1.FencedLeaseSpec{Requests: []coordv1alpha1.LeaseRequest{{HolderIdentity: "bob", User: "bob"}}},
		Status: coordv1alpha1.FencedLeaseStatus{HolderIdentity: "bob", FencingToken: 42, ExpireTime: &exp}}
	return nil
}

// flood starts n concurrent reads of distinct lease names that do not exist
// in namespace (dry-run creates labelled kubefence.io/lease=<random> cost
// nothing but RBAC to create some object there) and returns once every one
// has started its flight.
func flood(t *testing.T, r *LeaseReader, namespace string, n int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	before := r.Reads()
	for i := range n {
		go func() { _, _ = r.Read(ctx, namespace, fmt.Sprintf("forged-%d", i), time.Now()) }()
	}
	waitUntil(t, func() bool { return r.Reads() >= before+int64(n) })
}

// readsPromptly reads lease job of namespace from r, behind a flood of
// forged names in namespace tenant, and fails the test unless it reads bob's
// lease within half the commit lag; slow says what a slower read means.
func readsPromptly(t *testing.T, r *LeaseReader, namespace, slow string) {
	t.Helper()
	start := time.Now()
	st, err := r.Read(context.Background(), namespace, "job", time.Now())
	took := time.Since(start)
	if err != nil || st.Holder != "bob" {
		t.Fatalf("read of %s/job after the forged names in namespace tenant: %+v, %v", namespace, st, err)
	}
	if took > timing.DefaultCommitLag/2 {
		t.Fatalf("read of %s/job took %v behind the forged names in namespace tenant, more than half the commit lag (%v): %s", namespace, took, timing.DefaultCommitLag/2, slow)
	}
}

// A tenant that floods the webhook with forged lease names (each a new
// flight, each a live GET) must not make the reads of other namespaces wait
// past half the commit lag, where every guarded write there would be
// refused as slow: the reader's budget (QPS 500, burst 1000, as
// NewLeaseReader sets it) is shared fairly between namespaces.
func TestForgedLeaseNamesDoNotStarveOtherNamespaces(t *testing.T) {
	r := newLeaseReader(apiReader{latency: time.Millisecond})
	flood(t, r, "tenant", 2000)
	readsPromptly(t, r, "jobs", "every guarded write in namespace jobs would be refused as slow")
}

// Within the flooded namespace, a lease the reader has seen exist is read
// before the names it has not: the tenant's own real leases keep working
// while forged names wait their namespace's turns.
func TestForgedLeaseNamesDoNotStarveAKnownLeaseOfTheirNamespace(t *testing.T) {
	r := newLeaseReader(apiReader{latency: time.Millisecond})
	if _, err := r.Read(context.Background(), "tenant", "job", time.Now()); err != nil {
		t.Fatal(err)
	}
	flood(t, r, "tenant", 2000)
	readsPromptly(t, r, "tenant", "the tenant's own lease, known to exist, waits behind the forged names of its namespace")
}

// A read whose turn does not come within the read timeout fails (the
// decision refuses, fail closed) with a message that says why.
func TestReadWithoutATurnInTimeFailsClosed(t *testing.T) {
	r := &LeaseReader{Reader: apiReader{}, Timeout: 50 * time.Millisecond, turns: newTurns(flowcontrol.NewTokenBucketRateLimiter(1, 1))}
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := r.Read(context.Background(), "tenant", fmt.Sprintf("forged-%d", i), time.Now())
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if err != nil {
			failed++
			if !strings.Contains(err.Error(), "no turn to read lease tenant/forged-") || !strings.Contains(err.Error(), "busy with other reads of namespace tenant") {
				t.Errorf("error %q does not say the read got no turn in time", err)
			}
		}
	}
	if failed != 2 {
		t.Fatalf("%d of 3 reads failed with a budget of one read, want 2", failed)
	}
}
