package explorer

import (
	"os"
	"testing"
	"time"

	"github.com/kubefence/kubefence/controllers/fencedlease"
)

// The bounds: small under go test -short (seconds), the default under make
// test (exhaustive within them, minutes at most on 2 cores), larger with
// EXPLORER_BOUND=large (make soak-explorer).
const (
	boundShort   = "short"
	boundDefault = "default"
	boundLarge   = "large"
)

func bound(t *testing.T) string {
	switch b := os.Getenv("EXPLORER_BOUND"); {
	case b == boundLarge:
		return boundLarge
	case b != "" && b != boundDefault && b != boundShort:
		t.Fatalf("EXPLORER_BOUND=%q: expected %s, %s or %s", b, boundShort, boundDefault, boundLarge)
	case testing.Short() || b == boundShort:
		return boundShort
	}
	return boundDefault
}

// canFail is the bound of a test that shows the checker can fail: the
// counterexample is as short in the small bound, and breadth-first search
// reaches it after every shorter path of the larger one.
func canFail(t *testing.T) string {
	if b := bound(t); b == boundLarge {
		return b
	}
	return boundShort
}

// maxStates stops an exploration that outgrew its bounds (a test failure:
// the bounds are meant to be exhausted).
const maxStates = 20_000_000

func explore(t *testing.T, cfg Config, stopAtFirst bool) *Result {
	t.Helper()
	if testing.Short() && os.Getenv("EXPLORER_BOUND") == "" {
		// Even the short bound takes 10 to 30 s of CPU per search: make
		// test-unit (go test -short) stays under a minute, make test runs
		// every search (EXPLORER_BOUND=short runs them here anyway).
		t.Skip("the explorer's searches run in make test (go test without -short)")
	}
	res, err := Explore(cfg, Options{MaxStates: maxStates, StopAtFirst: stopAtFirst})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res)
	if !res.Complete && len(res.Violations) == 0 {
		t.Fatalf("%s: not exhausted within %d states", cfg.Name, maxStates)
	}
	return res
}

// expectNone explores cfg exhaustively and fails with the shortest
// counterexample found, if any.
func expectNone(t *testing.T, cfg Config) {
	t.Helper()
	for _, v := range explore(t, cfg, true).Violations {
		t.Errorf("%v", v)
	}
}

// expectFound fails unless a counterexample to prop is found (the checker
// can fail: the configuration goes beyond what the design claims).
func expectFound(t *testing.T, cfg Config, prop string) {
	t.Helper()
	cfg.Check = []string{prop}
	res := explore(t, cfg, true)
	v := res.Violation(prop)
	if v == nil {
		t.Fatalf("%s: no counterexample to %s found, although the configuration exceeds the design's bound", res.Config, prop)
	}
	t.Logf("the expected counterexample:\n%v", v)
}

const skew = 100 * time.Millisecond

// timing is the controller's expiry arithmetic in the explorations: the
// commit lag C = 1 s, and no drift allowance. The model's clocks have
// offsets but no drift, and the allowance only delays the controller's
// expiry (the adversarial end is 0); without it every threshold falls on a
// tick.
var timing = fencedlease.Timing{CommitLag: time.Second}

// shortLease is finding 2's class: a 2 s lease (the history test's), whose
// cut-off margin is L/10 = 200 ms, with the default skew S = 100 ms and
// commit lag C = 1 s. alice holds first (she renews and writes), bob waits;
// the fencing webhook's decision takes up to 600 ms (beyond C/2); a write
// commits commitDelay ticks (of 100 ms) after its answer at most; the fencing
// webhook is up to S ahead of or behind the controller, alice up to S behind
// it (ahead too in the large bound).
//
// Events in one tick are ordered but not timed: a delay that reaches a
// bound exactly ties with it, and the tie is explored both ways. So a
// configuration within a bound stays a tick inside it.
func shortLease(b string, commitDelay int) Config {
	c := Config{
		Name: "short lease", Tick: 100 * time.Millisecond,
		LeaseSeconds: 2, Skew: skew, CommitLag: time.Second, Timing: timing,
		Offsets: map[string][]time.Duration{"fencing webhook": {-skew, 0, skew}, "alice": {-skew, 0}},
		Clients: []ClientSpec{
			{Name: "alice", Identity: "alice", Queued: true, Renewals: 1, Writes: 1},
			{Name: "bob", Identity: "bob", Queued: true},
		},
		DecisionDelay: 6, CommitDelay: commitDelay, ControllerDelay: 1, ClientDelay: 1, WriteRetries: 1,
		Check: []string{propStaleCommit, propNotHolder},
	}
	switch b {
	case boundShort:
		c.Offsets = map[string][]time.Duration{"fencing webhook": {-skew, 0}}
		c.Clients[0].Renewals = 0
		c.ControllerDelay = 0
	case boundLarge:
		c.Offsets["alice"] = []time.Duration{-skew, 0, skew}
		c.Clients[0].Renewals, c.Clients[0].Writes = 2, 2
		c.Clients[1].Renewals, c.Clients[1].Writes = 1, 1
		c.ControllerDelay, c.DecisionDelay = 2, 8
	}
	return c
}

