package fencing

import (
	"errors"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
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

func cleanup(in Input) Input  { in.Requester.Cleanup = true; return in }
func required(in Input) Input { in.Required = true; return in }

// podOn is a pod guarded by lease job with token 42, bound to node (its
// deletion started when deleting).
func podOn(node string, deleting bool) *Object {
	o := guarded("42")
	o.NodeName, o.Deleting = node, deleting
	return o
}

// byNode is in as a write to a Pod by the kubelet of node: user
// system:node:<node> in group system:nodes.
func byNode(in Input, node string) Input {
	in.Pod = true
	in.Requester = Requester{Username: "system:node:" + node, Groups: []string{"system:nodes", "system:authenticated"}}
	return in
}

func TestDecide(t *testing.T) {
	expired := held()
	expired.ExpireTime = now.Add(50 * time.Millisecond) // inside the skew
	released := held()
	released.Holder, released.HolderUser = "", ""
	recreated := LeaseState{Exists: true, TokenBase: 141} // deleted and created again, nothing granted yet
	pod := held()
	pod.Binding, pod.Holder = coordv1alpha1.IdentityBindingPod, "worker-1"
	cases := []struct {
		name    string
		in      Input
		allowed bool
		code    int32
		msg     string
	}{
		{"unguarded create", input(admissionv1.Create, "", nil, &Object{}, "x", held()), true, 0, ""},
		{"current token create", input(admissionv1.Create, "", nil, guarded("42"), "bob", held()), true, 0, ""},
		{"stale token create", input(admissionv1.Create, "", nil, guarded("41"), "alice", held()), false, 409,
			"stale fencing token 41 for lease jobs/job: current token is 42"},
		{"stale against the object", input(admissionv1.Update, "", guarded("42"), guarded("41"), "alice", held()), false, 409,
			"the object already accepted token 42"},
		{"unchanged token from the holder", input(admissionv1.Update, "", guarded("42"), guarded("42"), "bob", held()), true, 0, ""},
		{"unchanged token from someone else (inherited by a plain client)", input(admissionv1.Update, "", guarded("42"), guarded("42"), "alice", held()), false, 403,
			"alice is not the holder of lease jobs/job"},
		{"unchanged but old token from a holder granted again", input(admissionv1.Update, "", guarded("34"), guarded("34"), "bob", held()), false, 409,
			"stale fencing token 34 for lease jobs/job: current token is 42"},
		{"never issued", input(admissionv1.Create, "", nil, guarded("43"), "bob", held()), false, 409, "was never issued"},
		{"token of an earlier incarnation", input(admissionv1.Update, "", guarded("139"), guarded("141"), "bob", recreated), false, 409,
			"stale fencing token 141 for lease jobs/job: tokens up to 141 were issued before the lease was deleted and created again"},
		{"beyond every incarnation", input(admissionv1.Create, "", nil, guarded("142"), "bob", recreated), false, 409, "fencing token 142 for lease jobs/job was never issued"},
		{"tokenless write to an object ahead of a recreated lease", input(admissionv1.Delete, "", guarded("141"), nil, "bob", recreated), false, 409,
			"stale fencing token: the object already accepted token 141, above the current token 0 of lease jobs/job"},
		{"expired tenure", input(admissionv1.Update, "", guarded("42"), guarded("42"), "bob", expired), false, 409, "writes stop being accepted at"},
		{"released lease", input(admissionv1.Update, "", guarded("42"), guarded("42"), "bob", released), false, 409, "has no holder"},
		{"missing token", input(admissionv1.Create, "", nil, &Object{Lease: "job"}, "bob", held()), false, 400, "missing fencing token"},
		{"non-numeric", input(admissionv1.Create, "", nil, guarded("4x2"), "bob", held()), false, 400, "is not a decimal integer"},
		{"negative", input(admissionv1.Create, "", nil, guarded("-42"), "bob", held()), false, 400, "is negative"},
		{"overflow", input(admissionv1.Create, "", nil, guarded("92233720368547758070"), "bob", held()), false, 400, "overflows int64"},
		{"unknown lease", input(admissionv1.Create, "", nil, &Object{Lease: "nope", Token: "1", HasToken: true}, "bob", held()), false, 404, "does not exist"},
		{"holder deletes", input(admissionv1.Delete, "", guarded("42"), nil, "bob", held()), true, 0, ""},
		{"stale holder deletes", input(admissionv1.Delete, "", guarded("42"), nil, "alice", held()), false, 403, "alice is not the holder of lease jobs/job"},
		{"namespace controller deletes", cleanup(input(admissionv1.Delete, "", guarded("42"), nil, "system:serviceaccount:kube-system:namespace-controller", held())), true, 0, ""},
		{"garbage collector deletes after the lease was released", cleanup(input(admissionv1.Delete, "", guarded("42"), nil, "system:serviceaccount:kube-system:generic-garbage-collector", released)), true, 0, ""},
		{"namespace controller deletes an unguarded object where fencing is required", required(cleanup(input(admissionv1.Delete, "", &Object{}, nil, "system:serviceaccount:kube-system:namespace-controller", held()))), true, 0, ""},
		{"others may not delete it there", required(input(admissionv1.Delete, "", &Object{}, nil, "bob", held())), false, 403, "fencing is required"},
		{"a clean-up user may not update anything else", cleanup(input(admissionv1.Update, "", guarded("42"), guarded("42"), "system:serviceaccount:kube-system:generic-garbage-collector", held())), false, 403, "is not the holder"},
		{"delete after release", input(admissionv1.Delete, "", guarded("42"), nil, "bob", released), false, 409, "has no holder"},
		{"holder writes status", input(admissionv1.Update, "status", guarded("42"), guarded("42"), "bob", held()), true, 0, ""},
		{"stale status", input(admissionv1.Update, "status", guarded("41"), guarded("41"), "alice", held()), false, 403, "writes to /status"},
		{"stale scale", input(admissionv1.Update, "scale", guarded("42"), guarded("42"), "alice", held()), false, 403, "writes to /scale"},
		{"guard removal by holder", input(admissionv1.Update, "", guarded("42"), &Object{}, "bob", held()), true, 0, ""},
		{"guard removal by other", input(admissionv1.Update, "", guarded("42"), &Object{}, "alice", held()), false, 403, "is not the holder"},
		{"guard removal where required", func() Input {
			in := input(admissionv1.Update, "", guarded("42"), &Object{}, "bob", held())
			in.Required = true
			return in
		}(), false, 403, "cannot be removed"},
		{"unguarded where required", func() Input {
			in := input(admissionv1.Create, "", nil, &Object{}, "bob", held())
			in.Required = true
			return in
		}(), false, 403, "fencing is required"},
		{"pod binding: right pod", func() Input {
			in := input(admissionv1.Delete, "", guarded("42"), nil, "bob", pod)
			in.Requester.PodName = "worker-1"
			return in
		}(), true, 0, ""},
		{"pod binding: sibling pod of the same service account", func() Input {
			in := input(admissionv1.Delete, "", guarded("42"), nil, "bob", pod)
			in.Requester.PodName = "worker-2"
			return in
		}(), false, 403, "bob (pod worker-2) is not the holder"},
		{"re-spelled token +42", input(admissionv1.Update, "", guarded("42"), guarded("+42"), "alice", held()), false, 400, "not written canonically"},
		{"re-spelled token 042", input(admissionv1.Update, "", guarded("42"), guarded("042"), "alice", held()), false, 400, "not written canonically"},
		{"re-spelled token -0", input(admissionv1.Create, "", nil, guarded("-0"), "bob", LeaseState{Exists: true, Holder: "bob", HolderUser: "bob", ExpireTime: now.Add(time.Minute)}), false, 400, "not written canonically"},
		{"holder without expireTime: fail closed", func() Input {
			st := held()
			st.ExpireTime = time.Time{}
			return input(admissionv1.Update, "", guarded("41"), guarded("42"), "bob", st)
		}(), false, 409, "no expireTime"},
		{"inside the commit-lag margin", lagged(900*time.Millisecond, 15*time.Second, 0), false, 409, "writes stop being accepted at"},
		{"outside the commit-lag margin", lagged(1200*time.Millisecond, 15*time.Second, 0), true, 0, ""},
		{"the margin is capped at a tenth of a short lease", lagged(150*time.Millisecond, time.Second, 0), true, 0, ""},
		{"stamped renewal: accepted past the acknowledged expireTime", lagged(-5*time.Second, 15*time.Second, 4*time.Second), true, 0, ""},        // bound: now + 11 s - skew
		{"stamped renewal too old: refused", lagged(-5*time.Second, 15*time.Second, 14*time.Second), false, 409, "writes stop being accepted at"}, // bound: now + 1 s - skew, inside the margin
		{"pods/status that rewrites the token takes the token rules", input(admissionv1.Update, "status", guarded("42"), guarded("999999999999"), "bob", held()), false, 409, "was never issued"},
		{"pods/status that lowers the token", input(admissionv1.Update, "status", guarded("42"), guarded("0"), "bob", held()), false, 409, "already accepted token 42"},
		{"pods/status that removes the guard, from someone else", input(admissionv1.Update, "status", guarded("42"), &Object{}, "alice", held()), false, 403, "is not the holder"},
		{"status write that removes the guard where required", required(input(admissionv1.Update, "status", guarded("42"), &Object{}, "bob", held())), false, 403, "cannot be removed"},
		{"the garbage collector finishes a cascade (finalizers and ownerReferences only)", func() Input {
			in := cleanup(input(admissionv1.Update, "", guarded("42"), guarded("42"), "system:serviceaccount:kube-system:generic-garbage-collector", released))
			in.CleanupOnly = true
			return in
		}(), true, 0, ""},
		// The node rule (docs/design.md, "Guarded Pods on real nodes"): the
		// kubelet reports the status of, and finishes the deletion of, the
		// pods bound to its node, which no holder authorises.
		{"pods/status by system:node:n1, guard and token unchanged, pod on n1", byNode(input(admissionv1.Update, "status", podOn("n1", false), podOn("n1", false), "", held()), "n1"), true, 0, ""},
		{"pods/status by system:node:n1, guard and token unchanged, pod on n2", byNode(input(admissionv1.Update, "status", podOn("n2", false), podOn("n2", false), "", held()), "n1"), false, 403,
			"system:node:n1 is not the holder of lease jobs/job"},
		{"pods/status by system:node:n1 of its pod after the lease was released", byNode(input(admissionv1.Update, "status", podOn("n1", false), podOn("n1", false), "", released), "n1"), true, 0, ""},
		{"pods/status by system:node:n1 of its pod that lowers the token takes the token rules", byNode(input(admissionv1.Update, "status", podOn("n1", false), &Object{Lease: "job", Token: "41", HasToken: true, NodeName: "n1"}, "", held()), "n1"), false, 409,
			"already accepted token 42"},
		{"pods/status by system:node:n1 of its pod that removes the guard", byNode(input(admissionv1.Update, "status", podOn("n1", false), &Object{NodeName: "n1"}, "", held()), "n1"), false, 403,
			"system:node:n1 is not the holder of lease jobs/job"},
		{"pods/status by a user named system:node:n1 outside group system:nodes", func() Input {
			in := byNode(input(admissionv1.Update, "status", podOn("n1", false), podOn("n1", false), "", held()), "n1")
			in.Requester.Groups = []string{"system:authenticated"}
			return in
		}(), false, 403, "system:node:n1 is not the holder of lease jobs/job"},
		{"a Widget's /status by system:node:n1 (not a pod)", func() Input {
			in := byNode(input(admissionv1.Update, "status", podOn("n1", false), podOn("n1", false), "", held()), "n1")
			in.Pod = false
			return in
		}(), false, 403, "system:node:n1 is not the holder of lease jobs/job"},
		{"a pod's spec by system:node:n1 (not /status)", byNode(input(admissionv1.Update, "", podOn("n1", false), podOn("n1", false), "", held()), "n1"), false, 403,
			"system:node:n1 is not the holder of lease jobs/job"},
		{"DELETE by system:node:n1 of a pod with deletionTimestamp set", byNode(input(admissionv1.Delete, "", podOn("n1", true), nil, "", held()), "n1"), true, 0, ""},
		{"DELETE by system:node:n1 of a pod without deletionTimestamp", byNode(input(admissionv1.Delete, "", podOn("n1", false), nil, "", held()), "n1"), false, 403,
			"system:node:n1 is not the holder of lease jobs/job"},
		{"DELETE by system:node:n1 of a pod on n2 with deletionTimestamp set", byNode(input(admissionv1.Delete, "", podOn("n2", true), nil, "", held()), "n1"), false, 403,
			"system:node:n1 is not the holder of lease jobs/job"},
		{"DELETE by system:node:n1 of its pod with deletionTimestamp set, the lease expired", byNode(input(admissionv1.Delete, "", podOn("n1", true), nil, "", expired), "n1"), true, 0, ""},
		{"DELETE by system:node:n1 of its pod with deletionTimestamp set, the lease deleted", byNode(input(admissionv1.Delete, "", podOn("n1", true), nil, "", LeaseState{}), "n1"), true, 0, ""},
		// PodGC and taint eviction mark a pod Failed (or add a condition)
		// through pods/status before deleting it: as clean-up users
		// (--fencing-cleanup-user) they may, guard and token kept.
		{"PodGC, a clean-up user, marks a guarded pod Failed (pods/status, guard and token unchanged)", func() Input {
			in := cleanup(input(admissionv1.Update, "status", podOn("gone", false), podOn("gone", false), "system:serviceaccount:kube-system:pod-garbage-collector", released))
			in.Pod = true
			return in
		}(), true, 0, ""},
		{"a clean-up user's pods/status that lowers the token takes the token rules", func() Input {
			in := cleanup(input(admissionv1.Update, "status", podOn("gone", false), &Object{Lease: "job", Token: "41", HasToken: true}, "system:serviceaccount:kube-system:pod-garbage-collector", held()))
			in.Pod = true
			return in
		}(), false, 409, "already accepted token 42"},
		{"a clean-up user's /status of a Widget", cleanup(input(admissionv1.Update, "status", guarded("42"), guarded("42"), "system:serviceaccount:kube-system:pod-garbage-collector", held())), false, 403,
			"is not the holder of lease jobs/job"},
		{"lease read fails: fail closed", func() Input {
			in := input(admissionv1.Create, "", nil, guarded("42"), "bob", held())
			in.Lease = func(string) (LeaseState, error) { return LeaseState{}, errors.New("boom") }
			return in
		}(), false, 500, "fail closed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := Decide(c.in)
			if v.Allowed != c.allowed {
				t.Fatalf("allowed = %v, want %v (%s)", v.Allowed, c.allowed, v.Message)
			}
			if !c.allowed && (v.Code != c.code || !strings.Contains(v.Message, c.msg)) {
				t.Fatalf("refusal %d %q, want %d containing %q", v.Code, v.Message, c.code, c.msg)
			}
		})
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

// FuzzDecide: no input makes the decision panic, every refusal has a specific
// message and a status code, and a token lower than the object's accepted
// token is never allowed.
func FuzzDecide(f *testing.F) {
	for _, s := range []struct {
		op                 string
		sub                string
		oldLease, oldToken string
		newLease, newToken string
		user               string
		leaseToken         int64
		holder             string
	}{
		{"CREATE", "", "", "", "job", "42", "bob", 42, "bob"},
		{"UPDATE", "", "job", "42", "job", "41", "alice", 42, "bob"},
		{"UPDATE", "status", "job", "42", "job", "42", "alice", 42, "bob"},
		{"DELETE", "", "job", "42", "", "", "bob", 42, ""},
		{"UPDATE", "scale", "job", "9223372036854775807", "other", "-1", "", 0, "x"},
		{"UPDATE", "", "job", "abc", "", "", "bob", 7, "bob"},
	} {
		f.Add(s.op, s.sub, s.oldLease, s.oldToken, s.newLease, s.newToken, s.user, s.leaseToken, s.holder)
	}
	f.Fuzz(func(t *testing.T, op, sub, oldLease, oldToken, newLease, newToken, user string, leaseToken int64, holder string) {
		var oldObj, newObj *Object
		if op != "CREATE" {
			oldObj = &Object{Lease: oldLease, Token: oldToken, HasToken: oldToken != ""}
		}
		if op != "DELETE" {
			newObj = &Object{Lease: newLease, Token: newToken, HasToken: newToken != ""}
		}
		st := LeaseState{Exists: leaseToken >= 0, Token: leaseToken, Holder: holder, HolderUser: holder, ExpireTime: now.Add(time.Second)}
		in := input(admissionv1.Operation(op), sub, oldObj, newObj, user, st)
		in.Lease = func(string) (LeaseState, error) { return st, nil }
		v := Decide(in)
		if !v.Allowed && (v.Message == "" || v.Code == 0 || v.Reason == "") {
			t.Fatalf("refusal without message, code or reason: %+v", v)
		}
		if v.Allowed && oldObj != nil && newObj != nil && sub == "" && oldLease != "" && oldLease == newLease {
			o, err1 := parseToken(oldToken)
			n, err2 := parseToken(newToken)
			if err1 == nil && err2 == nil && n < o {
				t.Fatalf("accepted token %d after the object accepted %d", n, o)
			}
		}
	})
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
		got := ShortLeaseWarning(c.l, DefaultSkew, DefaultCommitLag)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("ShortLeaseWarning(%v) = %q, want %q", c.l, got, c.want)
		}
		if got != "" && (!strings.Contains(got, "= 11s") || !strings.Contains(got, "at least 11")) {
			t.Errorf("ShortLeaseWarning(%v) = %q: does not name the 11s threshold", c.l, got)
		}
	}
}

