package certrotation

import (
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
)

// Defaults of Options.
const (
	// DefaultCAValidity is the lifetime of a generated CA.
	DefaultCAValidity = 10 * 365 * 24 * time.Hour
	// DefaultCertValidity is the lifetime of a generated serving certificate.
	DefaultCertValidity = 365 * 24 * time.Hour
	// DefaultRotateBefore is how long before expiry a certificate is replaced,
	// unless a quarter of its lifetime is shorter.
	DefaultRotateBefore = 90 * 24 * time.Hour
	// DefaultRecheckInterval is the longest time between two checks.
	DefaultRecheckInterval = time.Hour
	// DefaultCAName is the common name of a generated CA.
	DefaultCAName = "kubefence-webhook-ca"
	// DefaultCAOrganization is the organization of a generated CA.
	DefaultCAOrganization = "kubefence"
	// DefaultCertDir is where controller-runtime's webhook server reads its
	// certificate by default.
	DefaultCertDir = "/tmp/k8s-webhook-server/serving-certs"
)

// Keys of the certificate Secret. tls.crt and tls.key are those of a
// kubernetes.io/tls Secret, so cert-manager's layout and this one agree.
const (
	// CACertKey holds the PEM CA bundle: the signing CA first, then the
	// previous CA while a CA rotation is in progress. It is the caBundle.
	CACertKey = "ca.crt"
	// CAKeyKey holds the PEM (PKCS #8) private key of the signing CA.
	CAKeyKey = "ca.key"
	// CertKey holds the PEM serving certificate.
	CertKey = corev1.TLSCertKey
	// KeyKey holds the PEM (PKCS #8) private key of the serving certificate.
	KeyKey = corev1.TLSPrivateKeyKey
)

// Options configure a Rotator. Zero durations and names take the documented
// defaults; New rejects everything else that is invalid.
type Options struct {
	// SecretKey names the Secret that stores the CA and the serving
	// certificate (for kubefence: <namespace>/kubefence-webhook-server-cert).
	// It is normally shipped empty and filled in; it is created when missing.
	// Required.
	SecretKey types.NamespacedName

	// CertDir is the directory the webhook server reads CertName and KeyName
	// from (webhook.Options.CertDir). The Rotator writes them there itself, so
	// the server need not wait for the kubelet to sync a Secret volume. Empty
	// means no files are written: serve GetCertificate instead.
	CertDir string
	// CertName is the certificate file name in CertDir. Default "tls.crt".
	CertName string
	// KeyName is the private key file name in CertDir. Default "tls.key".
	KeyName string

	// DNSNames are the names the serving certificate is valid for; the first
	// is also its common name. For a webhook Service use ServiceDNSNames.
	// Required.
	DNSNames []string

	// WebhookConfigurations names the ValidatingWebhookConfigurations whose
	// every webhook gets the CA bundle as clientConfig.caBundle. Empty means
	// the CA is not injected anywhere.
	WebhookConfigurations []string

	// OnServing, when set, is called with the serving certificate's expiry
	// (notAfter) each time the rotator has made it current (on start and
	// after every rotation). The operator records it as the metric
	// kubefence_webhook_certificate_expiry_timestamp_seconds.
	OnServing func(notAfter time.Time)

	// CAValidity is the lifetime of a generated CA. Default 10 years.
	CAValidity time.Duration
	// CertValidity is the lifetime of a generated serving certificate, capped
	// by the remaining lifetime of its CA. Default 1 year; at most CAValidity.
	CertValidity time.Duration
	// RotateBefore: a certificate is replaced when less than RotateBefore, or
	// less than a quarter of its lifetime, whichever is shorter, remains.
	// Default 90 days.
	RotateBefore time.Duration
	// RecheckInterval is the longest time between two checks of the Secret
	// and the webhook configurations (changes are also watched). Default 1h.
	RecheckInterval time.Duration

	// CAName is the common name of a generated CA. Default
	// "kubefence-webhook-ca".
	CAName string
	// CAOrganization is the organization of a generated CA. Default
	// "kubefence".
	CAOrganization string

	// Clock tells the time, for issuing, expiry and timers. Default the real
	// clock.
	Clock clock.Clock
	// Recorder, when set, receives an event on the Secret for every
	// certificate issued. AddToManager defaults it to the manager's recorder.
	Recorder events.EventRecorder
}

