// Package metrics is every Prometheus metric the kubefence operator serves, in
// one place, for the reconciler (controllers/fencedlease), both webhooks
// (controllers/webhooks/...), policy mode's installer (controllers/policy,
// through its Installer.OnCheck, which controllers/operator sets) and the
// certificate rotator (pkg/certrotation, through its Options.OnServing,
// which cmd/main.go sets). docs/metrics.md documents each name; the alerts
// and dashboard in config/prometheus and test/observability depend on them.
//
// Nothing is registered on import: Register adds the collectors to a registry
// (controllers/operator.Setup registers them on controller-runtime's
// metrics.Registry, which the manager serves). Callers record events through
// the functions below, one call per event, never through the vectors. Labels
// are bounded: lease namespace and name, and fixed reason strings; never
// object names, UIDs or holder identities.
//
// It imports only prometheus, the API (api/v1alpha1, for the reason names)
// and pkg/version (a leaf, for kubefence_build_info); it must not import any
// other kubefence package.
package metrics

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/version"
)

const namespace = "kubefence"

// perLease labels a per-lease series.
var perLease = []string{"lease_namespace", "lease"}

// aggregateLeases, once SetPerLease(false) set it, records the per-lease
// counters with empty lease labels and skips the per-lease gauges.
var aggregateLeases atomic.Bool

// SetPerLease chooses whether the series labelled lease_namespace and lease
// name their lease (true, the default) or not (false, --metrics-per-lease=false):
// then each such counter is one series whose lease labels are empty (the
// cluster's total; the alerts' sums by lease still work), the gauges
// lease_fencing_token and lease_holder_age_seconds are not recorded, and a
// server with 10,000 leases serves a few dozen kubefence series instead of
// about 110,000. Call it before the first event.
func SetPerLease(on bool) {
	aggregateLeases.Store(!on)
}

// leaseLabels are the lease labels of a per-lease series: the lease's, or
// empty ones when the series are aggregated (SetPerLease).
func leaseLabels(leaseNamespace, lease string) (string, string) {
	if aggregateLeases.Load() {
		return "", ""
	}
	return leaseNamespace, lease
}

// Each metric: its name (after kubefence_), its help and its labels
// (docs/metrics.md documents them).
var (
	// The reconciler's.
	acquisitions   = counter("lease_acquisitions_total", "Grants of a lease to a holder, by kind (Granted, HandedOver, TakenOver).", "lease_namespace", "lease", "kind")
	renewals       = counter("lease_renewals_total", "Renewals observed by the controller.", perLease...)
	renewalsMissed = counter("renewals_missed_total", "Holders that did not renew within the lease duration (each leads to an expiry).", perLease...)
	expiries       = counter("lease_expiries_total", "Tenures ended by the controller because the holder stopped renewing.", perLease...)
	releases       = counter("lease_releases_total", "Tenures ended by the holder releasing the lease.", perLease...)
	takeovers      = counter("lease_takeovers_total", "Grants to a new holder after the previous one expired.", perLease...)
	tokensIssued   = counter("tokens_issued_total", "Fencing tokens issued.", perLease...)
	currentToken   = gauge("lease_fencing_token", "Current (or last) fencing token of the lease.", perLease...)
	holderAge      = gauge("lease_holder_age_seconds", "Age of the active tenure, 0 when nobody holds the lease.", perLease...)
	tenureSeconds  = histogram("lease_tenure_seconds", "Length of tenures that ended, by end reason.", prometheus.ExponentialBuckets(1, 4, 10), "reason")
	expiryLateness = histogram("expiry_lateness_seconds", "How long after a tenure's expiry (on the controller's clock) the controller decided it: its timer, work queue and workers, not the API write that follows.", prometheus.ExponentialBuckets(0.001, 4, 9))

	// The fencing webhook's.
	staleWritesRejected  = counter("stale_writes_rejected_total", "Writes to guarded objects refused because their fencing token was stale.", "lease_namespace", "lease", "operation")
	guardedWritesRefused = counter("guarded_writes_refused_total", "Writes to guarded objects refused by the fencing webhook, by reason.", "reason")
	fencingChecks        = histogram("fencing_check_seconds", "Time the fencing webhook spent deciding a write, by whether it read the lease from the API server.", prometheus.ExponentialBuckets(0.00005, 2, 14), "lease_read")
	clockOffset          = singleGauge("webhook_clock_offset_seconds", "Lower bound over the last minute of how far the controller's clock is ahead of this fencing webhook replica's (spec.renewTime of the operator's leader-election Lease minus the replica's clock when its watch delivered the renewal).")

	// The FencedLease webhook's.
	leaseWritesRefused = counter("lease_writes_refused_total", "Writes to FencedLease objects refused by the admission webhook, by reason.", "reason")

	// Policy mode's installer's (controllers/policy, Installer.OnCheck).
	policyNotAsGenerated = gauge("policy_not_as_generated", "1 while a policy-mode ValidatingAdmissionPolicy or binding was last found deleted or not as the operator generates it and could not be written again; 0 when it is as generated.", "object")
	policyRestored       = counter("policy_restored_total", "Policy-mode ValidatingAdmissionPolicies and bindings found deleted or edited and written again as generated.", "object")

	// The build's (pkg/version), set by Register.
	buildInfo = gauge("build_info", "Always 1; the labels name the manager's build: version, commit, date (the commit's) and the Go version.", "version", "commit", "date", "go_version")

	// The certificate rotator's.
	webhookCertificateExpiry = singleGauge("webhook_certificate_expiry_timestamp_seconds", "Expiry (notAfter, Unix seconds) of the webhook serving certificate issued by the self-signed rotator; 0 when the certificate is provided.")
)

