package checker

import (
	"fmt"
	"strings"
	"testing"
)

// builder writes hand-made histories: it keeps each object's true list and
// produces ops whose logged answers match it, unless told otherwise.
type builder struct {
	ops   []Op
	lists map[string][]string
	seq   int64
}

func newBuilder() *builder { return &builder{lists: map[string][]string{}} }

func (b *builder) state(obj string) (int, string) {
	l := b.lists[obj]
	return len(l), HashList(l)
}

// read logs a read of obj over [at, end] that returned the true list.
func (b *builder) read(worker, obj string, at, end int64) {
	n, h := b.state(obj)
	b.ops = append(b.ops, Op{ID: fmt.Sprintf("%s/r%d", worker, at), Worker: worker, Lease: leaseOf(obj), Object: obj,
		Kind: Read, Outcome: OK, Invoke: at, Complete: end, Len: n, Hash: h})
}

// append logs an append over [at, end]; outcomes OK and applied Timeouts
// change the true list, at the moment this is called.
func (b *builder) append(worker, obj string, token int64, outcome Outcome, applied bool, at, end int64) string {
	b.seq++
	v := Value(worker, token, b.seq)
	if applied {
		b.lists[obj] = append(b.lists[obj], v)
	}
	op := Op{ID: fmt.Sprintf("%s/a%d", worker, b.seq), Worker: worker, Lease: leaseOf(obj), Object: obj, Kind: Append,
		Token: token, Value: v, Outcome: outcome, Invoke: at, Complete: end, Phase: "leader"}
	if outcome == OK {
		op.Len, op.Hash = b.state(obj)
	}
	if outcome == Timeout {
		op.Complete = Never
	}
	b.ops = append(b.ops, op)
	return v
}

// finals reads every object's true list at time at.
func (b *builder) finals(at int64) []Final {
	var fs []Final
	for obj, l := range b.lists {
		if len(l) == 0 {
			continue
		}
		tok, _ := TokenOf(l[len(l)-1])
		fs = append(fs, Final{Object: obj, Lease: leaseOf(obj), Exists: true, Entries: append([]string(nil), l...),
			Token: tok, HasToken: true, Invoke: at, Complete: at + 1})
	}
	return fs
}

// leaseOf: objects are named "<lease>-<n>".
func leaseOf(obj string) string { return obj[:strings.LastIndexByte(obj, '-')] }

// validHistory: two tenures on lease "job" with two objects, a stale holder
// refused, a conflict, an indeterminate append that happened and one that did
// not, and reads.
func validHistory() *builder {
	b := newBuilder()
	b.read("alice", "job-0", 0, 5)
	b.append("alice", "job-0", 1, OK, true, 6, 10)
	b.read("alice", "job-1", 11, 12)
	b.append("alice", "job-1", 1, OK, true, 13, 20)
	b.read("alice", "job-0", 21, 22)
	b.append("alice", "job-0", 1, Timeout, true, 23, 0)  // answer lost, but it happened
	b.append("alice", "job-1", 1, Timeout, false, 24, 0) // answer lost, did not happen
	// bob is granted token 2; alice, paused, keeps writing with token 1.
	b.read("bob", "job-0", 30, 31)
	b.append("bob", "job-0", 2, OK, true, 32, 40)
	b.append("alice", "job-0", 1, Stale, false, 35, 45)
	b.append("alice", "job-1", 1, Stale, false, 46, 47)
	b.append("carol", "job-0", 2, Conflict, false, 33, 41)
	b.read("bob", "job-1", 50, 51)
	b.append("bob", "job-1", 2, OK, true, 52, 60)
	// Concurrent appends: the answers decide the order.
	b.append("bob", "job-0", 2, OK, true, 61, 70)
	b.read("carol", "job-0", 62, 71)
	return b
}

func TestAcceptsAValidHistory(t *testing.T) {
	b := validHistory()
	res := Check(b.ops, b.finals(100), Options{})
	if !res.OK() {
		t.Fatalf("violations in a valid history: %v", res.Violations)
	}
	if res.Objects != 2 || res.Leases != 1 {
		t.Errorf("checked %d objects and %d leases, want 2 and 1", res.Objects, res.Leases)
	}
	if len(res.Inconclusive) > 0 {
		t.Errorf("inconclusive: %v", res.Inconclusive)
	}
}

