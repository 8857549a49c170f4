// Command manager runs the kubefence operator: the FencedLease controller and
// the admission webhooks.
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/metrics"
	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/pkg/certrotation"
	"github.com/kubefence/kubefence/pkg/version"
)

var (
	scheme   = runtime.NewScheme()
	setupLog = ctrl.Log.WithName("setup")
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(coordv1alpha1.AddToScheme(scheme))
}

func main() {
	var (
		metricsAddr, probeAddr                           string
		metricsCertPath, metricsCertName, metricsKey     string
		webhookCertPath, webhookCertName, webhookKey     string
		enableLeaderElection, secureMetrics, enableHTTP2 bool
		webhookConfigs                                   stringList
		webhookPort                                      int
		webhookCertMode, webhookServiceName              string
		webhookSecretName, metricsServiceName            string
		metricsPerLease                                  bool
	)
	// The manager's own flags: its servers, certificates and leader election.
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0", "The address the metrics endpoint binds to. "+
		"Use :8443 for HTTPS or :8080 for HTTP, or leave as 0 to disable the metrics service.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "The address the probe endpoint binds to.")
	flag.BoolVar(&enableLeaderElection, "leader-elect", true,
		"Enable leader election for the controller manager, so that only one replica grants and expires leases.")
	flag.BoolVar(&secureMetrics, "metrics-secure", true,
		"If set, the metrics endpoint is served securely via HTTPS, behind authentication and authorization.")
	flag.IntVar(&webhookPort, "webhook-port", 9443, "The port the webhook server listens on.")
	flag.StringVar(&webhookCertMode, "webhook-cert-mode", "provided",
		"Where the webhook serving certificate comes from: \"provided\" (files in --webhook-cert-path, e.g. from cert-manager) "+
			"or \"self-signed\" (the manager keeps a CA and certificate in --webhook-secret-name and patches the webhook configurations' caBundle).")
	flag.StringVar(&webhookServiceName, "webhook-service-name", coordv1alpha1.WebhookServiceName, "The webhook Service (self-signed mode: the certificate's DNS names).")
	flag.StringVar(&metricsServiceName, "metrics-service-name", "kubefence-controller-manager-metrics-service",
		"The metrics Service (self-signed mode without --metrics-cert-path: the metrics server serves the webhook certificate, which also names this Service, so Prometheus can verify it with the CA in --webhook-secret-name).")
	flag.StringVar(&webhookSecretName, "webhook-secret-name", coordv1alpha1.WebhookSecretName, "The Secret holding the self-signed CA and certificate.")
	flag.Var(&webhookConfigs, "webhook-configuration-name",
		"A ValidatingWebhookConfiguration whose caBundle the manager keeps current in self-signed mode (repeatable).")
	flag.StringVar(&webhookCertPath, "webhook-cert-path", "", "The directory that contains the webhook certificate.")
	flag.StringVar(&webhookCertName, "webhook-cert-name", "tls.crt", "The name of the webhook certificate file.")
	flag.StringVar(&webhookKey, "webhook-cert-key", "tls.key", "The name of the webhook key file.")
	flag.StringVar(&metricsCertPath, "metrics-cert-path", "", "The directory that contains the metrics server certificate.")
	flag.StringVar(&metricsCertName, "metrics-cert-name", "tls.crt", "The name of the metrics server certificate file.")
	flag.StringVar(&metricsKey, "metrics-cert-key", "tls.key", "The name of the metrics server key file.")
	flag.BoolVar(&metricsPerLease, "metrics-per-lease", true,
		"Label the per-lease metrics with lease_namespace and lease (about 11 series per active lease). false records each as one series with empty lease labels "+
			"and drops the gauges kubefence_lease_fencing_token and kubefence_lease_holder_age_seconds (docs/metrics.md).")
	flag.BoolVar(&enableHTTP2, "enable-http2", false,
		"If set, HTTP/2 will be enabled for the metrics and webhook servers (off by default: CVE-2023-44487, CVE-2023-39325).")
	// The operator's flags (operator.Options.BindFlags) and zap's.
	operatorOpts := operator.DefaultOptions()
	operatorOpts.BindFlags(flag.CommandLine)
	printVersion := flag.Bool("version", false, "Print the build's version, commit and date (pkg/version), then exit.")
	opts := zap.Options{Development: false}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	build := version.Get()
	if *printVersion {
		fmt.Println("kubefence manager", build)
		return
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	setupLog.Info("kubefence manager", "version", build.Version, "commit", build.Commit, "date", build.Date, "goVersion", build.GoVersion, "platform", build.Platform)

	// Setup checks the operator's options again; checking them here reports
	// a bad flag before anything connects to the API server.
	if err := operatorOpts.Validate(); err != nil {
		setupLog.Error(err, "Invalid operator flags")
		os.Exit(1)
	}
	namespace := operatorOpts.Namespace

	metrics.SetPerLease(metricsPerLease)

	var tlsOpts []func(*tls.Config)
	if !enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}

	webhookTLSOpts := tlsOpts
	var webhookCertWatcher, metricsCertWatcher *certwatcher.CertWatcher
	var rotator *certrotation.Rotator
	switch webhookCertMode {
	case "self-signed":
		if len(webhookConfigs) == 0 {
			webhookConfigs = stringList{coordv1alpha1.LeaseWebhookConfigurationName, coordv1alpha1.FencingWebhookConfigurationName}
		}
		var err error
		rotator, err = certrotation.New(certrotation.Options{
			SecretKey:             types.NamespacedName{Namespace: namespace, Name: webhookSecretName},
			DNSNames:              append(certrotation.ServiceDNSNames(webhookServiceName, namespace), certrotation.ServiceDNSNames(metricsServiceName, namespace)...),
			WebhookConfigurations: webhookConfigs,
			OnServing:             metrics.WebhookCertificateExpiry,
		})
		if err != nil {
			setupLog.Error(err, "Invalid self-signed certificate settings")
			os.Exit(1)
		}
		webhookTLSOpts = append(webhookTLSOpts, func(c *tls.Config) { c.GetCertificate = rotator.GetCertificate })
	case "provided":
	default:
		setupLog.Error(fmt.Errorf("--webhook-cert-mode=%q: expected \"provided\" or \"self-signed\"", webhookCertMode), "Invalid flag")
		os.Exit(1)
	}
	if len(webhookCertPath) > 0 && rotator == nil {
		var err error
		webhookCertWatcher, err = certwatcher.New(filepath.Join(webhookCertPath, webhookCertName), filepath.Join(webhookCertPath, webhookKey))
		if err != nil {
			setupLog.Error(err, "Failed to initialize webhook certificate watcher")
			os.Exit(1)
		}
		webhookTLSOpts = append(webhookTLSOpts, func(c *tls.Config) { c.GetCertificate = webhookCertWatcher.GetCertificate })
	}

	metricsOpts := metricsserver.Options{BindAddress: metricsAddr, SecureServing: secureMetrics, TLSOpts: tlsOpts}
	if secureMetrics {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	if rotator != nil && len(metricsCertPath) == 0 {
		// The webhook certificate names the metrics Service too: a scraper
		// verifies it with the CA in the webhook Secret (ca.crt).
		metricsOpts.TLSOpts = append(metricsOpts.TLSOpts, func(c *tls.Config) { c.GetCertificate = rotator.GetCertificate })
	}
	if len(metricsCertPath) > 0 {
		var err error
		metricsCertWatcher, err = certwatcher.New(filepath.Join(metricsCertPath, metricsCertName), filepath.Join(metricsCertPath, metricsKey))
		if err != nil {
			setupLog.Error(err, "Failed to initialize metrics certificate watcher")
			os.Exit(1)
		}
		metricsOpts.TLSOpts = append(metricsOpts.TLSOpts, func(c *tls.Config) { c.GetCertificate = metricsCertWatcher.GetCertificate })
	}

	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsOpts,
		WebhookServer:                 webhook.NewServer(webhook.Options{Port: webhookPort, TLSOpts: webhookTLSOpts}),
		HealthProbeBindAddress:        probeAddr,
		LeaderElection:                enableLeaderElection,
		LeaderElectionID:              coordv1alpha1.LeaderElectionID,
		LeaderElectionNamespace:       namespace,
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		setupLog.Error(err, "Failed to create manager")
		os.Exit(1)
	}

	if err := operator.Setup(mgr, operatorOpts); err != nil {
		setupLog.Error(err, "Failed to set up the operator")
		os.Exit(1)
	}

	for _, w := range []*certwatcher.CertWatcher{webhookCertWatcher, metricsCertWatcher} {
		if w != nil {
			if err := mgr.Add(w); err != nil {
				setupLog.Error(err, "Failed to add certificate watcher to manager")
				os.Exit(1)
			}
		}
	}
	if rotator != nil {
		if err := rotator.SetupWithManager(mgr); err != nil {
			setupLog.Error(err, "Failed to set up certificate rotation")
			os.Exit(1)
		}
		if err := mgr.AddReadyzCheck("webhook-cert", rotator.ReadyCheck); err != nil {
			setupLog.Error(err, "Failed to set up certificate ready check")
			os.Exit(1)
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		setupLog.Error(err, "Failed to set up health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", mgr.GetWebhookServer().StartedChecker()); err != nil {
		setupLog.Error(err, "Failed to set up ready check")
		os.Exit(1)
	}

	setupLog.Info("Starting manager")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		setupLog.Error(err, "Failed to run manager")
		os.Exit(1)
	}
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return fmt.Sprint(*s) }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }
