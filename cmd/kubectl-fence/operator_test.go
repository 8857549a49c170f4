package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence/protocol"
	"github.com/kubefence/kubefence/test/testenv"
)

// queue reads a lease's spec.requests identities.
func queue(t *testing.T, ns, name string) []string {
	t.Helper()
	var l coordv1alpha1.FencedLease
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &l); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range l.Spec.Requests {
		ids = append(ids, r.HolderIdentity)
	}
	return ids
}

// wantQueue checks a lease's spec.requests identities, in order; when says
// after what.
func wantQueue(t *testing.T, ns, name, when string, want ...string) {
	t.Helper()
	if got := queue(t, ns, name); !slices.Equal(got, want) {
		t.Errorf("requests %s = %v, want %v", when, got, want)
	}
}

// operatorEvents lists the Events the plugin recorded in ns.
func operatorEvents(t *testing.T, ns string) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	if err := k8s.List(t.Context(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.ReportingController == reportingController {
			out = append(out, e)
		}
	}
	return out
}

func TestReleaseHolder(t *testing.T) {
	ns := newNamespace(t)
	l := heldLease(t, ns, "jobs", "a", "b")

	out := mustFence(t, "release", "jobs", "--holder", "a", "-n", ns)
	if want := "fencedlease " + ns + "/jobs: released holder a (token 7); b is next\n"; out != want {
		t.Errorf("output = %q, want %q", out, want)
	}
	wantQueue(t, ns, "jobs", "after release", "b")

	evs := operatorEvents(t, ns)
	if len(evs) != 1 {
		t.Fatalf("got %d operator events, want 1", len(evs))
	}
	e := evs[0]
	if e.Reason != EventOperatorRelease || e.Action != "Release" || e.Type != corev1.EventTypeNormal ||
		e.Regarding.Kind != "FencedLease" || e.Regarding.Name != "jobs" || e.Regarding.UID != l.UID || e.ReportingInstance == "" {
		t.Errorf("event = %+v", e)
	}
	if want := "operator admin released holder a (token 7); b is next"; e.Note != want {
		t.Errorf("note = %q, want %q", e.Note, want)
	}

	// The Event shows in the lease's history.
	if out := mustFence(t, "describe", "jobs", "-n", ns); !strings.Contains(out, "OperatorRelease") {
		t.Error("get does not show the OperatorRelease event")
	}
}

func TestReleaseWaiter(t *testing.T) {
	ns := newNamespace(t)
	heldLease(t, ns, "jobs", "a", "b", "c")
	out := mustFence(t, "release", "jobs", "--holder", "b", "-n", ns)
	if !strings.Contains(out, "withdrew the waiting request of b") {
		t.Errorf("output = %q", out)
	}
	wantQueue(t, ns, "jobs", "after release", "a", "c")
	if evs := operatorEvents(t, ns); len(evs) != 1 || evs[0].Note != "operator admin withdrew the waiting request of b" {
		t.Errorf("events = %+v", evs)
	}
}

