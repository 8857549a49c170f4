package history

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/hack/devenv"
	"github.com/kubefence/kubefence/pkg/fence"
	"github.com/kubefence/kubefence/pkg/fence/timing"
	"github.com/kubefence/kubefence/test/history/checker"
	"github.com/kubefence/kubefence/test/testenv"
)

// releaseLease is the lease of TestPolicyStaleWriteAfterReleaseCommitsBeforeTheNextGrant.
const releaseLease = "after-release"

// TestPolicyStaleWriteAfterReleaseCommitsBeforeTheNextGrant is the policy
// mode soak's two commit-order violations (seed 39494308, job-c at
// revisions 1346 and 18333, docs/reliability.md "Soak"), made
// deterministic. In policy mode a write is judged against the tenure table,
// which the controller updates only after the holder's release has
// committed: until each API server shows the next grant's entry, the old
// holder's token is still admitted. So a write with the old token sent just
// after Elector.Release returned (a stale process of the holder: the history
// workers' "stale" phase) is admitted, and may commit up to the commit lag C
// later. The hand-over grant after a release used to wait only the barrier,
// not C after it; with the write held on its way to etcd until the next
// grant, but no longer than 3/4 C (within the commit lag), it committed
// after that grant. The grant after a release now waits C after the
// barrier, as after an expiry or a revocation.
//
// rel-a leads, rel-b waits; rel-a releases, and right after, a
// FencedClient with rel-a's token creates a Widget; the write must be
// admitted (it reaches the etcd proxy) for the test to show anything, and
// its commit must come before the status naming rel-b.
func TestPolicyStaleWriteAfterReleaseCommitsBeforeTheNextGrant(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the operator in policy mode against two kube-apiservers")
	}
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is unset: run the tests with `make test`, which supplies kube-apiserver and etcd")
	}
	logf.SetLogger(logr.Discard())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel) // registered first, so run last: after the control plane stopped
	cl, _, rec, _ := startRecorded(ctx, t, t.TempDir(), 30, operator.EnforcementPolicy)

	hold := timing.DefaultCommitLag * 3 / 4 // the operator runs with the default --max-commit-lag
	value, err := cl.staleWriteAfterRelease(ctx, hold, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Sync(ctx, cl.admin, 30*time.Second); err != nil {
		t.Fatalf("the harness failed (not a finding about kubefence): %v", err)
	}
	log, err := rec.Stop()
	if err != nil {
		t.Fatalf("the harness failed (not a finding about kubefence): %v", err)
	}
	committed := false
	for _, v := range log {
		for _, a := range v.Added {
			committed = committed || a == value
		}
	}
	if !committed {
		t.Fatalf("rel-a's write %q after its release never committed: the test shows nothing (commit log: %+v)", value, log)
	}
	for _, v := range log {
		t.Logf("commit log: %s %s rv %d holder %q token %d added %v", v.Kind, v.Name, v.Revision, v.Holder, v.FencingToken, v.Added)
	}
	res := checker.Check(nil, nil, checker.Options{Commits: log})
	for _, v := range res.Violations {
		t.Errorf("violation (a write admitted after its holder's release, held at most %v on its way to etcd, within the commit lag %v): %s",
			hold, timing.DefaultCommitLag, v)
	}
	for _, g := range res.CommitLogGaps {
		t.Errorf("the commit log is incomplete (the harness failed, not kubefence): %s", g)
	}
}

// staleWriteAfterRelease runs the scenario of
// TestPolicyStaleWriteAfterReleaseCommitsBeforeTheNextGrant on releaseLease
// and returns the value rel-a's write appended, once the write has returned
// and the lease's status names rel-b. The write is held on its way to etcd
// (every kube-apiserver's Widget writes) until the status names rel-b, or
// for at most maxHold after it was sent: with maxHold below the commit lag,
// a commit after the grant is one the grant should have waited for.
func (c *cluster) staleWriteAfterRelease(ctx context.Context, maxHold time.Duration, logf func(string, ...any)) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel() // the Electors stop
	relA, elector, token, err := c.leadAndQueue(ctx, releaseLease, "rel-a", "rel-b")
	if err != nil {
		return "", err
	}

	before := c.delayedWrites()
	c.setWriteDelay(time.Hour)
	defer c.setWriteDelay(0)
	value := checker.Value("rel-a", token, 1)
	w := testenv.Widget(historyNamespace, releaseLease+"-0")
	if err := unstructured.SetNestedStringSlice(w.Object, []string{value}, "spec", "entries"); err != nil {
		return "", err
	}
	if err := elector.Release(ctx); err != nil {
		return "", fmt.Errorf("rel-a's release: %w", err)
	}
	stale := fence.NewFencedClient(relA, releaseLease, devenv.FixedToken(token))
	sent := time.Now()
	done := make(chan error, 1)
	go func() { done <- stale.Create(ctx, w) }()
	// Held until the status names rel-b, or for at most maxHold from its
	// sending (so from its admission at most), whichever comes first.
	admitted, granted := false, false
	for !granted && time.Since(sent) < maxHold {
		if !admitted {
			admitted = c.delayedWrites() > before
		}
		var l coordv1alpha1.FencedLease
		if err := c.admin.Get(ctx, client.ObjectKey{Namespace: historyNamespace, Name: releaseLease}, &l); err == nil {
			granted = l.Status.HolderIdentity == "rel-b"
		}
		select {
		case err := <-done:
			return "", fmt.Errorf("rel-a's write with token %d right after its release returned before it was let through to etcd (%v): the test shows nothing", token, err)
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	c.setWriteDelay(0)
	held := time.Since(sent)
	if !admitted {
		return "", fmt.Errorf("rel-a's write with token %d right after its release did not reach etcd within %v: the test shows nothing", token, held)
	}
	if err := <-done; err != nil {
		return "", fmt.Errorf("rel-a's write with token %d right after its release: %w", token, err)
	}
	logf("rel-a's write with token %d sent after its release, held %v on its way to etcd (rel-b's grant seen meanwhile: %v)", token, held.Round(time.Millisecond), granted)
	if err := c.waitLease(ctx, releaseLease, func(l *coordv1alpha1.FencedLease) bool {
		return l.Status.HolderIdentity == "rel-b" && l.Status.FencingToken > token
	}); err != nil {
		return "", fmt.Errorf("rel-b's grant: %w", err)
	}
	return value, nil
}