// ServiceDNSNames returns the names a Service is reached by inside the
// cluster: <service>.<namespace>.svc (the name the kube-apiserver verifies
// when it calls a webhook Service) and <service>.<namespace>.svc.cluster.local.
func ServiceDNSNames(service, namespace string) []string {
	base := service + "." + namespace + ".svc"
	return []string{base, base + ".cluster.local"}
}

// withDefaults returns a copy of o with every unset field defaulted.
func (o Options) withDefaults() Options {
	if o.CertName == "" {
		o.CertName = corev1.TLSCertKey
	}
	if o.KeyName == "" {
		o.KeyName = corev1.TLSPrivateKeyKey
	}
	if o.CAValidity == 0 {
		o.CAValidity = DefaultCAValidity
	}
	if o.CertValidity == 0 {
		o.CertValidity = min(DefaultCertValidity, o.CAValidity)
	}
	if o.RotateBefore == 0 {
		o.RotateBefore = DefaultRotateBefore
	}
	if o.RecheckInterval == 0 {
		o.RecheckInterval = DefaultRecheckInterval
	}
	if o.CAName == "" {
		o.CAName = DefaultCAName
	}
	if o.CAOrganization == "" {
		o.CAOrganization = DefaultCAOrganization
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	o.DNSNames = append([]string(nil), o.DNSNames...)
	o.WebhookConfigurations = append([]string(nil), o.WebhookConfigurations...)
	return o
}

// validate checks defaulted options.
func (o Options) validate() error {
	var errs []error
	if o.SecretKey.Namespace == "" || o.SecretKey.Name == "" {
		errs = append(errs, fmt.Errorf("secretKey: namespace and name are required, got %q", o.SecretKey.String()))
	}
	for _, msg := range validation.IsDNS1123Subdomain(o.SecretKey.Name) {
		errs = append(errs, fmt.Errorf("secretKey: name %q: %s", o.SecretKey.Name, msg))
	}
	for _, f := range []struct{ field, name string }{{"certName", o.CertName}, {"keyName", o.KeyName}} {
		if strings.ContainsRune(f.name, '/') || f.name == "." || f.name == ".." {
			errs = append(errs, fmt.Errorf("%s: %q must be a plain file name", f.field, f.name))
		}
	}
	if o.CertDir != "" && o.CertName == o.KeyName {
		errs = append(errs, fmt.Errorf("certName and keyName must differ, both are %q", o.CertName))
	}
	if len(o.DNSNames) == 0 {
		errs = append(errs, errors.New("dnsNames: at least one name is required"))
	}
	for _, name := range o.DNSNames {
		for _, msg := range validation.IsDNS1123Subdomain(name) {
			errs = append(errs, fmt.Errorf("dnsNames: %q: %s", name, msg))
		}
	}
	for _, name := range o.WebhookConfigurations {
		for _, msg := range validation.IsDNS1123Subdomain(name) {
			errs = append(errs, fmt.Errorf("webhookConfigurations: %q: %s", name, msg))
		}
	}
	for _, d := range []struct {
		field string
		value time.Duration
	}{
		{"caValidity", o.CAValidity}, {"certValidity", o.CertValidity},
		{"rotateBefore", o.RotateBefore}, {"recheckInterval", o.RecheckInterval},
	} {
		if d.value < 0 {
			errs = append(errs, fmt.Errorf("%s: must not be negative, got %s", d.field, d.value))
		}
	}
	if o.CertValidity > o.CAValidity {
		errs = append(errs, fmt.Errorf("certValidity (%s) must not exceed caValidity (%s)", o.CertValidity, o.CAValidity))
	}
	return errors.Join(errs...)
}