func TestReleaseErrors(t *testing.T) {
	ns := newNamespace(t)
	heldLease(t, ns, "jobs", "a", "b")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"release", "jobs", "--holder", "zz"}, `"zz" has no request on fencedlease ` + ns + `/jobs (requests: [a, b])`},
		{[]string{"release", "nope", "--holder", "a"}, `fencedlease "nope" not found in namespace "` + ns + `"`},
		{[]string{"release", "jobs"}, `required flag(s) "holder" not set`},
		{[]string{"handover", "jobs", "--to", "a"}, `"a" already holds fencedlease`},
		{[]string{"handover", "jobs", "--to", "zz"}, `"zz" is not waiting for fencedlease`},
		{[]string{"handover", "nope", "--to", "b"}, `fencedlease "nope" not found in namespace "` + ns + `"`},
	} {
		_, _, err := fence(t, append(tc.args, "-n", ns)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
	wantQueue(t, ns, "jobs", "after a refused action", "a", "b")
	if evs := operatorEvents(t, ns); len(evs) != 0 {
		t.Errorf("a refused action recorded events: %+v", evs)
	}

	// Released but not yet processed by the controller.
	free := heldLease(t, ns, "pending", "a")
	free.Spec.Requests = nil
	if err := k8s.Update(t.Context(), free); err != nil {
		t.Fatal(err)
	}
	if _, _, err := fence(t, "release", "pending", "--holder", "a", "-n", ns); err == nil || !strings.Contains(err.Error(), "release is pending") {
		t.Errorf("release of a pending release: %v", err)
	}
	createLease(t, ns, "idle", coordv1alpha1.FencedLeaseSpec{Requests: requests("b")}, coordv1alpha1.FencedLeaseStatus{})
	if _, _, err := fence(t, "handover", "idle", "--to", "b", "-n", ns); err == nil || !strings.Contains(err.Error(), "has no holder to hand over from") {
		t.Errorf("handover without a holder: %v", err)
	}
}

func TestHandover(t *testing.T) {
	ns := newNamespace(t)
	heldLease(t, ns, "jobs", "a", "b", "c", "d")

	out := mustFence(t, "handover", "jobs", "--to", "c", "-n", ns)
	if want := "fencedlease " + ns + "/jobs: released holder a (token 7); c is next\n"; out != want {
		t.Errorf("output = %q, want %q", out, want)
	}
	wantQueue(t, ns, "jobs", "after handover", "c", "b", "d")
	evs := operatorEvents(t, ns)
	if len(evs) != 1 || evs[0].Reason != EventOperatorHandover || evs[0].Action != "Handover" ||
		evs[0].Note != "operator admin handed the lease over from a (token 7) to c" {
		t.Errorf("events = %+v", evs)
	}
}

// TestRefusalIsExplained stands in for the FencedLease webhook with a
// ValidatingAdmissionPolicy that refuses every update in one namespace, as
// the webhook refuses a user it does not trust as the controller.
func TestRefusalIsExplained(t *testing.T) {
	ns := newNamespace(t)
	const msg = "only the requester can withdraw or release it"
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "refuse-" + ns},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
						Rule: admissionregistrationv1.Rule{
							APIGroups: []string{coordv1alpha1.GroupVersion.Group}, APIVersions: []string{"*"}, Resources: []string{"fencedleases"},
						},
					},
				}},
			},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "false", Message: msg, Reason: ptr.To(metav1.StatusReasonForbidden),
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "refuse-" + ns},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
			},
		},
	}
	for _, o := range []client.Object{policy, binding} {
		if err := k8s.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(t.Context(), o) })
	}
	l := heldLease(t, ns, "jobs", "a", "b")

	// The policy takes effect once the API server has loaded it: probe with a
	// dry-run update.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := k8s.Update(t.Context(), l.DeepCopy(), client.DryRunAll)
		if apierrors.IsForbidden(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the policy never refused an update: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	_, _, err := fence(t, "release", "jobs", "--holder", "a", "-n", ns)
	if err == nil {
		t.Fatal("release was not refused")
	}
	t.Logf("refusal:\n%v", err)
	testenv.WantContains(t, "refusal", err.Error(),
		"releasing a from fencedlease "+ns+"/jobs was refused",
		msg,
		"--lease-admin-group",
		"add admin to one of them",
	)
	if _, _, err := fence(t, "handover", "jobs", "--to", "b", "-n", ns); err == nil || !strings.Contains(err.Error(), msg) {
		t.Errorf("handover: %v", err)
	}
	// A server-side dry run is judged by admission too; a client one is not.
	if _, _, err := fence(t, "release", "jobs", "--holder", "a", "-n", ns, "--dry-run=server"); err == nil || !strings.Contains(err.Error(), msg) {
		t.Errorf("release --dry-run=server: %v, want the admission refusal", err)
	}
	if out := mustFence(t, "handover", "jobs", "--to", "b", "-n", ns, "--dry-run=client"); !strings.HasSuffix(out, "b is next (dry run)\n") {
		t.Errorf("handover --dry-run=client printed %q", out)
	}
	wantQueue(t, ns, "jobs", "after a refused action", "a", "b")
	if evs := operatorEvents(t, ns); len(evs) != 0 {
		t.Errorf("a refused action recorded events: %+v", evs)
	}
}

// TestPatchIsGuarded applies a patch built from a lease that has changed since
// it was read: the test operations make the API server refuse it, for the
// holder (in status) as for the queue (in spec).
func TestPatchIsGuarded(t *testing.T) {
	ns := newNamespace(t)
	l := heldLease(t, ns, "jobs", "a", "b", "c")
	stale := l.DeepCopy()
	apply := func(ops protocol.Patch) error {
		data, err := json.Marshal(ops)
		if err != nil {
			t.Fatal(err)
		}
		return k8s.Patch(t.Context(), l.DeepCopy(), client.RawPatch(types.JSONPatchType, data))
	}

	// The holder changed: a expired and b was granted.
	l.Status.HolderIdentity = "b"
	if err := k8s.Status().Update(t.Context(), l); err != nil {
		t.Fatal(err)
	}
	ops, err := protocol.ReleasePatch(stale, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := apply(ops); !apierrors.IsInvalid(err) {
		t.Errorf("release of a former holder: %v, want Invalid", err)
	}

	// The queue changed: b withdrew and came back behind c.
	l.Spec.Requests = requests("a", "c", "b")
	if err := k8s.Update(t.Context(), l); err != nil {
		t.Fatal(err)
	}
	ops, err = protocol.ReleasePatch(stale, "b")
	if err != nil {
		t.Fatal(err)
	}
	if err := apply(ops); !apierrors.IsInvalid(err) {
		t.Errorf("release of a moved request: %v, want Invalid", err)
	}
	wantQueue(t, ns, "jobs", "after a refused patch", "a", "c", "b")

	// The command itself reads again and acts on the current state.
	mustFence(t, "release", "jobs", "--holder", "b", "-n", ns)
	wantQueue(t, ns, "jobs", "after release", "a", "c")
}
