package fencing

import (
	"errors"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence/timing"
)

var now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// held is lease "job" held by bob (user bob) with token 42, expiring in 10 s.
func held() LeaseState {
	return LeaseState{Exists: true, Token: 42, Holder: "bob", HolderUser: "bob", ExpireTime: now.Add(10 * time.Second)}
}

func guarded(token string) *Object { return &Object{Lease: "job", Token: token, HasToken: true} }

func input(op admissionv1.Operation, sub string, old, new *Object, user string, st LeaseState) Input {
	return Input{
		Operation: op, SubResource: sub, Namespace: "jobs", Old: old, New: new,
		Requester: Requester{Username: user},
		Lease: func(name string) (LeaseState, error) {
			if name != "job" {
				return LeaseState{}, nil
			}
			return st, nil
		},
		Now: now, Skew: 100 * time.Millisecond,
	}
}

// lagged is bob's update of token 41 to 42 under a 1 s commit lag, on lease
// job held by bob with duration d, expiring in left; stampedAgo, if not 0, is
// how long ago the holder's last renewal was stamped.
func lagged(left, d, stampedAgo time.Duration) Input {
	st := held()
	st.ExpireTime, st.LeaseDuration = now.Add(left), d
	if stampedAgo != 0 {
		st.RenewStamp = now.Add(-stampedAgo)
	}
	in := input(admissionv1.Update, "", guarded("41"), guarded("42"), "bob", st)
	in.CommitLag = time.Second
	return in
}

// The fencing rule's cases live in one table, test/ruletable.FencingRows,
// run against this package's Decide and the policy's CEL by
// TestFencingRuleTable and FuzzDecide (ruletable_test.go). What only the Go
// back end has is tested here: the webhook's clock (the policy has none:
// its tenure table names a holder until the controller ends the tenure),
// the live lease read, and the instant its answer must leave by.

// TestCutOff: a token stops being accepted at the tenure's cut-off,
// expireTime (or the stamped renewal's bound, whichever is later) less
// min(skew + commit lag, L/10).
func TestCutOff(t *testing.T) {
	expired := held()
	expired.ExpireTime = now.Add(50 * time.Millisecond) // inside the skew
	for _, c := range []struct {
		name    string
		in      Input
		allowed bool
	}{
		{"expired tenure (inside the skew)", input(admissionv1.Update, "", guarded("42"), guarded("42"), "bob", expired), false},
		{"inside the commit-lag margin", lagged(900*time.Millisecond, 15*time.Second, 0), false},
		{"outside the commit-lag margin", lagged(1200*time.Millisecond, 15*time.Second, 0), true},
		{"the margin is capped at a tenth of a short lease", lagged(150*time.Millisecond, time.Second, 0), true},
		{"stamped renewal: accepted past the acknowledged expireTime", lagged(-5*time.Second, 15*time.Second, 4*time.Second), true}, // bound: now + 11 s - skew
		{"stamped renewal too old: refused", lagged(-5*time.Second, 15*time.Second, 14*time.Second), false},                         // bound: now + 1 s - skew, inside the margin
	} {
		t.Run(c.name, func(t *testing.T) {
			v := Decide(c.in)
			if v.Allowed != c.allowed {
				t.Fatalf("allowed = %v, want %v (%s)", v.Allowed, c.allowed, v.Message)
			}
			if !c.allowed && (v.Code != 409 || v.Reason != coordv1alpha1.RefusalExpired || !strings.Contains(v.Message, "writes stop being accepted at")) {
				t.Fatalf("refusal %d %s %q, want 409 expired at the cut-off", v.Code, v.Reason, v.Message)
			}
		})
	}
}

// A lease that cannot be read refuses the write (500, fail closed): the
// policy reads no lease.
func TestLeaseReadFailureFailsClosed(t *testing.T) {
	in := input(admissionv1.Create, "", nil, guarded("42"), "bob", held())
	in.Lease = func(string) (LeaseState, error) { return LeaseState{}, errors.New("boom") }
	if v := Decide(in); v.Allowed || v.Code != 500 || v.Reason != coordv1alpha1.RefusalLeaseError || !strings.Contains(v.Message, "fail closed") {
		t.Fatalf("verdict %+v, want a 500 lease-error refusal that says it fails closed", v)
	}
}

