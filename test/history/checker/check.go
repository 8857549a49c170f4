package checker

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Property names one of the checked properties.
type Property string

// The properties (see the package documentation).
const (
	Monotonic          Property = "monotonic-entries"
	NoAcceptAfter      Property = "no-accept-after-higher"
	NoAcceptAfterLease Property = "no-accept-after-higher-lease"
	NoLostAck          Property = "no-lost-ack"
	Linearizable       Property = "linearizable"
	CommitOrder        Property = "commit-order"
)

// Properties lists every property, in report order.
var Properties = []Property{Monotonic, NoAcceptAfter, NoAcceptAfterLease, NoLostAck, Linearizable, CommitOrder}

// Final is one guarded object as read after every worker stopped.
type Final struct {
	Object, Lease string
	// Exists is false when the object was never created (or is gone).
	Exists  bool
	Entries []string
	// Token is the object's kubefence.io/fencing-token annotation; HasToken
	// tells whether it had one.
	Token    int64
	HasToken bool
	// Invoke and Complete bracket the final read, in the ops' time base.
	Invoke, Complete int64
}

// Violation is one breach of a property.
type Violation struct {
	Property Property
	// Object (or, for NoAcceptAfterLease and most CommitOrder violations, the
	// lease) where it happened.
	Object string
	Detail string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s on %s: %s", v.Property, v.Object, v.Detail)
}

// Options tune Check.
type Options struct {
	// LinearizabilityTimeout bounds porcupine per object (default 60s); a
	// check that runs out is reported as inconclusive, not as a violation.
	LinearizabilityTimeout time.Duration
	// VisualizeDir, when set, receives a porcupine visualization (HTML) of
	// every object whose history is not linearizable.
	VisualizeDir string
	// MaxPerProperty caps the violations reported per property and object
	// (default 5); Result.Counts still counts them all.
	MaxPerProperty int
	// Commits is the run's commit log (CommitRecorder): with it, Check also
	// judges commit order (CommitOrder) and whether the log is complete
	// (Result.CommitLogGaps); without it (nil), neither.
	Commits []Version
}

// Result is the verdict on a history.
type Result struct {
	// Objects and Leases checked.
	Objects, Leases int
	// Violations found (capped per property and object).
	Violations []Violation
	// Counts of violations per property (uncapped).
	Counts map[Property]int
	// LinearizableOps is how many ops porcupine checked, over all objects.
	LinearizableOps int
	// Inconclusive lists objects whose linearizability check timed out.
	Inconclusive []string
	// CommitOrderChecked tells whether a commit log was given (Options.Commits).
	CommitOrderChecked bool
	// Commits describes the commit log.
	Commits CommitStats
	// CommitLogGaps lists what shows versions missing from the commit log: a
	// failure of the recording, which leaves CommitOrder unproven (not a
	// violation by kubefence).
	CommitLogGaps []string
}

// OK tells whether no property was violated.
func (r Result) OK() bool { return len(r.Violations) == 0 }

type reporter struct {
	res *Result
	max int
	n   map[string]int
}

func (rp *reporter) add(p Property, object, format string, args ...any) {
	rp.res.Counts[p]++
	key := string(p) + "\x00" + object
	rp.n[key]++
	if rp.n[key] <= rp.max {
		rp.res.Violations = append(rp.res.Violations, Violation{Property: p, Object: object, Detail: fmt.Sprintf(format, args...)})
	}
}

