package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/test/testenv"
)

// listFixture creates three leases in a fresh namespace: one held with two
// waiters, one quarantined by lock-delay after an expiry, one never granted.
func listFixture(t *testing.T) string {
	t.Helper()
	ns := newNamespace(t)
	heldLease(t, ns, "alpha", "a", "b", "c")
	createLease(t, ns, "beta",
		coordv1alpha1.FencedLeaseSpec{LockDelaySeconds: 15, Requests: requests("d")},
		coordv1alpha1.FencedLeaseStatus{
			FencingToken: 4, LeaseTransitions: 1, LockDelayUntil: at(9800 * time.Millisecond),
			PreviousHolder: &coordv1alpha1.PreviousHolder{HolderIdentity: "x", FencingToken: 4, EndTime: *at(-5 * time.Second), Reason: coordv1alpha1.EndReasonExpired},
			Waiting:        []coordv1alpha1.WaitingRequest{{HolderIdentity: "d", Since: *at(-2 * time.Second)}},
			Conditions:     held(metav1.ConditionFalse, coordv1alpha1.ReasonLockDelay),
		})
	createLease(t, ns, "gamma", coordv1alpha1.FencedLeaseSpec{}, coordv1alpha1.FencedLeaseStatus{})
	return ns
}

func TestListTable(t *testing.T) {
	ns := listFixture(t)

	header, rows := table(t, mustFence(t, "get", "-n", ns))
	want := []string{"NAME", "HOLDER", "TOKEN", "EXPIRES-IN", "TRANSITIONS", "WAITING", "LOCK-DELAY", "STATUS"}
	if !slices.Equal(header, want) {
		t.Errorf("header = %v, want %v", header, want)
	}
	if len(rows) != 3 {
		t.Errorf("got %d rows, want 3: %v", len(rows), rows)
	}
	assertRow(t, rows, "alpha", map[string]string{
		"HOLDER": "a", "TOKEN": "7", "EXPIRES-IN": "4.2s", "TRANSITIONS": "3", "WAITING": "2", "LOCK-DELAY": "-", "STATUS": "Granted",
	})
	assertRow(t, rows, "beta", map[string]string{
		"HOLDER": "<none>", "TOKEN": "4", "EXPIRES-IN": "-", "WAITING": "1", "LOCK-DELAY": "15s (until +9.8s)", "STATUS": "LockDelay",
	})
	assertRow(t, rows, "gamma", map[string]string{
		"HOLDER": "<none>", "TOKEN": "-", "EXPIRES-IN": "-", "TRANSITIONS": "0", "WAITING": "0", "STATUS": "-",
	})

	// The aliases print the same.
	for _, alias := range []string{"list", "ls"} {
		if _, again := table(t, mustFence(t, alias, "-n", ns)); fmt.Sprint(again) != fmt.Sprint(rows) {
			t.Errorf("%s printed %v, want what get printed: %v", alias, again, rows)
		}
	}

	// -o wide adds the waiters' names and the previous holder.
	header, rows = table(t, mustFence(t, "get", "-n", ns, "-o", "wide"))
	if !slices.Contains(header, "WAITERS") || !slices.Contains(header, "PREVIOUS") {
		t.Errorf("wide header = %v, want WAITERS and PREVIOUS", header)
	}
	assertRow(t, rows, "alpha", map[string]string{"WAITERS": "b,c", "PREVIOUS": "<none>"})
	assertRow(t, rows, "beta", map[string]string{"WAITERS": "d", "PREVIOUS": "x/4:Expired"})
}

func TestListExpired(t *testing.T) {
	ns := newNamespace(t)
	l := heldLease(t, ns, "late", "a")
	l.Status.ExpireTime = at(-time.Second)
	if err := k8s.Status().Update(t.Context(), l); err != nil {
		t.Fatal(err)
	}
	_, rows := table(t, mustFence(t, "get", "-n", ns))
	assertRow(t, rows, "late", map[string]string{"HOLDER": "a", "EXPIRES-IN": "expired"})
}