// expect asserts that prop is among the violations and that nothing outside
// also is.
func expect(t *testing.T, res Result, prop Property, also ...Property) {
	t.Helper()
	allowed := map[Property]bool{prop: true}
	for _, p := range also {
		allowed[p] = true
	}
	if res.Counts[prop] == 0 {
		t.Errorf("%s was not detected; violations: %v", prop, res.Violations)
	}
	for p, n := range res.Counts {
		if !allowed[p] && n > 0 {
			t.Errorf("unexpected %d violations of %s: %v", n, p, res.Violations)
		}
	}
}

func TestDetectsDecreasingTokensInEntryOrder(t *testing.T) {
	b := newBuilder()
	b.read("bob", "job-0", 0, 1)
	b.read("alice", "job-0", 0, 1)
	// Concurrent, so no real-time rule applies; but the object took token 1
	// after token 2.
	b.append("bob", "job-0", 2, OK, true, 2, 10)
	b.append("alice", "job-0", 1, OK, true, 3, 11)
	expect(t, Check(b.ops, b.finals(20), Options{}), Monotonic)
}

func TestDetectsAnAnnotationBelowTheLastEntry(t *testing.T) {
	b := newBuilder()
	b.append("bob", "job-0", 2, OK, true, 0, 10)
	fs := b.finals(20)
	fs[0].Token = 1
	expect(t, Check(b.ops, fs, Options{}), Monotonic)
}

func TestDetectsAcceptanceAfterAHigherTokenOnTheObject(t *testing.T) {
	b := newBuilder()
	b.append("bob", "job-0", 2, OK, true, 0, 10)
	b.append("alice", "job-0", 1, OK, true, 20, 30) // invoked after bob's was acknowledged
	// The entries also go down, so property 1 fires too.
	expect(t, Check(b.ops, b.finals(40), Options{}), NoAcceptAfter, Monotonic)
}

func TestDetectsAnIndeterminateStaleWriteThatTookEffect(t *testing.T) {
	b := newBuilder()
	b.append("bob", "job-0", 2, OK, true, 0, 10)
	b.append("alice", "job-0", 1, Timeout, true, 20, 0)
	expect(t, Check(b.ops, b.finals(40), Options{}), NoAcceptAfter, Monotonic)
}

func TestDetectsAcceptanceAfterAHigherTokenOnAnotherObjectOfTheLease(t *testing.T) {
	b := newBuilder()
	b.append("bob", "job-0", 2, OK, true, 0, 10)
	b.append("alice", "job-1", 1, OK, true, 20, 30)
	// Each object on its own is fine: only the lease-level line is crossed.
	expect(t, Check(b.ops, b.finals(40), Options{}), NoAcceptAfterLease)
	// Other leases do not count.
	c := newBuilder()
	c.append("bob", "job-0", 2, OK, true, 0, 10)
	c.append("alice", "other-0", 1, OK, true, 20, 30)
	if res := Check(c.ops, c.finals(40), Options{}); !res.OK() {
		t.Errorf("tokens of different leases compared: %v", res.Violations)
	}
}

func TestDetectsALostAcknowledgement(t *testing.T) {
	b := newBuilder()
	b.append("alice", "job-0", 1, OK, true, 0, 10)
	v := b.append("alice", "job-0", 1, OK, true, 20, 30)
	fs := b.finals(40)
	fs[0].Entries = fs[0].Entries[:1] // the acknowledged write vanished
	res := Check(b.ops, fs, Options{})
	// The final read then contradicts the acknowledgement: not linearizable either.
	expect(t, res, NoLostAck, Linearizable)
	if !strings.Contains(fmt.Sprint(res.Violations), v) {
		t.Errorf("the lost value %s is not named: %v", v, res.Violations)
	}
}

func TestDetectsARefusedWriteThatTookEffect(t *testing.T) {
	b := newBuilder()
	b.append("alice", "job-0", 1, OK, true, 0, 10)
	b.append("alice", "job-0", 1, Stale, true, 20, 30) // refused, yet in the list
	expect(t, Check(b.ops, b.finals(40), Options{}), NoLostAck, Linearizable)
}

func TestDetectsAnEntryNobodyWrote(t *testing.T) {
	b := newBuilder()
	b.append("alice", "job-0", 1, OK, true, 0, 10)
	fs := b.finals(40)
	fs[0].Entries = append(fs[0].Entries, "mallory:1:99")
	expect(t, Check(b.ops, fs, Options{}), NoLostAck, Linearizable)
}

func TestDetectsADuplicatedEntry(t *testing.T) {
	b := newBuilder()
	v := b.append("alice", "job-0", 1, OK, true, 0, 10)
	fs := b.finals(40)
	fs[0].Entries = append(fs[0].Entries, v)
	expect(t, Check(b.ops, fs, Options{}), NoLostAck, Linearizable)
}

