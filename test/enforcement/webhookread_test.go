package enforcement_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/pkg/fence"
	"github.com/kubefence/kubefence/test/testenv"
)

// holdingReader reads leases from the API server; once armed, it holds the
// answer of the next read for hold after the API server gave it, closing
// held then: that read's view is from before whatever is written while it
// is held. It counts the reads sent.
type holdingReader struct {
	client.Reader
	hold  time.Duration
	armed atomic.Bool
	held  chan struct{}
	reads atomic.Int64
}

func (r *holdingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.reads.Add(1)
	err := r.Reader.Get(ctx, key, obj, opts...)
	if r.armed.CompareAndSwap(true, false) {
		close(r.held)
		time.Sleep(r.hold)
	}
	return err
}

// The fencing webhook's lease reads are shared between concurrent
// decisions, but a decision never uses a read sent before it arrived
// (docs/design.md, "Every decision reads the lease live"): a grant committed
// just before a write's admission is seen, however many decisions about the
// lease are under way. On a real API server in webhook mode: alice holds
// token 5; her write to w0 is decided on a read the webhook's reader holds
// for a while after the API server answered it (a slow answer); while it is
// held the controller's grant of token 6 to bob commits, and then alice
// sends eight writes with token 5 and bob one with token 6, concurrently.
// A decision that joined the held read would admit alice's stale writes
// (the test fails so with the rule loosened to join any read under way);
// every one must be refused as stale, bob's accepted, and the nine decisions
// share reads sent after they arrived.
func TestWebhookReadSeesAGrantCommittedJustBefore(t *testing.T) {
	h := start(t, operator.EnforcementWebhook)
	h.stopOperator()
	reader := &holdingReader{Reader: h.admin, hold: time.Second, held: make(chan struct{})}
	o := h.options()
	// The grants are this test's: no reconciler. The commit lag leaves the
	// held read, and the read after it, well inside half of it (a slow
	// decision would be refused for being slow, not stale).
	o.Reconciler = false
	o.Timing.CommitLag = 4 * time.Second
	o.LeaseReader = reader
	h.runOperator(t, o)

	ns := h.namespace(t, nil)
	const name = "job"
	lease := &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: 60, Requests: []coordv1alpha1.LeaseRequest{request("alice", "alice"), request("bob", "bob")}}}
	must(t, h.admin.Create(h.ctx, lease))
	grant := func(holder string, token int64) {
		t.Helper()
		exp := metav1.NewMicroTime(time.Now().Add(time.Minute))
		lease.Status = coordv1alpha1.FencedLeaseStatus{HolderIdentity: holder, HolderUser: holder, FencingToken: token,
			LeaseDurationSeconds: 60, ExpireTime: &exp}
		must(t, h.admin.Status().Update(h.ctx, lease))
	}
	grant("alice", 5)
	const stale = 8
	for i := range stale + 2 {
		w := widget(ns, "w"+tok(int64(i)), name, "5", "alice")
		testenv.Within(t, 10*time.Second, "alice creates a guarded Widget with token 5", func() error { return h.users["alice"].Create(h.ctx, w) })
	}
	write := func(user string, i int, token int64) error {
		w := widget(ns, "w"+tok(int64(i)), name, tok(token), user)
		return h.users[user].Patch(h.ctx, w, client.Merge)
	}

	reader.armed.Store(true)
	heldWrite := make(chan error, 1)
	go func() { heldWrite <- write("alice", 0, 5) }()
	select {
	case <-reader.held:
	case <-time.After(10 * time.Second):
		t.Fatal("alice's write to w0 was not decided on a lease read")
	}
	grant("bob", 6)
	before := reader.reads.Load()

	var wg sync.WaitGroup
	errs := make([]error, stale+1)
	for i := range stale + 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == stale {
				errs[i] = write("bob", i+1, 6)
				return
			}
			errs[i] = write("alice", i+1, 5)
		}()
	}
	wg.Wait()
	if err := <-heldWrite; err != nil {
		t.Errorf("alice's write to w0, decided on the read from before the grant, was refused: %v", err)
	}
	for i, err := range errs[:stale] {
		if err == nil || !fence.IsStale(err) {
			t.Errorf("alice's write %d with token 5, sent after bob's grant of token 6 committed: %v; want a stale refusal", i+1, err)
		}
	}
	if err := errs[stale]; err != nil {
		t.Errorf("bob's write with token 6 refused: %v", err)
	}
	if reads := reader.reads.Load() - before; reads >= stale+1 {
		t.Errorf("%d lease reads for %d concurrent decisions: want them shared", reads, stale+1)
	} else {
		t.Logf("%d lease reads for %d concurrent decisions after the grant", reads, stale+1)
	}
}