// counter, gauge, histogram and singleGauge build a metric named
// kubefence_<name>.

func counter(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
}

func gauge(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help}, labels)
}

func histogram(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: name, Help: help, Buckets: buckets}, labels)
}

func singleGauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help})
}

// collectors is every metric of the package, in the order Register adds them.
var collectors = []prometheus.Collector{
	acquisitions, renewals, renewalsMissed, expiries, releases, takeovers, tokensIssued,
	currentToken, holderAge, tenureSeconds, expiryLateness, staleWritesRejected, leaseWritesRefused,
	guardedWritesRefused, fencingChecks, clockOffset, webhookCertificateExpiry,
	policyNotAsGenerated, policyRestored, buildInfo,
}

// Register adds every kubefence operator metric to reg. Calling it again with
// the same registry is harmless (a test process sets up many managers); any
// other registration error is returned.
func Register(reg prometheus.Registerer) error {
	b := version.Get()
	buildInfo.Reset()
	buildInfo.WithLabelValues(b.Version, b.Commit, b.Date, b.GoVersion).Set(1)
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) || already.ExistingCollector != c {
				return err
			}
		}
	}
	return nil
}

// The reconciler's events (controllers/fencedlease).

// Renewed records a renewal the controller observed.
func Renewed(leaseNamespace, lease string) {
	leaseNamespace, lease = leaseLabels(leaseNamespace, lease)
	renewals.WithLabelValues(leaseNamespace, lease).Inc()
}

// LeaseState records a lease's current (or last) fencing token and the age of
// its tenure (0 when nobody holds it), at each status write.
func LeaseState(leaseNamespace, lease string, token int64, tenureAge time.Duration) {
	if aggregateLeases.Load() {
		return // a gauge summed over leases means nothing
	}
	currentToken.WithLabelValues(leaseNamespace, lease).Set(float64(token))
	holderAge.WithLabelValues(leaseNamespace, lease).Set(tenureAge.Seconds())
}

// Granted records a grant of kind (Granted, HandedOver, TakenOver): one
// acquisition, one token issued (tokens_issued_total is kept for the
// dashboards that read it), and a takeover when it followed an expiry.
func Granted(leaseNamespace, lease, kind string) {
	leaseNamespace, lease = leaseLabels(leaseNamespace, lease)
	acquisitions.WithLabelValues(leaseNamespace, lease, kind).Inc()
	tokensIssued.WithLabelValues(leaseNamespace, lease).Inc()
	if kind == coordv1alpha1.ReasonTakenOver {
		takeovers.WithLabelValues(leaseNamespace, lease).Inc()
	}
}

// Expired records a tenure the controller ended because its holder stopped
// renewing, and how long it lasted. renewals_missed_total and
// lease_expiries_total count the same event; both names are kept (alerts and
// docs/metrics.md use them).
func Expired(leaseNamespace, lease string, tenure time.Duration) {
	leaseNamespace, lease = leaseLabels(leaseNamespace, lease)
	expiries.WithLabelValues(leaseNamespace, lease).Inc()
	renewalsMissed.WithLabelValues(leaseNamespace, lease).Inc()
	tenureSeconds.WithLabelValues(string(coordv1alpha1.EndReasonExpired)).Observe(tenure.Seconds())
}

