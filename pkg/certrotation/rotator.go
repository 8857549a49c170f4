package certrotation

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// EventCertificateIssued is the reason of the event emitted on the Secret
// whenever new certificates are stored in it.
const EventCertificateIssued = "CertificateIssued"

const (
	// secretWriteAttempts bounds the re-read-and-retry loop on conflicts.
	secretWriteAttempts = 5
	// minRetry and maxRetry bound the backoff after a failed run.
	minRetry = time.Second
	maxRetry = time.Minute
)

// Rotator issues, stores, rotates and installs the webhook serving
// certificate; see the package documentation. Create it with AddToManager
// (or New and SetupWithManager). It is safe for concurrent use.
type Rotator struct {
	opts Options
	pol  policy
	log  logr.Logger

	// Set by SetupWithManager.
	reader    client.Reader // uncached: a fresh resourceVersion for every write
	writer    client.Writer
	clientset kubernetes.Interface // for the watches; nil: no watches

	started atomic.Bool
	nudges  chan struct{}
	ready   chan struct{}
	once    sync.Once
	serving atomic.Pointer[tls.Certificate]
}

var (
	_ manager.Runnable               = (*Rotator)(nil)
	_ manager.LeaderElectionRunnable = (*Rotator)(nil)
	_ healthz.Checker                = (*Rotator)(nil).ReadyCheck
)

// AddToManager creates a Rotator from opts and adds it to mgr; it starts with
// the manager on every replica. It reads through mgr's API reader (not the
// cache), writes through mgr's client, and watches the Secret and the webhook
// configurations with informers of its own, so mgr's cache options need no
// change. The manager's scheme must include core/v1 and
// admissionregistration/v1 (client-go's scheme does).
func AddToManager(mgr manager.Manager, opts Options) (*Rotator, error) {
	r, err := New(opts)
	if err != nil {
		return nil, err
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return nil, err
	}
	return r, nil
}

// New validates opts and returns a Rotator that is not yet bound to a
// manager. Use it instead of AddToManager when the Rotator must exist before
// the manager, to pass GetCertificate to the webhook server's TLS options.
func New(opts Options) (*Rotator, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("invalid certificate rotation options: %w", err)
	}
	return &Rotator{
		opts:   opts,
		pol:    policyOf(opts),
		log:    logf.Log.WithName("cert-rotation").WithValues("secret", opts.SecretKey.String()),
		nudges: make(chan struct{}, 1),
		ready:  make(chan struct{}),
	}, nil
}

// SetupWithManager binds r to mgr's API reader, client, REST config and event
// recorder, and adds it to mgr.
func (r *Rotator) SetupWithManager(mgr manager.Manager) error {
	clientset, err := kubernetes.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return fmt.Errorf("creating a clientset for the certificate watches: %w", err)
	}
	r.reader, r.writer, r.clientset = mgr.GetAPIReader(), mgr.GetClient(), clientset
	if r.opts.Recorder == nil {
		r.opts.Recorder = mgr.GetEventRecorder("kubefence-cert-rotation")
	}
	if err := mgr.Add(r); err != nil {
		return fmt.Errorf("adding the certificate rotator to the manager: %w", err)
	}
	return nil
}

// NeedLeaderElection is false: every replica serves the webhook, so every
// replica needs valid certificates.
func (r *Rotator) NeedLeaderElection() bool { return false }

// Ready is closed once the serving certificate is in place (files in CertDir
// when set, and GetCertificate) and every webhook configuration's caBundle
// holds its CA. It stays closed.
func (r *Rotator) Ready() <-chan struct{} { return r.ready }

// ReadyCheck is a healthz.Checker that fails until Ready is closed.
func (r *Rotator) ReadyCheck(_ *http.Request) error {
	select {
	case <-r.ready:
		return nil
	default:
		return errors.New("webhook serving certificate is not ready yet")
	}
}

// GetCertificate returns the current serving certificate, for
// tls.Config.GetCertificate (webhook.Options.TLSOpts): a webhook server that
// uses it needs no CertDir and starts before the certificate exists, failing
// handshakes until then.
func (r *Rotator) GetCertificate(_ *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := r.serving.Load(); c != nil {
		return c, nil
	}
	return nil, errors.New("webhook serving certificate is not ready yet")
}

// Start runs the rotation loop until ctx is done. It can be called once.
func (r *Rotator) Start(ctx context.Context) error {
	if r.reader == nil || r.writer == nil {
		return errors.New("certificate rotator: SetupWithManager was not called")
	}
	if !r.started.CompareAndSwap(false, true) {
		return errors.New("certificate rotator: already started")
	}
	var watches sync.WaitGroup
	defer watches.Wait()
	if r.clientset != nil {
		watches.Go(func() { r.runWatches(ctx, r.clientset) })
	}
	r.log.Info("Starting certificate rotation", "dnsNames", r.opts.DNSNames,
		"webhookConfigurations", r.opts.WebhookConfigurations, "certDir", r.opts.CertDir)

	retryAfter := minRetry
	for {
		wait, err := r.sync(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			r.log.Error(err, "Certificate rotation failed; retrying", "retryAfter", retryAfter)
			wait, retryAfter = retryAfter, min(2*retryAfter, maxRetry, r.opts.RecheckInterval)
		} else {
			retryAfter = minRetry
		}
		if wait <= 0 {
			continue // due already (time passed during the run); fake timers of 0 never fire
		}
		timer := r.opts.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-r.nudges:
			timer.Stop()
		case <-timer.C():
		}
	}
}

