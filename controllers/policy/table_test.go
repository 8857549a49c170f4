package policy

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
