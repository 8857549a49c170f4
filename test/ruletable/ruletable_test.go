package ruletable

import (
	"testing"
)

// The tables say what they mean: names are unique, a row that claims the
// back ends differ says why and differs, and a custom resource's /status
// write changes no metadata (the API server drops it before admission).
func TestTablesAreWellFormed(t *testing.T) {
	names := map[string]bool{}
	for _, r := range FencingRows() {
		if names[r.Name] {
			t.Errorf("two fencing rows are called %q", r.Name)
		}
		names[r.Name] = true
		modesWellFormed(t, r.Name, r.Want, r.Webhook, r.Policy, r.Why)
		w := r.Write
		// The API server's status strategies: a custom resource's drops
		// metadata changes, deployments/status keeps annotations only,
		// pods/status keeps labels and annotations.
		if w.Kind == Widget && w.Sub == "status" && (w.Old.Lease != w.New.Lease || w.Old.Token != w.New.Token) {
			t.Errorf("%s: a Widget's /status write cannot change its metadata", r.Name)
		}
		if w.Kind == Deployment && w.Sub == "status" && w.Old.Lease != w.New.Lease {
			t.Errorf("%s: a Deployment's /status write cannot change its labels", r.Name)
		}
		if eviction := w.Sub == "eviction"; (w.Op == "CREATE" && !eviction) != (w.Old == nil) || (w.Op == "DELETE" || eviction) != (w.New == nil) {
			t.Errorf("%s: %s with old %v and new %v", r.Name, w.Op, w.Old, w.New)
		}
	}
}

func TestLeaseTableIsWellFormed(t *testing.T) {
	names := map[string]bool{}
	for _, r := range LeaseRows() {
		if names[r.Name] {
			t.Errorf("two lease rows are called %q", r.Name)
		}
		names[r.Name] = true
		modesWellFormed(t, r.Name, r.Want, r.Webhook, r.Policy, r.Why)
		if (r.Op == "CREATE") != (r.Base == "") || (r.Op == "CREATE") != (r.Lease != "") || (r.Op == "DELETE") != (r.Change == nil) {
			t.Errorf("%s: a CREATE names a lease and no base, an UPDATE a base and a change, a DELETE a base only", r.Name)
		}
		if r.Stored != nil && r.Base != Free {
			t.Errorf("%s: only a Free base is stored anew for a row", r.Name)
		}
	}
}

// modesWellFormed checks a row's verdicts per mode: a mode's own verdict
// (webhook, policy) differs from the one both modes give (want), and the row
// says why (why) exactly when a mode has its own.
func modesWellFormed[W comparable](t *testing.T, name string, want W, webhook, policy *W, why string) {
	t.Helper()
	for m, w := range map[string]*W{Webhook: webhook, Policy: policy} {
		if w != nil && *w == want {
			t.Errorf("%s: the %s mode's verdict is the same as both modes'", name, m)
		}
	}
	if (webhook != nil || policy != nil) != (why != "") {
		t.Errorf("%s: a row whose modes differ says why, and only such a row", name)
	}
}
