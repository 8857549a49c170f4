// Package metrics is every Prometheus metric the kubefence operator serves, in
// one place, for the reconciler (controllers/fencedlease), both webhooks
// (controllers/webhooks/...) and the certificate rotator
// (controllers/certrotation). docs/metrics.md documents each name; the alerts
// and dashboard in config/prometheus and test/observability depend on them.
//
// Nothing is registered on import: Register adds the collectors to a registry
// (controllers/operator.Setup registers them on controller-runtime's
// metrics.Registry, which the manager serves). Callers record events through
// the functions below, one call per event, never through the vectors. Labels
// are bounded: lease namespace and name, and fixed reason strings; never
// object names, UIDs or holder identities.
//
// It imports only prometheus and the API (api/v1alpha1, for the reason
// names); it must not import any other kubefence package.
package metrics

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

const namespace = "kubefence"

var (
	acquisitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "lease_acquisitions_total",
		Help: "Grants of a lease to a holder, by kind (Granted, HandedOver, TakenOver).",
	}, []string{"lease_namespace", "lease", "kind"})

	renewals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "lease_renewals_total",
		Help: "Renewals observed by the controller.",
	}, []string{"lease_namespace", "lease"})

	renewalsMissed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "renewals_missed_total",
		Help: "Holders that did not renew within the lease duration (each leads to an expiry).",
	}, []string{"lease_namespace", "lease"})

	expiries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "lease_expiries_total",
		Help: "Tenures ended by the controller because the holder stopped renewing.",
	}, []string{"lease_namespace", "lease"})

	releases = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "lease_releases_total",
		Help: "Tenures ended by the holder releasing the lease.",
	}, []string{"lease_namespace", "lease"})

	takeovers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "lease_takeovers_total",
		Help: "Grants to a new holder after the previous one expired.",
	}, []string{"lease_namespace", "lease"})

	tokensIssued = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "tokens_issued_total",
		Help: "Fencing tokens issued.",
	}, []string{"lease_namespace", "lease"})

	currentToken = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace, Name: "lease_fencing_token",
		Help: "Current (or last) fencing token of the lease.",
	}, []string{"lease_namespace", "lease"})

	holderAge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace, Name: "lease_holder_age_seconds",
		Help: "Age of the active tenure, 0 when nobody holds the lease.",
	}, []string{"lease_namespace", "lease"})

	tenureSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Name: "lease_tenure_seconds",
		Help:    "Length of tenures that ended, by end reason.",
		Buckets: prometheus.ExponentialBuckets(1, 4, 10),
	}, []string{"reason"})

	staleWritesRejected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "stale_writes_rejected_total",
		Help: "Writes to guarded objects refused because their fencing token was stale.",
	}, []string{"lease_namespace", "lease", "operation"})

	guardedWritesRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "guarded_writes_refused_total",
		Help: "Writes to guarded objects refused by the fencing webhook, by reason.",
	}, []string{"reason"})

	fencingChecks = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Name: "fencing_check_seconds",
		Help:    "Time the fencing webhook spent deciding a write, by whether it read the lease from the API server.",
		Buckets: prometheus.ExponentialBuckets(0.00005, 2, 14),
	}, []string{"lease_read"})

	clockOffset = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Name: "webhook_clock_offset_seconds",
		Help: "Lower bound over the last minute of how far the controller's clock is ahead of this fencing webhook replica's (renewTime minus the replica's clock when a live read returned it).",
	})

	leaseWritesRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "lease_writes_refused_total",
		Help: "Writes to FencedLease objects refused by the admission webhook, by reason.",
	}, []string{"reason"})

	webhookCertificateExpiry = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Name: "webhook_certificate_expiry_timestamp_seconds",
		Help: "Expiry (notAfter, Unix seconds) of the webhook serving certificate issued by the self-signed rotator; 0 when the certificate is provided.",
	})
)

// collectors is every metric of the package, in the order Register adds them.
var collectors = []prometheus.Collector{
	acquisitions, renewals, renewalsMissed, expiries, releases, takeovers, tokensIssued,
	currentToken, holderAge, tenureSeconds, staleWritesRejected, leaseWritesRefused,
	guardedWritesRefused, fencingChecks, clockOffset, webhookCertificateExpiry,
}

// Register adds every kubefence operator metric to reg. Calling it again with
// the same registry is harmless (a test process sets up many managers); any
// other registration error is returned.
func Register(reg prometheus.Registerer) error {
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
	renewals.WithLabelValues(leaseNamespace, lease).Inc()
}

// LeaseState records a lease's current (or last) fencing token and the age of
// its tenure (0 when nobody holds it), at each status write.
func LeaseState(leaseNamespace, lease string, token int64, tenureAge time.Duration) {
	currentToken.WithLabelValues(leaseNamespace, lease).Set(float64(token))
	holderAge.WithLabelValues(leaseNamespace, lease).Set(tenureAge.Seconds())
}

// Granted records a grant of kind (Granted, HandedOver, TakenOver): one
// acquisition, one token issued (tokens_issued_total is kept for the
// dashboards that read it), and a takeover when it followed an expiry.
func Granted(leaseNamespace, lease, kind string) {
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
	expiries.WithLabelValues(leaseNamespace, lease).Inc()
	renewalsMissed.WithLabelValues(leaseNamespace, lease).Inc()
	tenureSeconds.WithLabelValues(string(coordv1alpha1.EndReasonExpired)).Observe(tenure.Seconds())
}

// Released records a tenure its holder (or an operator) ended, and how long
// it lasted.
func Released(leaseNamespace, lease string, tenure time.Duration) {
	releases.WithLabelValues(leaseNamespace, lease).Inc()
	tenureSeconds.WithLabelValues(string(coordv1alpha1.EndReasonReleased)).Observe(tenure.Seconds())
}

// Forget drops the per-lease series of a deleted lease.
func Forget(leaseNamespace, lease string) {
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
		staleWritesRejected.WithLabelValues(leaseNamespace, lease, operation).Inc()
	}
}

// ClockOffset records the largest lower bound, over the last minute, of how
// far the controller's clock is ahead of this webhook replica's: renewTime
// (written on the controller's clock before it committed) minus this
// replica's clock when a live read returned it. A positive value shortens the
// cut-off margin before expiry by as much (docs/design.md); the alert fires
// above the configured --webhook-clock-skew.
func ClockOffset(offset time.Duration) {
	clockOffset.Set(offset.Seconds())
}

// The FencedLease webhook's events (controllers/webhooks/fencedlease).

// LeaseWriteRefused records a write to a FencedLease the webhook refused (I6),
// by reason.
func LeaseWriteRefused(reason string) {
	leaseWritesRefused.WithLabelValues(reason).Inc()
}

// The certificate rotator's events (controllers/certrotation).

// WebhookCertificateExpiry records the expiry (notAfter) of the webhook
// serving certificate this replica serves, each time the rotator loads or
// issues one. It stays 0 when the certificate is not the rotator's
// (--webhook-cert-mode=provided, e.g. cert-manager, which exports
// certmanager_certificate_expiration_timestamp_seconds).
func WebhookCertificateExpiry(notAfter time.Time) {
	webhookCertificateExpiry.Set(float64(notAfter.Unix()))
}