func TestListAllNamespaces(t *testing.T) {
	ns1 := newNamespace(t)
	ns2 := newNamespace(t)
	heldLease(t, ns1, "one", "a")
	createLease(t, ns2, "two", coordv1alpha1.FencedLeaseSpec{}, coordv1alpha1.FencedLeaseStatus{})

	header, rows := table(t, mustFence(t, "get", "-A"))
	if header[0] != "NAMESPACE" || header[1] != "NAME" {
		t.Errorf("header = %v, want NAMESPACE, NAME first", header)
	}
	assertRow(t, rows, "one", map[string]string{"NAMESPACE": ns1, "HOLDER": "a", "TOKEN": "7"})
	assertRow(t, rows, "two", map[string]string{"NAMESPACE": ns2, "HOLDER": "<none>"})

	// Without -A only the namespace's own leases.
	_, rows = table(t, mustFence(t, "get", "-n", ns1))
	if _, ok := rows["two"]; ok {
		t.Errorf("lease of %s listed in %s", ns2, ns1)
	}
}

func TestListStructured(t *testing.T) {
	ns := listFixture(t)

	var list coordv1alpha1.FencedLeaseList
	if err := json.Unmarshal([]byte(mustFence(t, "get", "-n", ns, "-o", "json")), &list); err != nil {
		t.Fatalf("-o json does not parse as a FencedLeaseList: %v", err)
	}
	if list.Kind != "FencedLeaseList" || list.APIVersion != coordv1alpha1.GroupVersion.String() {
		t.Errorf("list kind = %s %s", list.APIVersion, list.Kind)
	}
	if len(list.Items) != 3 {
		t.Fatalf("got %d items, want 3", len(list.Items))
	}
	alpha := list.Items[0]
	if alpha.Name != "alpha" || alpha.Kind != "FencedLease" || alpha.Status.HolderIdentity != "a" || alpha.Status.FencingToken != 7 || len(alpha.Spec.Requests) != 3 {
		t.Errorf("first item = %+v", alpha)
	}

	var fromYAML coordv1alpha1.FencedLeaseList
	if err := yaml.UnmarshalStrict([]byte(mustFence(t, "get", "-n", ns, "-o", "yaml")), &fromYAML); err != nil {
		t.Fatalf("-o yaml does not parse as a FencedLeaseList: %v", err)
	}
	if len(fromYAML.Items) != 3 || fromYAML.Items[1].Status.LockDelayUntil == nil {
		t.Errorf("yaml items = %+v", fromYAML.Items)
	}
}

func TestListEmptyAndErrors(t *testing.T) {
	ns := newNamespace(t)
	out, errOut, err := fence(t, "get", "-n", ns)
	if err != nil || out != "" || !strings.Contains(errOut, "No fencedleases found in "+ns+" namespace.") {
		t.Errorf("empty namespace: out %q, err %q, %v", out, errOut, err)
	}
	if _, _, err := fence(t, "get", "-n", ns, "-o", "xml"); err == nil || !strings.Contains(err.Error(), `unknown output format "xml": use one of wide, json, yaml`) {
		t.Errorf("-o xml: %v, want the list of formats", err)
	}
	if _, _, err := fence(t, "get", "x", "-A"); err == nil || !strings.Contains(err.Error(), "cannot be retrieved by name across all namespaces") {
		t.Errorf("get NAME -A: %v", err)
	}
	if _, _, err := fence(t, "get", "-n", ns, "-l", "a=(b"); err == nil || !strings.Contains(err.Error(), "parsing selector") {
		t.Errorf("bad selector: %v", err)
	}
}

func TestRootPrintsHelp(t *testing.T) {
	out := mustFence(t)
	testenv.WantContains(t, "help", out, "kubectl fence [command]", "get", "describe", "release", "handover", "raise-floor", "check", "version")
}
