package fencedlease_test

import (
	"context"
	"strings"
	"testing"

	"github.com/kubefence/kubefence/test/inprocess"
	"github.com/kubefence/kubefence/test/ruletable"
)

// TestLeaseRuleTable runs the FencedLease rules' one table
// (test/ruletable.LeaseRows) against both back ends in process: the
// FencedLease validator (webhook mode) and the generated policy
// kubefence-fencedleases compiled and evaluated by the API server's own
// code (policy mode). A change to either back end that the other lacks
// fails here; test/enforcement replays the same rows on a real API server.
func TestLeaseRuleTable(t *testing.T) {
	admissions := map[string]*inprocess.Admission{}
	admission := func(t *testing.T, r ruletable.LeaseRow, m string) *inprocess.Admission {
		key := m + "/" + strings.Join(r.AdminGroups, ",")
		if a, ok := admissions[key]; ok {
			return a
		}
		a, err := inprocess.New("../../..", r.Operator(m))
		if err != nil {
			t.Fatal(err)
		}
		admissions[key] = a
		return a
	}
	for _, row := range ruletable.LeaseRows() {
		t.Run(row.Name, func(t *testing.T) {
			if row.ByCRD {
				t.Skip("the CRD's validation refuses it before admission: test/enforcement only")
			}
			req, err := row.Request()
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range []string{ruletable.Webhook, ruletable.Policy} {
				err := admission(t, row, m).Admit(context.Background(), row.World(), req)
				if p := row.Check(m, err); p != "" {
					t.Error(p)
				}
			}
		})
	}
}