// Check judges ops against the final state of the objects.
func Check(ops []Op, finals []Final, opts Options) Result {
	if opts.LinearizabilityTimeout == 0 {
		opts.LinearizabilityTimeout = 60 * time.Second
	}
	if opts.MaxPerProperty == 0 {
		opts.MaxPerProperty = 5
	}
	res := Result{Counts: map[Property]int{}}
	rp := &reporter{res: &res, max: opts.MaxPerProperty, n: map[string]int{}}

	byObject := map[string][]Op{}
	leaseOf := map[string]string{}
	for _, op := range ops {
		byObject[op.Object] = append(byObject[op.Object], op)
		if op.Lease != "" {
			leaseOf[op.Object] = op.Lease
		}
	}
	finalOf := map[string]Final{}
	for _, f := range finals {
		finalOf[f.Object] = f
		if _, ok := byObject[f.Object]; !ok {
			byObject[f.Object] = nil
		}
		if f.Lease != "" {
			leaseOf[f.Object] = f.Lease
		}
	}
	objects := make([]string, 0, len(byObject))
	for o := range byObject {
		objects = append(objects, o)
	}
	sort.Strings(objects)
	res.Objects = len(objects)

	happened := map[string][]Op{} // per object: appends known to have taken effect
	for _, obj := range objects {
		f, ok := finalOf[obj]
		if !ok {
			f = Final{Object: obj, Lease: leaseOf[obj]}
		}
		objOps := byObject[obj]
		checkMonotonic(rp, f)
		happened[obj] = checkLostAcks(rp, f, objOps)
		checkNoAcceptAfter(rp, NoAcceptAfter, obj, happened[obj], ackedSorted(objOps))
		checkLinearizable(rp, &res, f, objOps, opts)
	}

	// The lease-level line: a write accepted on one object after a higher token
	// of the same lease was acknowledged on another.
	leases := map[string][]string{}
	for _, obj := range objects {
		if l := leaseOf[obj]; l != "" {
			leases[l] = append(leases[l], obj)
		}
	}
	res.Leases = len(leases)
	leaseNames := make([]string, 0, len(leases))
	for l := range leases {
		leaseNames = append(leaseNames, l)
	}
	sort.Strings(leaseNames)
	for _, l := range leaseNames {
		acked := map[string][]Op{}
		for _, obj := range leases[l] {
			acked[obj] = ackedSorted(byObject[obj])
		}
		for _, obj := range leases[l] {
			for _, other := range leases[l] {
				if other == obj {
					continue
				}
				checkNoAcceptAfter(rp, NoAcceptAfterLease, l, happened[obj], acked[other])
			}
		}
	}
	if opts.Commits != nil {
		res.CommitOrderChecked = true
		checkCommitOrder(rp, &res, opts.Commits, finals)
	}
	return res
}

// checkMonotonic: property 1, on the final state alone.
func checkMonotonic(rp *reporter, f Final) {
	var last int64 = -1
	for i, e := range f.Entries {
		t, err := TokenOf(e)
		if err != nil {
			rp.add(Monotonic, f.Object, "entry %d: %v", i, err)
			continue
		}
		if t < last {
			rp.add(Monotonic, f.Object, "entry %d %q has token %d after an entry with token %d", i, e, t, last)
		}
		last = max(last, t)
	}
	if f.HasToken && last >= 0 && f.Token < last {
		rp.add(Monotonic, f.Object, "the object's token annotation %d is below its last entry's token %d", f.Token, last)
	}
}

// checkLostAcks: property 3. It returns the appends known to have happened:
// the acknowledged ones and the indeterminate ones found in the final state.
func checkLostAcks(rp *reporter, f Final, ops []Op) []Op {
	inFinal := map[string]int{}
	for i, e := range f.Entries {
		if j, dup := inFinal[e]; dup {
			rp.add(NoLostAck, f.Object, "entry %q appears twice (positions %d and %d)", e, j, i)
			continue
		}
		inFinal[e] = i
	}
	attempts := map[string]Op{}
	var happened []Op
	for _, op := range ops {
		if op.Kind != Append {
			continue
		}
		attempts[op.Value] = op
		_, present := inFinal[op.Value]
		switch {
		case op.Accepted() && !present:
			rp.add(NoLostAck, f.Object, "acknowledged append %q (token %d, %s, completed at %s) is not in the final state",
				op.Value, op.Token, op.ID, fmtTime(op.Complete))
		case op.Accepted(), op.Indeterminate() && present:
			happened = append(happened, op)
		}
	}
	for e := range inFinal {
		op, ok := attempts[e]
		switch {
		case !ok:
			rp.add(NoLostAck, f.Object, "entry %q is in the final state but no append of it to this object was attempted", e)
		case op.Outcome == Stale || op.Outcome == Conflict || op.Outcome == Error:
			rp.add(NoLostAck, f.Object, "entry %q is in the final state but its append was refused (%s: %s)", e, op.Outcome, op.Msg)
		}
	}
	return happened
}

// ackedSorted returns the acknowledged appends by completion time.
func ackedSorted(ops []Op) []Op {
	var acked []Op
	for _, op := range ops {
		if op.Accepted() {
			acked = append(acked, op)
		}
	}
	sort.Slice(acked, func(i, j int) bool { return acked[i].Complete < acked[j].Complete })
	return acked
}