// TestDecideClusterScoped: a cluster-scoped object (no namespace) has no
// FencedLease to check its guard, so a create or update that leaves the guard
// on it is refused (403, uncheckable) whatever its token; a delete, an update
// removing the guard, and unguarded writes pass; no lease is ever read.
func TestDecideClusterScoped(t *testing.T) {
	read := false
	clusterScoped := func(op admissionv1.Operation, sub string, old, new *Object) Input {
		in := input(op, sub, old, new, "mallory", held())
		in.Namespace = ""
		in.Lease = func(string) (LeaseState, error) { read = true; return held(), nil }
		return in
	}
	unguarded := &Object{}
	for _, tc := range []struct {
		name   string
		in     Input
		refuse bool
	}{
		{"create with the current token", clusterScoped(admissionv1.Create, "", nil, guarded("42")), true},
		{"create with a stale token", clusterScoped(admissionv1.Create, "", nil, guarded("1")), true},
		{"create without a token", clusterScoped(admissionv1.Create, "", nil, &Object{Lease: "job"}), true},
		{"update adding the guard", clusterScoped(admissionv1.Update, "", unguarded, guarded("42")), true},
		{"update keeping the guard", clusterScoped(admissionv1.Update, "", guarded("42"), guarded("42")), true},
		{"status update keeping the guard", clusterScoped(admissionv1.Update, "status", guarded("42"), guarded("42")), true},
		{"update removing the guard", clusterScoped(admissionv1.Update, "", guarded("42"), unguarded), false},
		{"delete", clusterScoped(admissionv1.Delete, "", guarded("42"), nil), false},
		{"unguarded create", clusterScoped(admissionv1.Create, "", nil, unguarded), false},
	} {
		v := Decide(tc.in)
		if !tc.refuse {
			if !v.Allowed {
				t.Errorf("%s: refused, want accepted: %s", tc.name, v.Message)
			}
			continue
		}
		if v.Allowed || v.Code != 403 || v.Reason != ReasonUncheckable {
			t.Errorf("%s: %+v, want refused 403 %s", tc.name, v, ReasonUncheckable)
		}
		if !strings.Contains(v.Message, "cluster-scoped") || !strings.Contains(v.Message, "remove the "+coordv1alpha1.GuardLeaseLabel+" label") {
			t.Errorf("%s: message %q does not say why and what to do", tc.name, v.Message)
		}
	}
	if read {
		t.Errorf("a lease was read for a cluster-scoped object")
	}
}