// nudge asks the loop to run again soon; nudges coalesce.
func (r *Rotator) nudge() {
	select {
	case r.nudges <- struct{}{}:
	default:
	}
}

// sync makes the Secret, the caBundles, the files and the served certificate
// current, and returns how long until it is next due.
func (r *Rotator) sync(ctx context.Context) (time.Duration, error) {
	a, err := r.ensureSecret(ctx)
	if err != nil {
		return 0, err
	}
	pair, err := tls.X509KeyPair(a.Cert, a.Key)
	if err != nil {
		return 0, fmt.Errorf("loading the serving certificate: %w", err)
	}
	// The CA goes into the caBundles before its certificate is served, so that
	// after a CA rotation the kube-apiserver already trusts what it will see.
	if err := r.injectCABundle(ctx, a.CACert); err != nil {
		return 0, err
	}
	if r.opts.CertDir != "" {
		if err := writeCertFiles(r.opts.CertDir, r.opts.CertName, r.opts.KeyName, a); err != nil {
			return 0, err
		}
	}
	if cur := r.serving.Load(); cur == nil || !bytes.Equal(cur.Certificate[0], pair.Certificate[0]) {
		r.serving.Store(&pair)
	}
	if pair.Leaf != nil && r.opts.OnServing != nil {
		r.opts.OnServing(pair.Leaf.NotAfter)
	}
	r.once.Do(func() {
		r.log.Info("Webhook serving certificate is ready")
		close(r.ready)
	})
	due, err := nextDue(a, r.opts.RotateBefore)
	if err != nil {
		return 0, err
	}
	return max(0, min(r.opts.RecheckInterval, due.Sub(r.opts.Clock.Now()))), nil
}

// ensureSecret returns valid, current certificates from the Secret, issuing
// and storing new ones when needed. A write carries the resourceVersion that
// was read; a conflict means another replica wrote first, so the Secret is
// read again and what it holds now is used if it is valid.
func (r *Rotator) ensureSecret(ctx context.Context) (artifacts, error) {
	key := r.opts.SecretKey
	for range secretWriteAttempts {
		secret := &corev1.Secret{}
		err := r.reader.Get(ctx, key, secret)
		missing := apierrors.IsNotFound(err)
		if err != nil && !missing {
			return artifacts{}, fmt.Errorf("reading Secret %s: %w", key, err)
		}
		cur := artifactsFromData(secret.Data)
		next, why, err := renew(cur, r.pol, r.opts.Clock.Now())
		if err != nil {
			return artifacts{}, fmt.Errorf("issuing certificates: %w", err)
		}
		if why == reasonUpToDate {
			return cur, nil
		}
		if missing {
			secret = &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
				Type:       corev1.SecretTypeOpaque,
				Data:       next.intoData(nil),
			}
			err = r.writer.Create(ctx, secret)
		} else {
			secret.Data = next.intoData(secret.Data)
			err = r.writer.Update(ctx, secret)
		}
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			r.log.V(1).Info("Secret changed concurrently; reading it again", "reason", why)
			continue
		}
		if err != nil {
			return artifacts{}, fmt.Errorf("writing Secret %s: %w", key, err)
		}
		r.log.Info("Issued webhook certificates", "reason", why, "newCA", !bytes.Equal(cur.CAKey, next.CAKey))
		if r.opts.Recorder != nil {
			what := "serving certificate"
			if !bytes.Equal(cur.CAKey, next.CAKey) {
				what = "CA and serving certificate"
			}
			r.opts.Recorder.Eventf(secret, nil, corev1.EventTypeNormal, EventCertificateIssued, "Issue",
				"Issued a new webhook %s (%s)", what, why)
		}
		return next, nil
	}
	return artifacts{}, fmt.Errorf("writing Secret %s: still conflicting after %d attempts", key, secretWriteAttempts)
}

// injectCABundle sets clientConfig.caBundle of every webhook of every
// configured ValidatingWebhookConfiguration to bundle.
func (r *Rotator) injectCABundle(ctx context.Context, bundle []byte) error {
	var errs []error
	for _, name := range r.opts.WebhookConfigurations {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := r.reader.Get(ctx, client.ObjectKey{Name: name}, cfg); err != nil {
				return err
			}
			changed := false
			for i := range cfg.Webhooks {
				if !bytes.Equal(cfg.Webhooks[i].ClientConfig.CABundle, bundle) {
					cfg.Webhooks[i].ClientConfig.CABundle = bundle
					changed = true
				}
			}
			if !changed {
				return nil
			}
			if err := r.writer.Update(ctx, cfg); err != nil {
				return err
			}
			r.log.Info("Injected the CA bundle", "validatingWebhookConfiguration", name)
			return nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("injecting the CA bundle into ValidatingWebhookConfiguration %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}