// ExpiryDecided records how long after a tenure's expiry the controller
// decided it, once per expiry, after the decision's write succeeded.
func ExpiryDecided(late time.Duration) {
	expiryLateness.WithLabelValues().Observe(late.Seconds())
}

// Released records a tenure its holder (or an operator) ended, and how long
// it lasted.
func Released(leaseNamespace, lease string, tenure time.Duration) {
	leaseNamespace, lease = leaseLabels(leaseNamespace, lease)
	releases.WithLabelValues(leaseNamespace, lease).Inc()
	tenureSeconds.WithLabelValues(string(coordv1alpha1.EndReasonReleased)).Observe(tenure.Seconds())
}

// Forget drops the per-lease series of a deleted lease (nothing when the
// series are aggregated: the totals stay).
func Forget(leaseNamespace, lease string) {
	if aggregateLeases.Load() {
		return
	}
	l := map[string]string{"lease_namespace": leaseNamespace, "lease": lease}
	for _, v := range []*prometheus.CounterVec{renewals, renewalsMissed, expiries, releases, takeovers, tokensIssued} {
		v.Delete(l)
	}
	acquisitions.DeletePartialMatch(l)
	staleWritesRejected.DeletePartialMatch(l)
	currentToken.Delete(l)
	holderAge.Delete(l)
}

// The fencing webhook's events (controllers/webhooks/fencing).

// FencingChecked records how long one fencing decision took, and whether it
// read the lease from the API server.
func FencingChecked(leaseRead bool, took time.Duration) {
	label := "none"
	if leaseRead {
		label = "api"
	}
	fencingChecks.WithLabelValues(label).Observe(took.Seconds())
}

// GuardedWriteRefused records a write to a guarded object the fencing webhook
// refused, by reason; a stale one (the writer's token or tenure is over) also
// by lease and operation.
func GuardedWriteRefused(reason string, stale bool, leaseNamespace, lease, operation string) {
	guardedWritesRefused.WithLabelValues(reason).Inc()
	if stale {
		leaseNamespace, lease = leaseLabels(leaseNamespace, lease)
		staleWritesRejected.WithLabelValues(leaseNamespace, lease, operation).Inc()
	}
}

// ClockOffset records the largest lower bound, over the last minute, of how
// far the controller's clock is ahead of this webhook replica's:
// spec.renewTime of the operator's leader-election Lease (written on the
// leader's clock before it committed) minus this replica's clock when its
// watch delivered the renewal (controllers/webhooks/fencing.ClockSampler). A
// positive value shortens the cut-off margin before expiry by as much
// (docs/design.md); the alert fires above the configured
// --webhook-clock-skew.
func ClockOffset(offset time.Duration) {
	clockOffset.Set(offset.Seconds())
}

// The FencedLease webhook's events (controllers/webhooks/fencedlease).

// LeaseWriteRefused records a write to a FencedLease the webhook refused (I6),
// by reason.
func LeaseWriteRefused(reason string) {
	leaseWritesRefused.WithLabelValues(reason).Inc()
}

// Policy mode's installer's events (controllers/policy, Installer.OnCheck).

// PolicyChecked records one comparison of an installed policy-mode object
// ("<Kind>/<name>") with the generated one: as generated, or not and written
// again (restored), or not and still not (the gauge stays 1 until it is).
func PolicyChecked(object string, asGenerated, restored bool) {
	drifted := 0.0
	if !asGenerated && !restored {
		drifted = 1
	}
	policyNotAsGenerated.WithLabelValues(object).Set(drifted)
	if restored {
		policyRestored.WithLabelValues(object).Inc()
	}
}

// The certificate rotator's events (pkg/certrotation, Options.OnServing).

// WebhookCertificateExpiry records the expiry (notAfter) of the webhook
// serving certificate this replica serves, each time the rotator loads or
// issues one. It stays 0 when the certificate is not the rotator's
// (--webhook-cert-mode=provided, e.g. cert-manager, which exports
// certmanager_certificate_expiration_timestamp_seconds).
func WebhookCertificateExpiry(notAfter time.Time) {
	webhookCertificateExpiry.Set(float64(notAfter.Unix()))
}
