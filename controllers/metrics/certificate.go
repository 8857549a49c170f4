package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// WebhookCertificateExpiry is the expiry (notAfter) of the webhook serving
// certificate this replica serves, as a Unix timestamp, set by
// controllers/certrotation each time it loads or issues one. It stays 0 when
// the certificate is not the rotator's (--webhook-cert-mode=provided, e.g.
// cert-manager, which exports certmanager_certificate_expiration_timestamp_seconds).
var WebhookCertificateExpiry = prometheus.NewGauge(prometheus.GaugeOpts{
	Namespace: namespace, Name: "webhook_certificate_expiry_timestamp_seconds",
	Help: "Expiry (notAfter, Unix seconds) of the webhook serving certificate issued by the self-signed rotator; 0 when the certificate is provided.",
})

func init() {
	crmetrics.Registry.MustRegister(WebhookCertificateExpiry)
}
