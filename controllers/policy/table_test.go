package policy

import (
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// The entry names a holder only while the holder's request carries the
// tenure: the table then says the tenure ended as soon as the lease does,
// before the controller writes the end to status (Sync runs at the top of
// every reconcile). alice was granted token 42 with a fresh request and
// renewed with stamps (status still says renewSequence 0): a request of
// her identity made again by mallory also starts at 0, and only its user
// tells it from hers (status.holderUser).
func TestEntryForNamesTheHolderOnlyWhileItsRequestCarriesTheTenure(t *testing.T) {
	bob := coordv1alpha1.LeaseRequest{HolderIdentity: "bob", User: "bob"}
	for _, c := range []struct {
		name       string
		requests   []coordv1alpha1.LeaseRequest
		holderUser string
		want       Entry
	}{
		{"the holder's request", []coordv1alpha1.LeaseRequest{{HolderIdentity: "alice", User: "alice", RenewSequence: 3}, bob}, "alice",
			Entry{Token: 42, Held: true, User: "alice"}},
		{"made again by another user than status.holderUser", []coordv1alpha1.LeaseRequest{bob, {HolderIdentity: "alice", User: "mallory"}}, "alice",
			Entry{Token: 42}},
		{"the holder's request is gone (released)", []coordv1alpha1.LeaseRequest{bob}, "alice",
			Entry{Token: 42}},
		// docs/versioning.md: an earlier controller's status names no user,
		// and the request of the holder's identity counts, whoever made it.
		{"a status without holderUser (an earlier controller's)", []coordv1alpha1.LeaseRequest{bob, {HolderIdentity: "alice", User: "mallory"}}, "",
			Entry{Token: 42, Held: true, User: "mallory"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			lease := &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "job"},
				Spec: coordv1alpha1.FencedLeaseSpec{Requests: c.requests}}
			st := &coordv1alpha1.FencedLeaseStatus{HolderIdentity: "alice", HolderUser: c.holderUser, FencingToken: 42}
			if got := EntryFor(lease, st); got != c.want {
				t.Errorf("EntryFor = %+v, want %+v", got, c.want)
			}
		})
	}
}

// tableClient is a fake client holding the fencing policy of incarnation
// "one" and objs (narrow unit tests of Table's encoding; what the API
// server makes of a table is test/inprocess's and test/enforcement's).
func tableClient(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	installed := Settings{ControllerUsers: []string{"kubefence"}, Incarnation: "one"}.FencingPolicy()
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(append(objs, installed)...).Build()
}

// The entries are lines of one string: a user (or pod) with a line break
// would write a line of its own, for any lease it names, so such an entry
// is refused and the table left as it was.
func TestTableRefusesALineBreakInTheHolder(t *testing.T) {
	c := tableClient(t)
	table := &Table{Reader: c, Writer: c}
	if _, _, err := table.Update(t.Context(), "ns", "job", func(Entry, bool) (Entry, bool) {
		return Entry{Token: 5, Held: true, User: "alice", Attempt: "1"}, true
	}); err != nil {
		t.Fatal(err)
	}
	forged := "mallory\nvictim 99 1 - mallory"
	_, _, err := table.Update(t.Context(), "ns", "other", func(Entry, bool) (Entry, bool) {
		return Entry{Token: 1, Held: true, User: forged, Attempt: "1"}, true
	})
	if err == nil || !strings.Contains(err.Error(), "line break") {
		t.Errorf("an entry whose user has a line break: %v, want refused", err)
	}
	if e, found, _ := table.Get(t.Context(), "ns", "victim"); found {
		t.Errorf("the table names lease victim: %+v", e)
	}
	if e, _, _ := table.Get(t.Context(), "ns", "job"); e.Token != 5 || e.User != "alice" {
		t.Errorf("job's entry is %+v, want alice's with token 5", e)
	}
}

// A table of the earlier format (one data key per lease), even marked
// for the installed incarnation, is emptied at the next write and written
// in the format the policy reads: its entries are written anew from the
// leases (Sync), as after a switch of modes.
func TestTableRewritesATableOfTheEarlierFormat(t *testing.T) {
	c := tableClient(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: coordv1alpha1.TenureTableName},
		Data: map[string]string{IncarnationKey: "one", "job": "5 1 - alice"}})
	table := &Table{Reader: c, Writer: c}
	if _, _, err := table.Update(t.Context(), "ns", "other", func(Entry, bool) (Entry, bool) { return Entry{Token: 3}, true }); err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: coordv1alpha1.TenureTableName}, &cm); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{IncarnationKey: "one", coordv1alpha1.TenureTableKey: "\nother 3"}
	if !maps.Equal(cm.Data, want) || table.Resets() != 1 {
		t.Errorf("table data %q (resets %d), want %q (1 reset)", cm.Data, table.Resets(), want)
	}
}

// The lines stay sorted by lease name, one per lease, whatever the order
// of the writes; a lease name that is a prefix of another finds its own.
func TestTableLines(t *testing.T) {
	var cm corev1.ConfigMap
	for _, w := range [][2]string{{"job-2", "4"}, {"job", "7 1 - alice"}, {"job-2", "5 2 - bob"}, {"a", "1"}} {
		SetEntryOf(&cm, w[0], w[1])
	}
	if got, want := cm.Data[coordv1alpha1.TenureTableKey], "\na 1\njob 7 1 - alice\njob-2 5 2 - bob"; got != want {
		t.Errorf("lines %q, want %q", got, want)
	}
	for lease, want := range map[string]string{"job": "7 1 - alice", "job-2": "5 2 - bob", "a": "1", "jo": "", "ob": ""} {
		if got := EntryOf(&cm, lease); got != want {
			t.Errorf("EntryOf(%q) = %q, want %q", lease, got, want)
		}
	}
}
