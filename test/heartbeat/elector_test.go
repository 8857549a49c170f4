package heartbeat_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence"
	"github.com/kubefence/kubefence/test/testenv"
)

// runElector runs an Elector of identity on ns/name through alice's client,
// renewing by hb, and returns it, a channel of its grants and a stop
// function that releases and waits for Run to return.
func runElector(t *testing.T, ns, name, identity string, hb *fence.Heartbeat) (*fence.Elector, <-chan int64, func()) {
	t.Helper()
	started := make(chan int64, 4)
	e, err := fence.New(fence.Config{Client: users["alice"], Namespace: ns, Name: name, Identity: identity, Heartbeat: hb,
		Callbacks: fence.Callbacks{OnStartedLeading: func(ctx context.Context, token int64) { started <- token; <-ctx.Done() }}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(suiteCtx)
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	return e, started, func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && suiteCtx.Err() == nil {
				t.Logf("Run returned %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("the Elector did not return within 15 s of its cancel")
		}
	}
}

func granted(t *testing.T, started <-chan int64) int64 {
	t.Helper()
	select {
	case token := <-started:
		return token
	case <-time.After(15 * time.Second):
		t.Fatal("not granted within 15 s")
		return 0
	}
}

// writeWidget updates the guarded widget through fc (its token stamped),
// counting a refusal.
func writeWidget(t *testing.T, fc *fence.FencedClient, ns string, i int, refused *atomic.Int64) {
	t.Helper()
	w := testenv.Widget(ns, "w")
	if err := fc.Get(suiteCtx, client.ObjectKeyFromObject(w), w); err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(w.Object, fmt.Sprintf("write-%d", i), "spec", "writer")
	if err := fc.Update(suiteCtx, w); err != nil {
		refused.Add(1)
		t.Errorf("write %d by the live holder refused: %v", i, err)
	}
}

// The Go helper renewing by a per-lease heartbeat keeps its tenure for
// three lease durations with no FencedLease write after its acknowledgement,
// and the fencing webhook accepts its guarded writes throughout: it takes
// the heartbeat's renewTime as the stamp (without it the writes are refused
// once the grant's expireTime passed).
func TestElectorRenewsByHeartbeat(t *testing.T) {
	testenv.SkipIfShort(t)
	ns, err := cluster.Namespace(suiteCtx, "hb-elector")
	if err != nil {
		t.Fatal(err)
	}
	createLease(t, ns, "job")
	e, started, stop := runElector(t, ns, "job", "worker-a", &fence.Heartbeat{})
	defer stop()
	token := granted(t, started)
	fc := fence.NewFencedClient(users["alice"], "job", e)
	if err := fc.Create(suiteCtx, testenv.GuardedWidget(ns, "w", "job", "", "init")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	before := versions(t, ns, []string{"job"})
	var refused atomic.Int64
	for i := range 6 * leaseSeconds { // 3 L, a write every 500 ms
		time.Sleep(500 * time.Millisecond)
		writeWidget(t, fc, ns, i, &refused)
	}
	if got, ok := e.Token(); !ok || got != token {
		t.Fatalf("the Elector no longer leads with token %d after 3 L of heartbeats (token %d, leading %v)", token, got, ok)
	}
	if after := versions(t, ns, []string{"job"}); after["job"] != before["job"] {
		t.Fatalf("the FencedLease was written while the Elector renewed by heartbeat: %s -> %s", before["job"], after["job"])
	}
}

// Three Electors of one process share a session heartbeat: all lead for
// three lease durations, with no FencedLease write and their guarded
// writes accepted.
func TestElectorsShareASession(t *testing.T) {
	testenv.SkipIfShort(t)
	ns, err := cluster.Namespace(suiteCtx, "hb-electors")
	if err != nil {
		t.Fatal(err)
	}
	session := fence.NewSession(users["alice"], ns, "proc-session", "proc")
	session.Interval = 500 * time.Millisecond
	names := []string{"a", "b", "c"}
	var electors []*fence.Elector
	for _, name := range names {
		createLease(t, ns, name)
		e, started, stop := runElector(t, ns, name, "proc", &fence.Heartbeat{Session: session})
		defer stop()
		granted(t, started)
		electors = append(electors, e)
	}
	time.Sleep(500 * time.Millisecond)
	before := versions(t, ns, names)
	time.Sleep(3 * leaseSeconds * time.Second)
	for i, e := range electors {
		if _, ok := e.Token(); !ok {
			t.Fatalf("Elector of %s no longer leads after 3 L on a shared session", names[i])
		}
	}
	if after := versions(t, ns, names); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("FencedLeases written while a session renewed them: %v -> %v", before, after)
	}
}

// An Elector renews on its own interval however often its FencedLease
// changes under it: here an annotation is patched every half renewal
// interval for 3 L (any write to the object does the same: a waiter's
// request, the controller's tidying, an operator's label). Each change wakes
// the Elector's loop; its renewal must still come due renewEvery after the
// last one, not renewEvery after the last change, or it never renews and
// its tenure ends at its local deadline. Both renewal paths: a per-lease
// heartbeat and FencedLease patches.
func TestElectorRenewsWhileItsLeaseChanges(t *testing.T) {
	testenv.SkipIfShort(t)
	for _, tc := range []struct {
		name string
		hb   *fence.Heartbeat
	}{{"heartbeat", &fence.Heartbeat{}}, {"patch", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			ns, err := cluster.Namespace(suiteCtx, "hb-changes")
			if err != nil {
				t.Fatal(err)
			}
			createLease(t, ns, "job")
			e, started, stop := runElector(t, ns, "job", "worker-a", tc.hb)
			defer stop()
			token := granted(t, started)
			key := client.ObjectKey{Namespace: ns, Name: "job"}
			hbKey := client.ObjectKey{Namespace: ns, Name: fence.HeartbeatName("job", "worker-a")}
			beats := map[time.Time]bool{}
			end := time.Now().Add(3 * leaseSeconds * time.Second)
			for i := 0; time.Now().Before(end); i++ {
				if tc.hb != nil {
					var hb coordinationv1.Lease
					if err := cluster.Admin.Get(suiteCtx, hbKey, &hb); err != nil {
						t.Fatal(err)
					}
					beats[hb.Spec.RenewTime.Time] = true
				}
				time.Sleep(interval / 2)
				l := &coordv1alpha1.FencedLease{}
				l.Namespace, l.Name = key.Namespace, key.Name
				p := fmt.Appendf(nil, `{"metadata":{"annotations":{"example.com/touched":"%d"}}}`, i)
				if err := cluster.Admin.Patch(suiteCtx, l, client.RawPatch(types.MergePatchType, p)); err != nil {
					t.Fatal(err)
				}
				if got, ok := e.Token(); !ok || got != token {
					t.Fatalf("the Elector lost token %d after %d changes of its FencedLease in %v (token %d, leading %v)",
						token, i+1, time.Duration(i+1)*interval/2, got, ok)
				}
			}
			l := waitHolder(t, ns, "job", "worker-a", time.Second)
			if l.Status.FencingToken != token {
				t.Fatalf("the lease's token is %d, want %d: the tenure ended", l.Status.FencingToken, token)
			}
			// The renewals themselves: about one per interval, 3 L /
			// interval of them (beats seen on the heartbeat, or patches
			// after the acknowledgement); held back by the changes, one
			// came only when the deadline was near (3 of them in 3 L).
			renewals := int(l.Spec.Requests[0].RenewSequence) - 1
			if tc.hb != nil {
				renewals = len(beats)
			}
			if want := int(3*leaseSeconds*time.Second/interval) - 3; renewals < want {
				t.Fatalf("%d renewals in 3 L, want at least %d: the changes of the lease held them back", renewals, want)
			}
		})
	}
}
