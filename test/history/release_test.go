package history

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
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
	dir := t.TempDir()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	managerBin, _, err := buildBinaries(ctx, root, dir)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := startCluster(ctx, root, dir, managerBin, 30, operator.EnforcementPolicy)
	if cl != nil {
		defer func() {
			if err := cl.stop(); err != nil {
				t.Errorf("stopping the control plane: %v", err)
			}
		}()
	}
	if err != nil {
		t.Fatal(err)
	}
	commitsOut, err := os.Create(filepath.Join(dir, "commits.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer commitsOut.Close()
	rec, err := checker.StartCommitRecorder(ctx, cl.admin, historyNamespace, time.Now(), commitsOut)
	if err != nil {
		t.Fatal(err)
	}
	recording := true
	defer func() {
		if recording {
			_, _ = rec.Stop()
		}
	}()
	if err := cl.startOperator(ctx); err != nil {
		t.Fatal(err)
	}

	hold := timing.DefaultCommitLag * 3 / 4 // the operator runs with the default --max-commit-lag
	value, err := cl.staleWriteAfterRelease(ctx, hold, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Sync(ctx, cl.admin, 30*time.Second); err != nil {
		t.Fatalf("the harness failed (not a finding about kubefence): %v", err)
	}
	log, err := rec.Stop()
	recording = false
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
	if err := c.createLeaseOf(ctx, releaseLease, canaryLeaseSeconds); err != nil {
		return "", err
	}
	clients := map[string]client.WithWatch{}
	electors := map[string]*fence.Elector{}
	tokens := map[string]chan int64{}
	for _, name := range []string{"rel-a", "rel-b"} {
		u, err := c.env.AddUser(envtest.User{Name: name, Groups: []string{workersGroup}}, nil)
		if err != nil {
			return "", fmt.Errorf("adding user %s: %w", name, err)
		}
		cl, err := client.NewWithWatch(u.Config(), client.Options{Scheme: c.scheme})
		if err != nil {
			return "", err
		}
		ch := make(chan int64, 1)
		clients[name], tokens[name] = cl, ch
		e, err := fence.New(fence.Config{Client: cl, Namespace: historyNamespace, Name: releaseLease, Identity: name, User: name,
			Callbacks: fence.Callbacks{OnStartedLeading: func(ctx context.Context, token int64) {
				select {
				case ch <- token:
				default:
				}
				<-ctx.Done()
			}}})
		if err != nil {
			return "", err
		}
		electors[name] = e
		go func() { _ = e.Run(ctx) }()
		if name == "rel-a" { // granted before rel-b asks
			if err := c.waitLease(ctx, releaseLease, func(l *coordv1alpha1.FencedLease) bool { return l.Status.HolderIdentity == name }); err != nil {
				return "", fmt.Errorf("%s's grant: %w", name, err)
			}
		}
	}
	var token int64
	select {
	case token = <-tokens["rel-a"]:
	case <-ctx.Done():
		return "", fmt.Errorf("rel-a does not lead lease %s: %w", releaseLease, ctx.Err())
	}
	if err := c.waitLease(ctx, releaseLease, func(l *coordv1alpha1.FencedLease) bool {
		return coordv1alpha1.RequestIndex(l.Spec.Requests, "rel-b") >= 0
	}); err != nil {
		return "", fmt.Errorf("rel-b's request: %w", err)
	}

	before := 0
	for _, p := range c.etcdProxies {
		before += p.DelayedWrites()
		p.SetWriteDelay(time.Hour)
	}
	lift := func() {
		for _, p := range c.etcdProxies {
			p.SetWriteDelay(0)
		}
	}
	defer lift()
	value := checker.Value("rel-a", token, 1)
	w := testenv.Widget(historyNamespace, releaseLease+"-0")
	if err := unstructured.SetNestedStringSlice(w.Object, []string{value}, "spec", "entries"); err != nil {
		return "", err
	}
	if err := electors["rel-a"].Release(ctx); err != nil {
		return "", fmt.Errorf("rel-a's release: %w", err)
	}
	stale := fence.NewFencedClient(clients["rel-a"], releaseLease, devenv.FixedToken(token))
	sent := time.Now()
	done := make(chan error, 1)
	go func() { done <- stale.Create(ctx, w) }()
	// Held until the status names rel-b, or for at most maxHold from its
	// sending (so from its admission at most), whichever comes first.
	admitted, granted := false, false
	for !granted && time.Since(sent) < maxHold {
		if !admitted {
			n := 0
			for _, p := range c.etcdProxies {
				n += p.DelayedWrites()
			}
			admitted = n > before
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
	lift()
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
