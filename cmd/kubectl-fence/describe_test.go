package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/test/testenv"
)

// leaseEvent creates an Event regarding a lease, as the controller records it.
func leaseEvent(t *testing.T, l *coordv1alpha1.FencedLease, when time.Duration, reason, note string) {
	t.Helper()
	ev := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", l.Name, time.Now().UnixNano()), Namespace: l.Namespace},
		EventTime:           *at(when),
		ReportingController: "kubefence.io/fencedlease-controller",
		ReportingInstance:   "manager-0",
		Action:              "Grant",
		Reason:              reason,
		Type:                corev1.EventTypeNormal,
		Note:                note,
		Regarding: corev1.ObjectReference{
			APIVersion: coordv1alpha1.GroupVersion.String(), Kind: "FencedLease",
			Namespace: l.Namespace, Name: l.Name, UID: l.UID,
		},
	}
	if err := k8s.Create(t.Context(), ev); err != nil {
		t.Fatalf("creating event: %v", err)
	}
}

// widget creates a Widget guarded by lease, with token as its fencing-token
// annotation ("" for none).
func widget(t *testing.T, ns, name, lease, token string) {
	t.Helper()
	if err := k8s.Create(t.Context(), testenv.GuardedWidget(ns, name, lease, token, "test")); err != nil {
		t.Fatalf("creating widget %s: %v", name, err)
	}
}

// guardedConfigMap creates a ConfigMap guarded by lease, with token.
func guardedConfigMap(t *testing.T, ns, name, lease, token string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Namespace: ns, Name: name,
		Labels:      map[string]string{coordv1alpha1.GuardLeaseLabel: lease},
		Annotations: map[string]string{coordv1alpha1.FencingTokenAnnotation: token},
	}}
	if err := k8s.Create(t.Context(), cm); err != nil {
		t.Fatalf("creating configmap %s: %v", name, err)
	}
}

// getFixture is a lease held by a with c and b waiting (in that order, which
// is not alphabetical), three Events out of order, an Event about another
// lease, and guarded objects of two kinds.
func getFixture(t *testing.T) (string, *coordv1alpha1.FencedLease) {
	t.Helper()
	ns := newNamespace(t)
	l := heldLease(t, ns, "jobs", "a", "c", "b")
	// b's request is newer than the controller's last look: no since.
	l.Status.Waiting = l.Status.Waiting[:1]
	l.Status.PreviousHolder = &coordv1alpha1.PreviousHolder{HolderIdentity: "z", FencingToken: 5, EndTime: *at(-time.Minute), Reason: coordv1alpha1.EndReasonSuperseded}
	if err := k8s.Status().Update(t.Context(), l); err != nil {
		t.Fatal(err)
	}
	other := createLease(t, ns, "other", coordv1alpha1.FencedLeaseSpec{}, coordv1alpha1.FencedLeaseStatus{})

	leaseEvent(t, l, -time.Minute, "TakenOver", "granted to a with fencing token 7 (previous holder z, token 5)")
	leaseEvent(t, l, -3*time.Minute, "Granted", "granted to z with fencing token 5")
	leaseEvent(t, l, -90*time.Second, "Expired", "z stopped renewing; token 5 expired")
	leaseEvent(t, other, -2*time.Minute, "Granted", "granted to someone else")

	widget(t, ns, "w-current", "jobs", "7")
	widget(t, ns, "w-stale", "jobs", "5")
	widget(t, ns, "w-invalid", "jobs", "")
	widget(t, ns, "w-garbage", "jobs", "seven")
	widget(t, ns, "w-other", "other", "1")
	guardedConfigMap(t, ns, "settings", "jobs", "7")
	return ns, l
}