// Every decision that depends on a lease reads it through Input.Lease (the
// handler's live, linearizable reader, memoized per decision), and a refusal
// that needs no lease (a token below the object's own) reads nothing.
func TestEveryLeaseDecisionReadsTheLeaseOnce(t *testing.T) {
	for _, c := range []struct {
		name  string
		in    Input
		reads bool
	}{
		{"current token", input(admissionv1.Update, "", guarded("41"), guarded("42"), "bob", held()), true},
		{"inherited token, then the holder check", input(admissionv1.Update, "", guarded("42"), guarded("42"), "bob", held()), true},
		{"tokenless delete", input(admissionv1.Delete, "", guarded("42"), nil, "bob", held()), true},
		{"below the object's token", input(admissionv1.Update, "", guarded("42"), guarded("41"), "alice", held()), false},
		{"a guarded cluster-scoped object", func() Input {
			in := input(admissionv1.Create, "", nil, guarded("42"), "bob", held())
			in.Namespace = ""
			return in
		}(), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			reads := 0
			lease := c.in.Lease
			c.in.Lease = func(name string) (LeaseState, error) { reads++; return lease(name) }
			Decide(c.in)
			if (reads > 0) != c.reads {
				t.Fatalf("lease reads %d, want reads: %v", reads, c.reads)
			}
		})
	}
}

// Refusals carry the wire contract's markers, which clients fall back on when
// a refusal has no typed cause.
func TestRefusalsCarryTheMarkers(t *testing.T) {
	v := Decide(input(admissionv1.Delete, "", guarded("42"), nil, "alice", held()))
	if !strings.Contains(v.Message, coordv1alpha1.NotHolderMarker) {
		t.Fatalf("not-holder refusal %q lacks the marker %q", v.Message, coordv1alpha1.NotHolderMarker)
	}
}

// An admitting decision carries the instant by which its answer must leave:
// half the tenure's commit-lag budget before its expiry less the skew, from
// the same expiry the cut-off used (the stamp's, when later), and the
// earlier of two tenures for a write moved from one lease to another.
func TestDecisionCarriesItsAnswerBy(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	repointed := func() Input {
		in := lagged(10*time.Second, 15*time.Second, 0)
		short := held()
		short.ExpireTime, short.LeaseDuration = now.Add(time.Second), 2*time.Second
		long := in.Lease
		in.Lease = func(name string) (LeaseState, error) {
			if name == "other" {
				return short, nil
			}
			return long(name)
		}
		in.Old, in.New = guarded("42"), &Object{Lease: "other", Token: "42", HasToken: true}
		return in
	}()
	for _, c := range []struct {
		name string
		in   Input
		want time.Time
	}{
		// 15 s: budget C = 1 s; answer by expire - 100 ms - 500 ms.
		{"15 s lease", lagged(10*time.Second, 15*time.Second, 0), now.Add(10*time.Second - ms(600))},
		// 2 s: margin 200 ms, budget 100 ms; answer by expire - 100 ms - 50 ms.
		{"2 s lease", lagged(time.Second, 2*time.Second, 0), now.Add(time.Second - ms(150))},
		// 1 s: margin 100 ms, no budget left; answer by expire - 100 ms (the cut-off).
		{"1 s lease", lagged(time.Second, time.Second, 0), now.Add(time.Second - ms(100))},
		// Stamped 1 s ago on a 2 s lease: expiry now + 1 s - skew.
		{"2 s lease, stamped renewal", lagged(-5*time.Second, 2*time.Second, time.Second), now.Add(time.Second - ms(100) - ms(150))},
		{"moved to a lease that expires sooner", repointed, now.Add(time.Second - ms(150))},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := Decide(c.in)
			if !v.Allowed {
				t.Fatalf("refused: %s", v.Message)
			}
			if !v.AnswerBy.Equal(c.want) {
				t.Fatalf("AnswerBy = now%+v, want now%+v", v.AnswerBy.Sub(now), c.want.Sub(now))
			}
		})
	}
	if v := Decide(input(admissionv1.Create, "", nil, &Object{}, "x", held())); !v.Allowed || !v.AnswerBy.IsZero() {
		t.Fatalf("unguarded write: allowed %v, AnswerBy %v; want allowed with no AnswerBy", v.Allowed, v.AnswerBy)
	}
}

// A lease shorter than 10 (S + C) gets a warning that says how far its
// commit-lag bound shrinks; others get none.
func TestShortLeaseWarning(t *testing.T) {
	for _, c := range []struct {
		l    time.Duration
		want string // "" for none
	}{
		{15 * time.Second, ""},
		{11 * time.Second, ""},
		{10 * time.Second, "shrinks to L/10 = 1s, clock skew included: the fencing webhook stops accepting the holder's token only 1s before its expiry, which leaves 900ms, not 1s,"},
		{2 * time.Second, "shrinks to L/10 = 200ms, clock skew included: the fencing webhook stops accepting the holder's token only 200ms before its expiry, which leaves 100ms, not 1s,"},
		{time.Second, "leaves nothing (L/10 is not more than the skew), not 1s,"},
	} {
		got := ShortLeaseWarning(c.l, timing.DefaultSkew, timing.DefaultCommitLag)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("ShortLeaseWarning(%v) = %q, want %q", c.l, got, c.want)
		}
		if got != "" && (!strings.Contains(got, "= 11s") || !strings.Contains(got, "at least 11")) {
			t.Errorf("ShortLeaseWarning(%v) = %q: does not name the 11s threshold", c.l, got)
		}
	}
}
