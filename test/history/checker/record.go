// Package checker judges a history of guarded writes recorded by the kubefence
// history test (test/history): workers append "<worker>:<token>:<seq>" to the
// spec.entries of Widgets guarded by FencedLeases, log every attempt, and the
// checker decides from those logs and the objects' final state whether
// fencing held.
//
// The properties, per guarded object (and, for the second, per lease):
//
//  1. Monotonic entries: the tokens of the entries, in the object's order,
//     never decrease, and the object's token annotation is not below the last.
//  2. No acceptance after a higher token: no write is accepted that was
//     invoked after a write with a higher token had been acknowledged (on the
//     same object, and on any object guarded by the same lease).
//  3. No lost acknowledgement: every acknowledged append is in the final
//     state; nothing refused, and nothing never attempted, is.
//  4. Linearizable: the object's reads and appends are linearizable as a
//     list-append register (github.com/anishathalye/porcupine). Appends whose
//     outcome is unknown (timeouts, killed workers) may or may not have
//     happened.
//
// Properties 1 to 4 judge by what the clients saw and when, on their clocks.
// Property 5 judges by what etcd committed and in which order, from the
// commit log (CommitRecorder: every version of the Widgets and FencedLeases,
// with its resourceVersion, the etcd revision of its commit):
//
//  5. Commit order: a guarded write carrying token t commits at a revision
//     below that of every status of its lease naming a larger token, and above
//     the status that granted t. This sees what the others cannot: a write
//     admitted while its tenure was live that commits after the next grant
//     (its client invoked it before the new holder's first write, and it
//     overlaps in real time).
package checker

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Outcome is how one attempt ended, as the worker saw it.
type Outcome string

// Outcomes. Only OK and Timeout may have changed the object.
const (
	// OK: the API server acknowledged the write (or answered the read).
	OK Outcome = "ok"
	// Stale: refused by the fencing webhook as stale (fence.IsStale).
	Stale Outcome = "stale"
	// Conflict: an optimistic-concurrency conflict (resourceVersion moved, or the
	// object already existed on create). Definitely not applied.
	Conflict Outcome = "conflict"
	// Error: refused for another reason that is known to precede the write
	// (an admission refusal, a failed webhook call, a 4xx). Definitely not applied.
	Error Outcome = "error"
	// Timeout: no answer, a broken connection, a 5xx the server may have
	// committed before failing, or a worker killed while the write was in
	// flight. Indeterminate: the write may or may not have happened.
	Timeout Outcome = "timeout"
)

// Op kinds.
const (
	// Append reads the list, then writes it back with one value appended, with
	// the read's resourceVersion as precondition (a create when the object did
	// not exist). Len and Hash are the list the API server answered with.
	Append = "append"
	// Read reads the list: Len and Hash are what it returned (0 and Hash0 when
	// the object did not exist).
	Read = "read"
)

// Record types of a worker's log.
const (
	// TypeInvoke is written before an append is sent, so that an append whose
	// worker was killed in flight is known (as Timeout).
	TypeInvoke = "invoke"
	// TypeOp is a finished attempt.
	TypeOp = "op"
	// TypeEvent is anything else a worker reports (granted, stopped, ...).
	TypeEvent = "event"
)

// Record is one JSON line of a worker's log.
type Record struct {
	Type string `json:"type"`
	// ID identifies an attempt; an invoke record and its op record share it.
	ID     string `json:"id,omitempty"`
	Worker string `json:"worker"`
	Lease  string `json:"lease,omitempty"`
	Object string `json:"object,omitempty"`
	Op     string `json:"op,omitempty"`
	// Token is the fencing token the write carried (0 for reads).
	Token int64  `json:"token,omitempty"`
	Value string `json:"value,omitempty"`
	// Outcome of an op record.
	Outcome Outcome `json:"outcome,omitempty"`
	// Invoke and Complete are nanoseconds since the run's shared start (wall
	// clock of the one machine): Invoke is taken before the request is sent,
	// Complete after the answer arrived.
	Invoke   int64 `json:"invoke"`
	Complete int64 `json:"complete,omitempty"`
	// Len and Hash describe the list an OK op saw or left (see Chain).
	Len  int    `json:"len,omitempty"`
	Hash string `json:"hash,omitempty"`
	// Phase is "leader" (the worker believed it held the lease) or "stale" (it
	// kept writing with its last token after losing it).
	Phase string `json:"phase,omitempty"`
	// Event names a TypeEvent record (granted, stopped, started, exiting).
	Event string `json:"event,omitempty"`
	// Msg is an error message, shortened.
	Msg string `json:"msg,omitempty"`
}