func TestDescribe(t *testing.T) {
	ns, _ := getFixture(t)
	out := mustFence(t, "describe", "jobs", "-n", ns)

	testenv.WantContains(t, "describe output", out,
		"Name:",
		"Holder:             a (user user-a)",
		"Fencing token:      7 (token base 0)",
		"Status:             Held=True Granted: set by the test",
		"Time left:          4.2s",
		"Transitions:        3",
		"Previous holder:    z (token 5) expired and was superseded by a at",
		"Renewed:",
		"(12.8s ago) (renew sequence 3)",
		"Expires:",
		"(in 4.2s)",
	)

	// The waiting queue, in grant order.
	_, waiting := table(t, block(t, out, "Waiting"))
	assertRow(t, waiting, "1", map[string]string{"HOLDER": "c", "USER": "user-c"})
	assertRow(t, waiting, "2", map[string]string{"HOLDER": "b", "SINCE": "not yet seen by the controller"})
	if !strings.Contains(waiting["1"]["SINCE"], "(30s ago)") {
		t.Errorf("c waits since %q, want 30s ago", waiting["1"]["SINCE"])
	}

	// History: this lease's Events only, oldest first.
	hist := strings.Split(block(t, out, "History"), "\n")
	if len(hist) != 4 {
		t.Fatalf("history has %d lines, want header and 3:\n%s", len(hist), strings.Join(hist, "\n"))
	}
	for i, reason := range []string{"Granted", "Expired", "TakenOver"} {
		if !strings.Contains(hist[i+1], reason) {
			t.Errorf("history line %d = %q, want %s", i+1, hist[i+1], reason)
		}
	}
	if !strings.Contains(hist[3], "granted to a with fencing token 7 (previous holder z, token 5)") {
		t.Errorf("history lacks the note: %q", hist[3])
	}

	// Guarded objects of both kinds, with their token's state.
	_, guarded := table(t, block(t, out, "Guarded objects"))
	if len(guarded) != 5 {
		t.Errorf("got %d guarded objects, want 5: %v", len(guarded), guarded)
	}
	assertRow(t, guarded, "settings", map[string]string{"KIND": "ConfigMap", "TOKEN": "7", "STATE": "current"})
	assertRow(t, guarded, "w-current", map[string]string{"KIND": "Widget.example.kubefence.io", "TOKEN": "7", "STATE": "current"})
	assertRow(t, guarded, "w-stale", map[string]string{"TOKEN": "5", "STATE": "STALE"})
	assertRow(t, guarded, "w-invalid", map[string]string{"TOKEN": "<none>", "STATE": "INVALID"})
	assertRow(t, guarded, "w-garbage", map[string]string{"TOKEN": "seven", "STATE": "INVALID"})
}

func TestDescribeStructured(t *testing.T) {
	ns, _ := getFixture(t)

	var v struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		ExpiresIn  string `json:"expiresIn"`
		Waiting    []waiter
		History    []historyEntry
		Guarded    []guardedObject
		Lease      coordv1alpha1.FencedLease
	}
	if err := json.Unmarshal([]byte(mustFence(t, "describe", "jobs", "-n", ns, "-o", "json")), &v); err != nil {
		t.Fatalf("-o json does not parse: %v", err)
	}
	if v.Lease.Name != "jobs" || v.Lease.Status.FencingToken != 7 || v.ExpiresIn != "4.2s" {
		t.Errorf("lease %s token %d expiresIn %q", v.Lease.Name, v.Lease.Status.FencingToken, v.ExpiresIn)
	}
	if len(v.Waiting) != 2 || v.Waiting[0].HolderIdentity != "c" || v.Waiting[1].HolderIdentity != "b" || v.Waiting[1].Since != nil {
		t.Errorf("waiting = %+v", v.Waiting)
	}
	if len(v.History) != 3 || v.History[0].Reason != "Granted" || v.History[2].Reason != "TakenOver" {
		t.Errorf("history = %+v", v.History)
	}
	states := map[string]string{}
	for _, g := range v.Guarded {
		states[g.Name] = g.State
	}
	want := map[string]string{"settings": "current", "w-current": "current", "w-stale": "STALE", "w-invalid": "INVALID", "w-garbage": "INVALID"}
	if fmt.Sprint(states) != fmt.Sprint(want) {
		t.Errorf("guarded states = %v, want %v", states, want)
	}

	if v.Lease.APIVersion != coordv1alpha1.GroupVersion.String() || v.Lease.Kind != "FencedLease" || v.Lease.ManagedFields != nil {
		t.Errorf("lease apiVersion %q kind %q managedFields %v", v.Lease.APIVersion, v.Lease.Kind, v.Lease.ManagedFields)
	}
	if v.APIVersion != viewAPIVersion || v.Kind != viewKind {
		t.Errorf("describe -o json is %s %s, want %s %s", v.APIVersion, v.Kind, viewAPIVersion, viewKind)
	}
	if _, _, err := fence(t, "describe", "jobs", "-n", ns, "-o", "wide"); err == nil || !strings.Contains(err.Error(), `unknown output format "wide": use one of json, yaml`) {
		t.Errorf("describe -o wide: %v, want an unknown output format error", err)
	}
}