// longLease is the default lease duration (15 s), whose cut-off margin is
// S + C: a write whose lease read came before it commits within C of that
// read (the webhook refuses decisions over C/2, the other half is the stated
// assumption), so before the next grant; and the cut-off falls after the
// holder's own deadline. Ticks of 500 ms (250 ms in the large bound): coarse,
// the short lease checks the arithmetic at 100 ms.
func longLease(b string, commitDelay time.Duration) Config {
	c := Config{
		Name: "long lease", Tick: 500 * time.Millisecond,
		LeaseSeconds: 15, Skew: skew, CommitLag: time.Second, Timing: timing,
		Offsets: map[string][]time.Duration{"fencing webhook": {-skew, 0, skew}, "alice": {-skew, 0}},
		Clients: []ClientSpec{
			{Name: "alice", Identity: "alice", Queued: true, Renewals: 1, Writes: 1},
			{Name: "bob", Identity: "bob", Queued: true},
		},
		ControllerDelay: 1, ClientDelay: 1, WriteRetries: 1,
	}
	switch b {
	case boundShort:
		c.Offsets = map[string][]time.Duration{"fencing webhook": {-skew, 0}}
		c.Clients[0].Renewals = 0
	case boundLarge:
		c.Offsets["alice"] = []time.Duration{-skew, 0, skew}
		c.Tick = 250 * time.Millisecond
		c.Clients[1].Writes = 1
	}
	c.DecisionDelay = c.ticks(time.Second)
	c.CommitDelay = c.ticks(commitDelay)
	return c
}

// Finding 2 of the 2026-12-01 review: for leases under 5 s the webhook
// admitted decisions of up to C/2 while the cut-off margin is L/10, so a
// write whose decision started before the cut-off was answered after the
// next grant. With writes committing at their answer, none may commit after
// the grant.
func TestShortLeaseWritesBeforeTheCutOffCommitBeforeTheNextGrant(t *testing.T) {
	t.Parallel()
	expectNone(t, shortLease(bound(t), 0))
}

// The checker can fail: writes that commit 200 ms after their answer (more
// than the short lease's margin less the skew) commit after the next grant.
func TestShortLeaseCommitsBeyondTheMarginAreFound(t *testing.T) {
	t.Parallel()
	expectFound(t, shortLease(canFail(t), 2), propStaleCommit)
}

// The default lease keeps every invariant with commits up to C/2 after their
// answer (C after the lease read), and a holder inside its deadline is never
// refused.
func TestLongLeaseKeepsTheInvariants(t *testing.T) {
	t.Parallel()
	expectNone(t, longLease(bound(t), 500*time.Millisecond))
}

// The checker can fail: commits 1.5 s after their answer commit after the
// next grant.
func TestLongLeaseCommitsBeyondTheCommitLagAreFound(t *testing.T) {
	t.Parallel()
	expectFound(t, longLease(canFail(t), 1500*time.Millisecond), propStaleCommit)
}

// A gap the explorer found (docs/design.md, "How the protocol is checked"),
// now closed: for leases shorter than about 10 (2S + C) the fencing
// webhook's cut-off, counted from the holder's stamp minus S, fell before
// the helper's own deadline when that was sent + L - L/10, so a holder
// renewing late was refused as stale inside its deadline. The helper's
// margin is now at least timing.MinMargin (2S past the webhook's last
// admission): with the webhook's clock up to S behind the controller's, a
// live holder is never refused.
func TestShortLeaseDoesNotRefuseALiveHolderInsideItsDeadline(t *testing.T) {
	t.Parallel()
	c := shortLease(boundShort, 0)
	c.Name = "short lease, live holder"
	c.Clients[0].Renewals = 1
	c.Check = []string{propLiveRefused}
	expectNone(t, c)
}

