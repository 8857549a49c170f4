// Package metrics registers every kubefence Prometheus metric in one place.
// Labels are bounded: lease namespace and name, and fixed reason strings; never
// object names, UIDs or holder identities.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

const namespace = "kubefence"

var (
	// Acquisitions counts grants, by how the lease was obtained (Granted,
	// HandedOver, TakenOver).
	Acquisitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "lease_acquisitions_total",
		Help: "Grants of a lease to a holder, by kind (Granted, HandedOver, TakenOver).",
	}, []string{"lease_namespace", "lease", "kind"})

	// Renewals counts renewals the controller observed.
	Renewals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "lease_renewals_total",
		Help: "Renewals observed by the controller.",
	}, []string{"lease_namespace", "lease"})

	// RenewalsMissed counts tenures that ended because the holder stopped renewing.
	RenewalsMissed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "renewals_missed_total",
		Help: "Holders that did not renew within the lease duration (each leads to an expiry).",
	}, []string{"lease_namespace", "lease"})

	// Expiries counts involuntary ends of tenure.
	Expiries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "lease_expiries_total",
		Help: "Tenures ended by the controller because the holder stopped renewing.",
	}, []string{"lease_namespace", "lease"})

	// Releases counts voluntary ends of tenure.
	Releases = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "lease_releases_total",
		Help: "Tenures ended by the holder releasing the lease.",
	}, []string{"lease_namespace", "lease"})

	// Takeovers counts grants that followed an expiry.
	Takeovers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "lease_takeovers_total",
		Help: "Grants to a new holder after the previous one expired.",
	}, []string{"lease_namespace", "lease"})

	// TokensIssued counts fencing tokens issued (one per grant).
	TokensIssued = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "tokens_issued_total",
		Help: "Fencing tokens issued.",
	}, []string{"lease_namespace", "lease"})

	// CurrentToken is the current fencing token of each lease.
	CurrentToken = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace, Name: "lease_fencing_token",
		Help: "Current (or last) fencing token of the lease.",
	}, []string{"lease_namespace", "lease"})

	// HolderAge is how long the current holder has held the lease.
	HolderAge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace, Name: "lease_holder_age_seconds",
		Help: "Age of the active tenure, 0 when nobody holds the lease.",
	}, []string{"lease_namespace", "lease"})

	// TenureSeconds observes the length of ended tenures.
	TenureSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Name: "lease_tenure_seconds",
		Help:    "Length of tenures that ended, by end reason.",
		Buckets: prometheus.ExponentialBuckets(1, 4, 10),
	}, []string{"reason"})

	// StaleWritesRejected counts writes to guarded objects refused as stale.
	StaleWritesRejected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "stale_writes_rejected_total",
		Help: "Writes to guarded objects refused because their fencing token was stale.",
	}, []string{"lease_namespace", "lease", "operation"})

	// GuardedWritesRefused counts every refused write to a guarded object, by reason.
	GuardedWritesRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "guarded_writes_refused_total",
		Help: "Writes to guarded objects refused by the fencing webhook, by reason.",
	}, []string{"reason"})

	// FencingChecks observes the fencing webhook's decision time.
	FencingChecks = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Name: "fencing_check_seconds",
		Help:    "Time the fencing webhook spent deciding a write, by whether it read the lease from the API server.",
		Buckets: prometheus.ExponentialBuckets(0.00005, 2, 14),
	}, []string{"lease_read"})

	// ClockOffset is the largest lower bound, over the last minute, of how far
	// the controller's clock is ahead of this webhook replica's: status.renewTime
	// (written on the controller's clock before it committed) minus this
	// replica's clock when a live read returned it. A positive value means the
	// controller is at least that far ahead, which shortens the cut-off margin
	// before expiry by as much (docs/design.md); the alert fires above the
	// configured --webhook-clock-skew.
	ClockOffset = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Name: "webhook_clock_offset_seconds",
		Help: "Lower bound over the last minute of how far the controller's clock is ahead of this fencing webhook replica's (renewTime minus the replica's clock when a live read returned it).",
	})

	// LeaseWritesRefused counts writes to FencedLeases refused by the webhook (I6).
	LeaseWritesRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "lease_writes_refused_total",
		Help: "Writes to FencedLease objects refused by the admission webhook, by reason.",
	}, []string{"reason"})
)

func init() {
	crmetrics.Registry.MustRegister(Acquisitions, Renewals, RenewalsMissed, Expiries, Releases,
		Takeovers, TokensIssued, CurrentToken, HolderAge, TenureSeconds, StaleWritesRejected,
		LeaseWritesRefused, GuardedWritesRefused, FencingChecks, ClockOffset)
}

// Forget drops the per-lease series of a deleted lease.
func Forget(leaseNamespace, lease string) {
	l := map[string]string{"lease_namespace": leaseNamespace, "lease": lease}
	for _, v := range []*prometheus.CounterVec{Renewals, RenewalsMissed, Expiries, Releases, Takeovers, TokensIssued} {
		v.Delete(l)
	}
	Acquisitions.DeletePartialMatch(l)
	StaleWritesRejected.DeletePartialMatch(l)
	CurrentToken.Delete(l)
	HolderAge.Delete(l)
}