// checkNoAcceptAfter: property 2. Every write that took effect must carry a
// token at least as high as every acknowledged write that completed before it
// was invoked (in real time).
func checkNoAcceptAfter(rp *reporter, p Property, where string, happened, acked []Op) {
	if len(acked) == 0 {
		return
	}
	best := make([]int, len(acked)) // index of the highest token among acked[:i+1]
	for i := range acked {
		best[i] = i
		if i > 0 && acked[best[i-1]].Token >= acked[i].Token {
			best[i] = best[i-1]
		}
	}
	for _, b := range happened {
		// acked[:n] completed strictly before b was invoked.
		n := sort.Search(len(acked), func(i int) bool { return acked[i].Complete >= b.Invoke })
		if n == 0 {
			continue
		}
		a := acked[best[n-1]]
		if a.Token > b.Token {
			rp.add(p, where, "%s %q (token %d, %s phase, invoked at %s) took effect after %s %q with the higher token %d on %s was acknowledged at %s",
				b.ID, b.Value, b.Token, b.Phase, fmtTime(b.Invoke), a.ID, a.Value, a.Token, a.Object, fmtTime(a.Complete))
		}
	}
}

// checkLinearizable: property 4, with porcupine.
func checkLinearizable(rp *reporter, res *Result, f Final, ops []Op, opts Options) {
	inFinal := map[string]bool{}
	for _, e := range f.Entries {
		inFinal[e] = true
	}
	clients := map[string]int{}
	client := func(w string) int {
		if _, ok := clients[w]; !ok {
			clients[w] = len(clients)
		}
		return clients[w]
	}
	var hist []porcupine.Operation
	for _, op := range ops {
		var out Output
		switch {
		case op.Kind == Read && op.Outcome == OK, op.Accepted():
			out = Output{Len: op.Len, Hash: op.Hash}
		case op.Indeterminate() && inFinal[op.Value]:
			// It happened, at some time after its invocation. An indeterminate
			// append missing from the final state is left out: that is the same as
			// linearizing it after the final read.
			out = Output{Unknown: true}
		default:
			continue // refused, or a failed read: no effect, nothing observed
		}
		hist = append(hist, porcupine.Operation{ClientId: client(op.Worker), Input: Input{Kind: op.Kind, Value: op.Value},
			Call: op.Invoke, Output: out, Return: op.Complete, Metadata: op.ID})
	}
	final := f.Entries
	if !f.Exists {
		final = nil
	}
	hist = append(hist, porcupine.Operation{ClientId: client("final-read"), Input: Input{Kind: Read},
		Call: f.Invoke, Output: Output{Len: len(final), Hash: HashList(final)}, Return: f.Complete, Metadata: "final read"})
	res.LinearizableOps += len(hist)

	verdict, info := porcupine.CheckOperationsVerbose(Model, hist, opts.LinearizabilityTimeout)
	switch verdict {
	case porcupine.Ok:
	case porcupine.Unknown:
		res.Inconclusive = append(res.Inconclusive, f.Object)
	default:
		detail := fmt.Sprintf("%d reads and appends (with the final read) have no linearization as a list-append register", len(hist))
		if longest := longestPartial(info); longest != "" {
			detail += "; " + longest
		}
		if opts.VisualizeDir != "" {
			path := filepath.Join(opts.VisualizeDir, "linearizability-"+strings.ReplaceAll(f.Object, "/", "_")+".html")
			if err := porcupine.VisualizePath(Model, info, path); err == nil {
				detail += "; visualization: " + path
			}
		}
		rp.add(Linearizable, f.Object, "%s", detail)
	}
}

// longestPartial describes how far the longest partial linearization got.
func longestPartial(info porcupine.LinearizationInfo) string {
	longest := 0
	for _, partition := range info.PartialLinearizations() {
		for _, lin := range partition {
			longest = max(longest, len(lin))
		}
	}
	if longest == 0 {
		return ""
	}
	return fmt.Sprintf("the longest partial linearization has %d ops", longest)
}

func fmtTime(ns int64) string {
	if ns == Never {
		return "never"
	}
	return time.Duration(ns).String()
}
