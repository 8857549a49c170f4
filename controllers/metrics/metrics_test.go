package metrics

import (
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kubefence/kubefence/pkg/version"
)

// TestRegisterServesEveryDocumentedName records one event of each kind and
// checks that a registry Register filled serves exactly the names
// docs/metrics.md documents, and that registering again is harmless.
func TestRegisterServesEveryDocumentedName(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	if err := Register(reg); err != nil {
		t.Fatal(err)
	}
	if err := Register(reg); err != nil {
		t.Fatalf("registering twice: %v", err)
	}
	Renewed("ns", "l")
	LeaseState("ns", "l", 7, time.Second)
	Granted("ns", "l", "TakenOver")
	Expired("ns", "l", time.Minute)
	Released("ns", "l", time.Minute)
	FencingChecked(true, time.Millisecond)
	GuardedWriteRefused("stale", true, "ns", "l", "UPDATE")
	ClockOffset(time.Millisecond)
	LeaseWriteRefused("status")
	WebhookCertificateExpiry(time.Unix(1e9, 0))
	PolicyChecked("ValidatingAdmissionPolicyBinding/kubefence-fencing-guarded", false, true)

	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range fams {
		got = append(got, strings.TrimPrefix(f.GetName(), "kubefence_"))
	}
	sort.Strings(got)
	want := []string{"build_info", "fencing_check_seconds", "guarded_writes_refused_total", "lease_acquisitions_total",
		"lease_expiries_total", "lease_fencing_token", "lease_holder_age_seconds", "lease_releases_total",
		"lease_renewals_total", "lease_takeovers_total", "lease_tenure_seconds", "lease_writes_refused_total",
		"policy_not_as_generated", "policy_restored_total", "renewals_missed_total", "stale_writes_rejected_total", "tokens_issued_total",
		"webhook_certificate_expiry_timestamp_seconds", "webhook_clock_offset_seconds"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("served names\n got %v\nwant %v", got, want)
	}
	if v := testutil.ToFloat64(takeovers.WithLabelValues("ns", "l")); v != 1 {
		t.Errorf("a TakenOver grant counted %v takeovers, want 1", v)
	}
	if v := testutil.ToFloat64(staleWritesRejected.WithLabelValues("ns", "l", "UPDATE")); v != 1 {
		t.Errorf("a stale refusal counted %v stale writes, want 1", v)
	}

	b := version.Get()
	if v := testutil.ToFloat64(buildInfo.WithLabelValues(b.Version, b.Commit, b.Date, b.GoVersion)); v != 1 {
		t.Errorf("kubefence_build_info for this build = %v, want 1", v)
	}
	if n := testutil.CollectAndCount(buildInfo); n != 1 {
		t.Errorf("kubefence_build_info has %d series, want 1", n)
	}

	Forget("ns", "l")
	if n := testutil.CollectAndCount(renewals); n != 0 {
		t.Errorf("after Forget, %d renewal series remain, want 0", n)
	}
}

// TestRegisterRefusesAForeignCollectorOfTheSameName: a name taken by another
// collector is an error, not silently shared.
func TestRegisterRefusesAForeignCollectorOfTheSameName(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "kubefence_webhook_clock_offset_seconds",
		Help: "Lower bound over the last minute of how far the controller's clock is ahead of this fencing webhook replica's (renewTime minus the replica's clock when a live read returned it)."}))
	if err := Register(reg); err == nil {
		t.Fatal("Register accepted a registry whose kubefence_webhook_clock_offset_seconds is another collector")
	}
}

// TestSetPerLeaseFalseAggregates: with SetPerLease(false) the per-lease
// counters are one series each with empty lease labels (however many leases
// there are), the per-lease gauges are not recorded, and the per-reason
// series stay.
func TestSetPerLeaseFalseAggregates(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	if err := Register(reg); err != nil {
		t.Fatal(err)
	}
	for _, v := range []interface{ Reset() }{renewals, currentToken, holderAge, acquisitions, staleWritesRejected, guardedWritesRefused} {
		v.Reset()
	}
	SetPerLease(false)
	t.Cleanup(func() { SetPerLease(true) })
	for _, l := range []string{"a", "b", "c"} {
		Renewed("ns", l)
		LeaseState("ns", l, 3, time.Second)
		Granted("ns", l, "Granted")
		GuardedWriteRefused("stale", true, "ns", l, "UPDATE")
	}
	if n := testutil.CollectAndCount(renewals); n != 1 {
		t.Errorf("%d renewal series for 3 leases, want 1", n)
	}
	if v := testutil.ToFloat64(renewals.WithLabelValues("", "")); v != 3 {
		t.Errorf("the aggregated renewal series counts %v, want 3", v)
	}
	if v := testutil.ToFloat64(staleWritesRejected.WithLabelValues("", "", "UPDATE")); v != 3 {
		t.Errorf("the aggregated stale-write series counts %v, want 3", v)
	}
	if n := testutil.CollectAndCount(currentToken) + testutil.CollectAndCount(holderAge); n != 0 {
		t.Errorf("%d per-lease gauge series recorded, want none", n)
	}
	if v := testutil.ToFloat64(guardedWritesRefused.WithLabelValues("stale")); v != 3 {
		t.Errorf("refusals by reason %v, want 3", v)
	}
}