func TestDescribeHistoryKeepsTheLatest(t *testing.T) {
	ns := newNamespace(t)
	l := heldLease(t, ns, "busy", "a")
	for i := range historyLimit + 3 {
		leaseEvent(t, l, time.Duration(i-100)*time.Second, "Granted", fmt.Sprintf("grant number %d", i))
	}
	out := mustFence(t, "describe", "busy", "-n", ns)
	lines := strings.Split(block(t, out, "History"), "\n")
	if len(lines) != historyLimit+1 {
		t.Fatalf("history has %d lines, want a header and %d", len(lines), historyLimit)
	}
	// The oldest three are dropped; the rest stay oldest first.
	if first, last := lines[1], lines[historyLimit]; !strings.HasSuffix(first, "grant number 3") || !strings.HasSuffix(last, "grant number 22") {
		t.Errorf("history runs from %q to %q, want grant number 3 to 22", first, last)
	}
}

func TestDescribeEmptySections(t *testing.T) {
	ns := newNamespace(t)
	createLease(t, ns, "fresh", coordv1alpha1.FencedLeaseSpec{LockDelaySeconds: 30}, coordv1alpha1.FencedLeaseStatus{})
	out := mustFence(t, "describe", "fresh", "-n", ns)
	testenv.WantContains(t, "describe output", out,
		"Holder:             <none>",
		"Status:             not yet reconciled by the controller",
		"Lock delay:         30s, not active",
		"Previous holder:    <none>",
		"Waiting: <none>",
		"History: <none>",
		"Guarded objects: <none>",
	)
}

func TestGetMissingLease(t *testing.T) {
	ns := newNamespace(t)
	for _, verb := range []string{"describe", "get"} {
		_, _, err := fence(t, verb, "nope", "-n", ns)
		if err == nil || err.Error() != fmt.Sprintf("fencedlease %q not found in namespace %q", "nope", ns) {
			t.Errorf("%s of a missing lease: %v", verb, err)
		}
	}
	// A missing NAME says how to find one.
	for _, args := range [][]string{
		{"describe"},
		{"release", "--holder", "a"},
		{"handover", "--to", "a"},
		{"raise-floor"},
	} {
		_, _, err := fence(t, append(args, "-n", ns)...)
		if err == nil || !strings.Contains(err.Error(), args[0]+" needs the NAME of a FencedLease") || !strings.Contains(err.Error(), "kubectl fence get") {
			t.Errorf("%s without a name: %v, want a hint to list the leases", args[0], err)
		}
	}
	if _, _, err := fence(t, "describe", "a", "b", "-n", ns); err == nil || !strings.Contains(err.Error(), "describe takes one FencedLease NAME, got 2") {
		t.Errorf("describe with two names: %v", err)
	}
}