// identity is finding 1's class: alice holds first and releases, bob waits,
// mallory (who may only queue: the candidate role, identityBinding None)
// appends a request under any identity, renews it and sends tokenless
// writes; the controller may restart (losing what it remembered) and an
// operator may release or hand over. A 15 s lease, ticks of 500 ms.
func identity(b string) Config {
	// Who holds, not when: a 3 s lease in ticks of 1 s (the fencing
	// webhook's decisions are immediate or refused as slow; commits follow
	// their answer at once), and the invariants of identity.
	c := Config{
		Name: "identity", Tick: time.Second,
		LeaseSeconds: 3, Skew: skew, CommitLag: time.Second, Timing: timing,
		DecisionDelay: 1, ControllerDelay: 1, ClientDelay: 1, WriteRetries: 1,
		Check: []string{propNotHolder, propStaleCommit},
	}
	c.Clients = []ClientSpec{
		{Name: "alice", Identity: "alice", Queued: true, Releases: 1},
		{Name: "bob", Identity: "bob", Queued: true},
		{Name: "mallory", Identity: "mallory", Malicious: true, Joins: 1, Tokenless: 1},
	}
	c.ControllerRestarts = 1
	switch b {
	case boundShort:
		c.ControllerRestarts = 0
	case boundLarge:
		c.Clients[0].Renewals, c.Clients[0].Tokenless, c.Clients[0].Joins = 1, 1, 1
		c.Clients[1].Tokenless, c.Clients[1].Releases = 1, 1
		c.Clients[2].Renewals, c.Clients[2].Joins = 1, 2
		c.OperatorActions = 1
	}
	return c
}

// Finding 1 of the 2026-12-01 review: a non-holder that queues under a
// released holder's identity must not inherit the tenure: its tokenless
// writes are refused, whether the controller remembers the tenure or
// restarted meanwhile.
func TestNobodyInheritsATenureByQueueingUnderItsIdentity(t *testing.T) {
	t.Parallel()
	expectNone(t, identity(bound(t)))
}

// revocation: alice holds and writes (with and without a token) while an
// operator releases her or hands the lease over to bob; the controller
// reads a cache up to one tick behind and may restart (large bound). A 15 s
// lease in ticks of 500 ms; decisions take up to 1 s (those over C/2 are
// refused), commits come with their answer: at most C/2 after the lease
// read, inside the controller's wait of C after a revocation.
func revocation(b string) Config {
	c := longLease(b, 0)
	c.Name = "revocation"
	c.Offsets = nil
	c.Clients = []ClientSpec{
		{Name: "alice", Identity: "alice", Queued: true, Writes: 1, Tokenless: 1},
		{Name: "bob", Identity: "bob", Queued: true},
	}
	c.OperatorActions, c.Revocations, c.CacheLag = 1, true, 1
	switch b {
	case boundShort:
		c.Clients[0].Tokenless, c.CacheLag = 0, 0
	case boundDefault:
		c.Clients[0].Tokenless = 0
	case boundLarge:
		c.Clients[0].Renewals, c.Clients[1].Writes = 1, 1
		c.OperatorActions, c.ControllerRestarts = 2, 1
	}
	return c
}

// recreation: the same, but the operator deletes the lease and creates it
// again; bob (and alice in the large bound) queues again on the new
// incarnation, while alice's write admitted in the old one may still be on
// its way.
func recreation(b string) Config {
	c := revocation(b)
	c.Name = "recreation"
	c.Revocations, c.LeaseDeletes, c.OperatorActions, c.CacheLag = false, true, 2, 0
	c.Clients[0].Joins, c.Clients[1].Joins = 0, 1
	switch b {
	case boundLarge:
		c.Clients[0].Joins = 1
		c.Revocations, c.OperatorActions, c.CacheLag = true, 3, 1
	}
	return c
}

// An operator's release or hand-over ends a tenure without its holder
// knowing: the controller waits the commit lag before the next grant, so the
// holder's admitted writes commit before it.
func TestTenuresRevokedByAnOperatorKeepTheInvariants(t *testing.T) {
	t.Parallel()
	expectNone(t, revocation(bound(t)))
}

// Deleting the lease and creating it again: the deletion ends the tenure,
// the epoch store carries the tokens on, and the new incarnation's first
// grant waits the commit lag.
func TestLeasesDeletedAndCreatedAgainKeepTheInvariants(t *testing.T) {
	t.Parallel()
	expectNone(t, recreation(bound(t)))
}

// release is finding 4's class: alice holds, writes and releases while a
// write is under way; her withdraw reaches the API server with the commit
// delay; bob waits and is granted at once. A 15 s lease in ticks of 500 ms;
// decisions take up to 1 s (those over C/2 are refused), commits come with
// their answer: under C after the lease read.
func release(b string) Config {
	c := longLease(b, 0)
	c.Name = "release"
	c.Offsets = nil
	c.Clients = []ClientSpec{
		{Name: "alice", Identity: "alice", Queued: true, Writes: 2, Releases: 1},
		{Name: "bob", Identity: "bob", Queued: true},
	}
	switch b {
	case boundShort:
		c.Clients[0].Writes = 1
	case boundLarge:
		c.Clients[0].Tokenless, c.Clients[0].Renewals = 1, 1
		c.Clients[1].Writes = 1
		c.CacheLag = 1
	}
	return c
}

