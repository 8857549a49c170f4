package fencing_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"

	"github.com/kubefence/kubefence/test/inprocess"
	"github.com/kubefence/kubefence/test/ruletable"
)

// admissions are both modes' admission in process, built once.
func admissions(t testing.TB) map[string]*inprocess.Admission {
	t.Helper()
	out := map[string]*inprocess.Admission{}
	for _, m := range []string{ruletable.Webhook, ruletable.Policy} {
		a, err := inprocess.New("../../..", ruletable.UnitOperator(m))
		if err != nil {
			t.Fatal(err)
		}
		out[m] = a
	}
	return out
}

// TestFencingRuleTable runs the fencing rule's one table
// (test/ruletable.FencingRows) against both back ends in process: the Go
// rule behind the fencing webhooks (webhook mode) and the generated
// ValidatingAdmissionPolicy compiled and evaluated by the API server's own
// code (policy mode). A change to either back end that the other lacks
// fails here; test/enforcement replays the same rows on a real API server.
func TestFencingRuleTable(t *testing.T) {
	a := admissions(t)
	for _, row := range ruletable.FencingRows() {
		t.Run(row.Name, func(t *testing.T) {
			for _, m := range []string{ruletable.Webhook, ruletable.Policy} {
				err := a[m].Admit(context.Background(), row.World(), row.Request())
				if p := row.Check(m, err, ruletable.UnitTokens, row.Write.In.Unit()); p != "" {
					t.Error(p)
				}
			}
		})
	}
}

// FuzzDecide compares the two back ends of the fencing rule on random
// writes: the Go rule behind the fencing webhooks and the generated policy,
// both in process (test/inprocess), must allow the same writes and refuse
// the others for the same reason class (test/ruletable.VerdictOf). Lease
// job holds leaseToken (none if negative), held by holder (user holder;
// nobody if empty) until well after the webhook's cut-off; lease other is
// held by bob. A /status write is a Pod's, and so is every write of a user
// system:node:<node> (a kubelet, the pod bound to n1). A refusal always has
// a message and a code, and a token lower than the object's is never
// accepted.
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
		{"UPDATE", "", "job", "42", "other", "7", "bob", 42, "bob"},
		{"UPDATE", "", "job", "43", "job", "43", "bob", 42, "bob"},
		{"UPDATE", "", "job", "41", "job", "41", "bob", 42, "bob"}, // an inherited token below the lease's
		{"UPDATE", "status", "job", "42", "job", "42", "system:node:n1", 42, "bob"},
		{"DELETE", "", "job", "42", "", "", "system:node:n1", 42, "bob"},
		{"DELETE", "", "job", "42", "", "42", "system:node:n2", 42, ""},
	} {
		f.Add(s.op, s.sub, s.oldLease, s.oldToken, s.newLease, s.newToken, s.user, s.leaseToken, s.holder)
	}
	a := admissions(f)
	f.Fuzz(func(t *testing.T, op, sub, oldLease, oldToken, newLease, newToken, user string, leaseToken int64, holder string) {
		row, ok := fuzzRow(op, sub, oldLease, oldToken, newLease, newToken, user, leaseToken, holder)
		if !ok {
			t.Skip("a write or lease no API server would hand admission")
		}
		verdicts := map[string]ruletable.Verdict{}
		for _, m := range []string{ruletable.Webhook, ruletable.Policy} {
			err := a[m].Admit(context.Background(), row.World, row.Request)
			v := ruletable.VerdictOf(err)
			if !v.Allowed && (v.Message == "" || v.Code == 0 || v.Reason == ruletable.ReasonOther) {
				t.Fatalf("%s mode: a refusal without message, code or class: %v", m, v)
			}
			if v.Allowed && row.Lowered {
				t.Fatalf("%s mode: accepted token %s after the object accepted %s", m, newToken, oldToken)
			}
			verdicts[m] = v
		}
		w, p := verdicts[ruletable.Webhook], verdicts[ruletable.Policy]
		if w.Allowed != p.Allowed || w.Reason != p.Reason {
			t.Fatalf("the back ends disagree on %s %s of %+v -> %+v by %q (lease job: token %d, holder %q):\n  webhook: %v\n  policy:  %v",
				row.Request.Operation, row.Request.SubResource, oldObj(oldLease, oldToken), oldObj(newLease, newToken), user, leaseToken, holder, w, p)
		}
	})
}