// Never is the completion time of an op that never completed: it may take
// effect at any time after its invocation.
const Never int64 = math.MaxInt64

// Op is one attempt, ready for checking.
type Op struct {
	ID, Worker, Lease, Object, Kind string
	Token                           int64
	Value                           string
	Outcome                         Outcome
	Invoke, Complete                int64
	Len                             int
	Hash                            string
	Phase                           string
	Msg                             string
}

// Accepted tells whether the op certainly changed the object.
func (o Op) Accepted() bool { return o.Kind == Append && o.Outcome == OK }

// Indeterminate tells whether the op may or may not have changed the object.
func (o Op) Indeterminate() bool { return o.Kind == Append && o.Outcome == Timeout }

// ReadRecords reads JSON lines. A torn last line (a worker killed mid-write)
// is skipped; any other malformed line is an error.
func ReadRecords(r io.Reader) ([]Record, error) {
	var out []Record
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	var pending error
	for line := 1; sc.Scan(); line++ {
		b := sc.Bytes()
		if len(strings.TrimSpace(string(b))) == 0 {
			continue
		}
		if pending != nil {
			return nil, pending
		}
		var rec Record
		if err := json.Unmarshal(b, &rec); err != nil {
			pending = fmt.Errorf("line %d: %w", line, err)
			continue
		}
		out = append(out, rec)
	}
	return out, sc.Err()
}

// Ops turns records into ops: an invoke record without its op record (the
// worker was killed while the write was in flight) becomes a Timeout op that
// never completes.
func Ops(records []Record) []Op {
	done := map[string]bool{}
	for _, r := range records {
		if r.Type == TypeOp && r.ID != "" {
			done[r.ID] = true
		}
	}
	var ops []Op
	for _, r := range records {
		switch {
		case r.Type == TypeOp:
			op := Op{ID: r.ID, Worker: r.Worker, Lease: r.Lease, Object: r.Object, Kind: r.Op, Token: r.Token, Value: r.Value,
				Outcome: r.Outcome, Invoke: r.Invoke, Complete: r.Complete, Len: r.Len, Hash: r.Hash, Phase: r.Phase, Msg: r.Msg}
			if op.Outcome == Timeout && op.Kind == Append {
				op.Complete = Never
			}
			ops = append(ops, op)
		case r.Type == TypeInvoke && !done[r.ID]:
			ops = append(ops, Op{ID: r.ID, Worker: r.Worker, Lease: r.Lease, Object: r.Object, Kind: Append, Token: r.Token,
				Value: r.Value, Outcome: Timeout, Invoke: r.Invoke, Complete: Never, Phase: r.Phase, Msg: "no answer recorded (worker killed)"})
		}
	}
	return ops
}

// Value formats an entry: "<worker>:<token>:<seq>".
func Value(worker string, token, seq int64) string {
	return worker + ":" + strconv.FormatInt(token, 10) + ":" + strconv.FormatInt(seq, 10)
}

// TokenOf parses the token out of an entry written by Value.
func TokenOf(entry string) (int64, error) {
	last := strings.LastIndexByte(entry, ':')
	if last < 0 {
		return 0, fmt.Errorf("entry %q: expected <worker>:<token>:<seq>", entry)
	}
	prev := strings.LastIndexByte(entry[:last], ':')
	if prev < 0 {
		return 0, fmt.Errorf("entry %q: expected <worker>:<token>:<seq>", entry)
	}
	t, err := strconv.ParseInt(entry[prev+1:last], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("entry %q: token: %w", entry, err)
	}
	return t, nil
}