// Finding 4 of the 2026-12-01 review: a release withdraws the request only
// once every write that took the token returned, so none commits after the
// next grant.
func TestReleaseWaitsForEveryWriteOfTheTenure(t *testing.T) {
	t.Parallel()
	expectNone(t, release(bound(t)))
}

// The clients as they were before finding 4's fixes, which the explorer
// models rather than runs: a FencedClient that took the token and counted
// the write in two steps (4a), and a release that did not wait for writes
// under way (resourcelock's, 4b), let a write commit after the next grant.
func TestReleaseWithoutTheWriteGateInOneStepIsFound(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		set  func(*ClientSpec)
	}{
		{"4a: token and count in two steps", func(s *ClientSpec) { s.SplitGate = true }},
		{"4b: no quiesce", func(s *ClientSpec) { s.NoQuiesce = true }},
	} {
		cfg := release(boundShort)
		cfg.Name = "release, " + c.name
		c.set(&cfg.Clients[0])
		expectFound(t, cfg, propStaleCommit)
	}
}

// A gap the explorer found, closed: a release used to wait C after a write
// whose answer its client gave up on, but the API server may admit that
// write again later (a conflict in its compare-and-swap re-runs admission,
// with a fresh lease read that still shows the tenure while the release
// waits) and commit it after the withdraw and the next grant, which has no
// wait. Now the release keeps the request and lets the tenure expire
// (fence.Writes.Quiesce, asked by a probe: gate.go), so the expiry's cut-off
// covers any later admission. With the fix reverted
// (testdata/revert/f-readmit.patch) the counterexample is found again.
func TestAWriteAdmittedAgainAfterItsClientGaveUpCommitsBeforeTheGrant(t *testing.T) {
	t.Parallel()
	c := release(boundShort)
	c.Name = "release, a write given up"
	c.Clients[0].Writes, c.Clients[0].Timeouts = 2, 1
	expectNone(t, c)
}

// heartbeat: alice renews by her heartbeat Lease (docs/design.md,
// "Heartbeats"): she acknowledges her grant with a renewal patch, then
// beats (an update of the heartbeat, in flight up to heartbeatDelay ticks:
// it may commit after the controller's last look) and writes; bob waits.
// The controller's heartbeat informer sights a beat up to 600 ms after its
// commit (more than the holder's margin: a beat it counted may not be
// sighted by the controller's expiry); at the expiry the controller reads the heartbeat live, removes the
// request, reads it again, and the grant waits C if it moved in between. A
// 2 s lease in ticks of 100 ms; the fencing webhook's decisions take up to
// 500 ms (C/2), commits come with their answer.
func heartbeat(b string) Config {
	c := Config{
		Name: "heartbeat", Tick: 100 * time.Millisecond,
		LeaseSeconds: 2, Skew: skew, CommitLag: time.Second, Timing: timing,
		Offsets: map[string][]time.Duration{"fencing webhook": {-skew, 0}},
		Clients: []ClientSpec{
			{Name: "alice", Identity: "alice", Queued: true, Heartbeat: true, Renewals: 1, Writes: 1},
			{Name: "bob", Identity: "bob", Queued: true},
		},
		DecisionDelay: 5, ControllerDelay: 0, ClientDelay: 1, HeartbeatDelay: 5, HeartbeatLag: 6,
	}
	switch b {
	case boundLarge:
		c.Offsets["alice"] = []time.Duration{-skew, 0, skew}
		c.Clients[0].Renewals, c.Clients[0].Writes = 2, 2
		c.ControllerDelay, c.ControllerRestarts = 1, 1
	}
	return c
}

// A heartbeat that commits after the controller's live look before the
// expiry, under which the fencing webhook admits a write, makes the grant
// wait the commit lag (heartbeatLagged); a beat committed but not yet
// sighted is read live before the request is removed (expireHeartbeat), so
// a holder inside its deadline is not expired. With either undone
// (testdata/revert/hb-lagged.patch, hb-live.patch) a counterexample is found.
func TestHeartbeatRenewalsKeepTheInvariants(t *testing.T) {
	t.Parallel()
	expectNone(t, heartbeat(bound(t)))
}

// A session heartbeat beats for its process's other tenures too: alice's
// beat may come at any time, before her grant is acknowledged, after her
// tenure expired, and after she queued again (under the same heartbeat).
func TestSessionHeartbeatKeepsTheInvariants(t *testing.T) {
	t.Parallel()
	c := heartbeat(bound(t))
	c.Name = "session heartbeat"
	c.Clients[0].Session, c.Clients[0].Joins = true, 1
	if bound(t) != boundLarge {
		c.Offsets = nil
	}
	expectNone(t, c)
}