func oldObj(lease, token string) string { return lease + "@" + token }

// fuzzInput is one fuzzed write in the unit tier's terms.
type fuzzInput struct {
	World   inprocess.World
	Request inprocess.Request
	// Lowered: the write lowers the object's token on the same lease.
	Lowered bool
}

// fuzzRow turns the fuzzer's strings into a write the API server could
// hand admission; ok false when it could not (an invalid label value, say).
func fuzzRow(op, sub, oldLease, oldToken, newLease, newToken, user string, leaseToken int64, holder string) (fuzzInput, bool) {
	ops := []string{"CREATE", "UPDATE", "DELETE"}
	if !slices.Contains(ops, op) {
		op = ops[len(op)%3]
	}
	kind := ruletable.Widget
	switch sub {
	case "":
	case "status":
		kind = ruletable.Pod // pods/status keeps label and annotation changes
	case "scale":
		if op != "UPDATE" {
			return fuzzInput{}, false
		}
	default:
		sub = ""
	}
	for _, l := range []string{oldLease, newLease} {
		if len(validation.IsValidLabelValue(l)) > 0 {
			return fuzzInput{}, false
		}
	}
	if user == "" {
		user = "system:anonymous"
	}
	as := ruletable.User{Name: user}
	if strings.HasPrefix(user, coordv1alpha1.NodeUserPrefix) {
		// A kubelet, writing a pod bound to node n1 (the node rule).
		if sub == "scale" {
			return fuzzInput{}, false
		}
		kind, as.Groups = ruletable.Pod, []string{coordv1alpha1.NodesGroup}
	}
	obj := func(lease, token string) *ruletable.Object {
		t := ruletable.Token(token)
		if strings.HasPrefix(token, "{") {
			t = ruletable.Token("x" + token) // a literal, not a situation's token
		}
		o := &ruletable.Object{Lease: lease, Token: t, Writer: "w"}
		if kind == ruletable.Pod {
			// Bound to n1; on DELETE newToken is free: "" says its deletion started.
			o.NodeName, o.Deleting = "n1", op == "DELETE" && newToken == ""
		}
		return o
	}
	w := ruletable.Write{Op: op, Sub: sub, Kind: kind, In: ruletable.Plain, As: as}
	if op != "CREATE" {
		w.Old = obj(oldLease, oldToken)
	}
	switch {
	case sub == "scale":
		w.New = w.Old
	case op != "DELETE":
		w.New = obj(newLease, newToken)
	}
	row := ruletable.FencingRow{Lease: ruletable.Held, Write: w}
	in := fuzzInput{World: row.World(), Request: row.Request()}
	in.World.Leases = nil
	ns := ruletable.Plain.Unit()
	if strings.ContainsAny(holder, "\n\r") {
		// Policy mode grants no lease to a user with a line break: the
		// tenure table's entries are lines (policy.Table refuses it).
		return fuzzInput{}, false
	}
	if leaseToken >= 0 {
		job := ruletable.HeldLease(ns, "job", holder, holder, leaseToken)
		if holder == "" {
			job.Spec.Requests = nil
			job.Status.HolderIdentity, job.Status.HolderUser, job.Status.ExpireTime = "", "", nil
		} else {
			expire := metav1.NewMicroTime(ruletable.UnitNow.Add(time.Hour))
			job.Status.ExpireTime = &expire
		}
		in.World.Leases = append(in.World.Leases, job)
	}
	in.World.Leases = append(in.World.Leases, ruletable.HeldLease(ns, "other", "bob", "bob", 7))
	if op == "UPDATE" && sub == "" && oldLease != "" && oldLease == newLease {
		o, err1 := strconv.ParseInt(oldToken, 10, 64)
		n, err2 := strconv.ParseInt(newToken, 10, 64)
		in.Lowered = err1 == nil && err2 == nil && o >= 0 && n >= 0 && n < o
	}
	return in, true
}