func TestDetectsAStaleRead(t *testing.T) {
	b := newBuilder()
	b.read("bob", "job-0", 0, 1) // the empty list
	b.append("alice", "job-0", 1, OK, true, 2, 10)
	// A read invoked after the append was acknowledged returns the old list.
	b.ops = append(b.ops, Op{ID: "bob/r", Worker: "bob", Lease: "job", Object: "job-0", Kind: Read, Outcome: OK,
		Invoke: 20, Complete: 30, Len: 0, Hash: Hash0})
	expect(t, Check(b.ops, b.finals(40), Options{}), Linearizable)
}

func TestDetectsAnAppendThatDidNotExtendTheList(t *testing.T) {
	// Two appends both acknowledged as extending the empty list (a lost
	// update: the optimistic lock did not hold); the second one overwrote the
	// first, which is then missing, and the answers cannot be ordered.
	b := newBuilder()
	v1 := b.append("alice", "job-0", 1, OK, true, 0, 10)
	b.lists["job-0"] = nil
	b.append("alice", "job-0", 1, OK, true, 20, 30)
	res := Check(b.ops, b.finals(40), Options{})
	expect(t, res, Linearizable, NoLostAck)
	if !strings.Contains(fmt.Sprint(res.Violations), v1) {
		t.Errorf("the overwritten value %s is not named: %v", v1, res.Violations)
	}
}

func TestIndeterminateAppendsMayOrMayNotHaveHappened(t *testing.T) {
	for _, applied := range []bool{true, false} {
		b := newBuilder()
		b.append("alice", "job-0", 1, OK, true, 0, 10)
		b.append("alice", "job-0", 1, Timeout, applied, 11, 0)
		b.read("alice", "job-0", 50, 60)
		b.append("alice", "job-0", 1, OK, true, 61, 70)
		if res := Check(b.ops, b.finals(100), Options{}); !res.OK() {
			t.Errorf("applied=%v: %v", applied, res.Violations)
		}
	}
}

func TestOpsTurnsAnUnansweredInvocationIntoATimeout(t *testing.T) {
	recs := []Record{
		{Type: TypeInvoke, ID: "w1/1", Worker: "w1", Lease: "job", Object: "job-0", Op: Append, Token: 3, Value: "w1:3:1", Invoke: 5},
		{Type: TypeInvoke, ID: "w1/2", Worker: "w1", Lease: "job", Object: "job-0", Op: Append, Token: 3, Value: "w1:3:2", Invoke: 7},
		{Type: TypeOp, ID: "w1/1", Worker: "w1", Lease: "job", Object: "job-0", Op: Append, Token: 3, Value: "w1:3:1", Invoke: 5, Complete: 6, Outcome: OK, Len: 1, Hash: HashList([]string{"w1:3:1"})},
	}
	ops := Ops(recs)
	if len(ops) != 2 {
		t.Fatalf("got %d ops, want 2: %+v", len(ops), ops)
	}
	for _, op := range ops {
		switch op.ID {
		case "w1/1":
			if op.Outcome != OK || op.Complete != 6 {
				t.Errorf("answered invocation became %+v", op)
			}
		case "w1/2":
			if op.Outcome != Timeout || op.Complete != Never || op.Value != "w1:3:2" {
				t.Errorf("unanswered invocation became %+v", op)
			}
		default:
			t.Errorf("unexpected op %+v", op)
		}
	}
}

func TestReadRecordsSkipsATornLastLine(t *testing.T) {
	in := `{"type":"op","id":"a","worker":"w1","op":"read","outcome":"ok","invoke":1,"complete":2}
{"type":"event","worker":"w1","event":"granted","invoke":3}
{"type":"op","id":"b","wor`
	recs, err := ReadRecords(strings.NewReader(in))
	if err != nil || len(recs) != 2 {
		t.Fatalf("got %d records, %v", len(recs), err)
	}
	if _, err := ReadRecords(strings.NewReader("{bad\n{}\n")); err == nil {
		t.Error("a malformed line in the middle was accepted")
	}
}

func TestTokenOf(t *testing.T) {
	for in, want := range map[string]int64{"w1:7:3": 7, "a:b:12:0": 12, "w:0:0": 0} {
		if got, err := TokenOf(in); err != nil || got != want {
			t.Errorf("TokenOf(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "w1", "w1:7", "w1:x:1"} {
		if _, err := TokenOf(in); err == nil {
			t.Errorf("TokenOf(%q) accepted", in)
		}
	}
}
