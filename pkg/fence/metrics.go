package fence

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the opt-in Prometheus metrics of this package's clients: whether
// each Elector leads, its token, how long its renewals take, how long its
// FencedClient's writes take, and the writes it had refused as stale. They stand in for controller-runtime's
// leader_election_master_status in a manager whose leader election is a
// FencedLease (package manager's LeaseOptions.Metrics).
//
// Every series is labelled lease_namespace and lease; run at most one Elector
// per lease with one Metrics (a process competes once per lease).
//
//	kubefence_client_leading{lease_namespace, lease}                     gauge: 1 while leading (a current token), else 0
//	kubefence_client_fencing_token{lease_namespace, lease}               gauge: token of the current (or last) tenure
//	kubefence_client_renewal_duration_seconds{lease_namespace, lease, result}  histogram: renewal round trips; result ok, lost or error
//	kubefence_client_stale_refusals_total{lease_namespace, lease}        counter: writes refused as stale (each ends the tenure)
//	kubefence_client_write_duration_seconds{lease_namespace, lease, result}  histogram: fenced writes' round trips; result ok, refused or unknown
//	kubefence_client_lease_errors_total{lease_namespace, lease, reason}  counter: failed reads of the lease and writes of the request; reason in LeaseErrorReasons
//
// A write's round trip, from sending it to its answer, bounds the time from
// its admission to its commit from above (the API server answers after the
// commit): the fencing webhook's margins and the controller's waits assume
// that time stays within the operator's --max-commit-lag, and nothing else
// measures it (docs/design.md, "How each way a tenure ends keeps the
// promise"). The alert KubefenceClientWritesSlow fires when the p99 of the
// acknowledged writes passes half of it.
type Metrics struct {
	leading     *prometheus.GaugeVec
	token       *prometheus.GaugeVec
	renewal     *prometheus.HistogramVec
	stale       *prometheus.CounterVec
	write       *prometheus.HistogramVec
	leaseErrors *prometheus.CounterVec
}

// Results of a renewal, the result label of kubefence_client_renewal_duration_seconds.
const (
	RenewalOK    = "ok"
	RenewalLost  = "lost"
	RenewalError = "error"
)

// Results of a fenced write, the result label of
// kubefence_client_write_duration_seconds.
const (
	// WriteOK: acknowledged, so committed before the answer.
	WriteOK = "ok"
	// WriteRefused: answered with a refusal (admission, conflict, a 4xx):
	// nothing was committed.
	WriteRefused = "refused"
	// WriteUnknown: no answer, or a timeout: the write may still commit.
	WriteUnknown = "unknown"
)

// NewMetrics creates the client metrics and registers them with reg (for a
// controller-runtime manager, sigs.k8s.io/controller-runtime/pkg/metrics.Registry).
// Calling it again with the same registerer returns metrics sharing the
// collectors already registered. Pass the result as Config.Metrics.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("fence: NewMetrics needs a prometheus.Registerer")
	}
	labels := []string{"lease_namespace", "lease"}
	m := &Metrics{
		leading: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kubefence_client_leading",
			Help: "1 while this client leads the FencedLease (holds a current fencing token), 0 otherwise.",
		}, labels),
		token: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kubefence_client_fencing_token",
			Help: "Fencing token of this client's current (or last) tenure of the FencedLease.",
		}, labels),
		renewal: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kubefence_client_renewal_duration_seconds",
			Help:    "Round trip of this client's renewals of the FencedLease, by result (ok, lost, error).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}, append(labels, "result")),
		stale: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kubefence_client_stale_refusals_total",
			Help: "Writes of this client refused as stale by the fencing webhook (each ends the tenure).",
		}, labels),
		write: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "kubefence_client_write_duration_seconds",
			Help: "Round trip of this client's fenced writes to guarded objects, by result (ok, refused, unknown): " +
				"an acknowledged write's round trip bounds the time from its admission to its commit from above.",
			Buckets: prometheus.DefBuckets,
		}, append(labels, "result")),
		leaseErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kubefence_client_lease_errors_total",
			Help: "Failed reads of the FencedLease and writes of this client's request, by reason " +
				"(not-found, forbidden, unreachable, refused, other); optimistic-concurrency conflicts are not counted.",
		}, append(labels, "reason")),
	}
	r := registerer{reg: reg}
	register(&r, &m.leading)
	register(&r, &m.token)
	register(&r, &m.renewal)
	register(&r, &m.stale)
	register(&r, &m.write)
	register(&r, &m.leaseErrors)
	if r.err != nil {
		return nil, r.err
	}
	return m, nil
}

// registerer registers collectors with reg until one fails; err is that
// failure.
type registerer struct {
	reg prometheus.Registerer
	err error
}

// register registers *c with r.reg, or sets *c to the collector of that name
// already registered. After a failure it does nothing.
func register[C prometheus.Collector](r *registerer, c *C) {
	if r.err != nil {
		return
	}
	err := r.reg.Register(*c)
	if err == nil {
		return
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			*c = existing
			return
		}
	}
	r.err = fmt.Errorf("fence: registering client metrics: %w", err)
}

// init creates the series of a lease at zero, so that rate() and alerts see
// them before the first change.
func (m *Metrics) init(namespace, lease string) {
	if m == nil {
		return
	}
	m.leading.WithLabelValues(namespace, lease).Set(0)
	m.token.WithLabelValues(namespace, lease)
	m.stale.WithLabelValues(namespace, lease)
	for _, r := range LeaseErrorReasons {
		m.leaseErrors.WithLabelValues(namespace, lease, r)
	}
}

func (m *Metrics) setLeading(namespace, lease string, leading bool, token int64) {
	if m == nil {
		return
	}
	v := 0.0
	if leading {
		v = 1
		m.token.WithLabelValues(namespace, lease).Set(float64(token))
	}
	m.leading.WithLabelValues(namespace, lease).Set(v)
}

func (m *Metrics) observeRenewal(namespace, lease, result string, d time.Duration) {
	if m == nil {
		return
	}
	m.renewal.WithLabelValues(namespace, lease, result).Observe(d.Seconds())
}

// observeWrite records the round trip d of a fenced write that ended with err.
func (m *Metrics) observeWrite(namespace, lease string, err error, d time.Duration) {
	if m == nil {
		return
	}
	result := WriteOK
	switch {
	case err == nil:
	case outcomeUnknown(err):
		result = WriteUnknown
	default:
		result = WriteRefused
	}
	m.write.WithLabelValues(namespace, lease, result).Observe(d.Seconds())
}

func (m *Metrics) staleRefusal(namespace, lease string) {
	if m == nil {
		return
	}
	m.stale.WithLabelValues(namespace, lease).Inc()
}

func (m *Metrics) leaseError(namespace, lease, reason string) {
	if m == nil {
		return
	}
	m.leaseErrors.WithLabelValues(namespace, lease, reason).Inc()
}
