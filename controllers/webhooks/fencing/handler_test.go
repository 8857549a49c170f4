package fencing

import (
	"testing"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// A stale refusal carries the lease and both tokens as typed causes; other
// refusals carry none.
func TestStaleDetails(t *testing.T) {
	for _, tc := range []struct {
		reason Reason
		want   bool
	}{
		{coordv1alpha1.RefusalStale, true}, {coordv1alpha1.RefusalExpired, true}, {coordv1alpha1.RefusalNoHolder, true}, {coordv1alpha1.RefusalNotHolder, true},
		{coordv1alpha1.RefusalNotIssued, false}, {coordv1alpha1.RefusalMalformed, false}, {coordv1alpha1.RefusalNoLease, false}, {coordv1alpha1.RefusalUnguarded, false}, {coordv1alpha1.RefusalUncheckable, false}, {coordv1alpha1.RefusalLeaseError, false},
	} {
		t.Run(string(tc.reason), func(t *testing.T) {
			d := staleDetails(Verdict{Reason: tc.reason, Lease: "jobs/job", Presented: 41, Current: 42})
			if !tc.want {
				if d != nil {
					t.Fatalf("details %+v, want none", d)
				}
				return
			}
			if d == nil {
				t.Fatal("no details")
			}
			got := map[string]string{}
			for _, c := range d.Causes {
				if c.Type != coordv1alpha1.CauseTypeStaleFencingToken {
					t.Fatalf("cause type %q", c.Type)
				}
				got[c.Field] = c.Message
			}
			want := map[string]string{"lease": "jobs/job", "presentedToken": "41", "currentToken": "42", "reason": string(tc.reason)}
			if len(got) != len(want) {
				t.Fatalf("causes %v, want %v", got, want)
			}
			for k, v := range want {
				if got[k] != v {
					t.Fatalf("cause %s = %q, want %q (all: %v)", k, got[k], v, got)
				}
			}
		})
	}
}
