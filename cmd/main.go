// Command manager runs the kubefence operator: the FencedLease controller and
// the admission webhooks.
package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

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
	"github.com/kubefence/kubefence/controllers/fencedlease"
	"github.com/kubefence/kubefence/controllers/metrics"
	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/controllers/webhooks/fencing"
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
		acknowledgeStamped                               bool
		namespace, serviceAccount                        string
		controllerUsers, webhookConfigs, adminGroups     stringList
		cleanupUsers                                     stringList
		webhookPort                                      int
		webhookCertMode, webhookServiceName              string
		webhookSecretName                                string
		driftRatio                                       float64
		minDrift, webhookSkew, maxCommitLag              time.Duration
		singleReplica                                    bool
		maxConcurrentReconciles                          int
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0", "The address the metrics endpoint binds to. "+
		"Use :8443 for HTTPS or :8080 for HTTP, or leave as 0 to disable the metrics service.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "The address the probe endpoint binds to.")
	flag.BoolVar(&enableLeaderElection, "leader-elect", true,
		"Enable leader election for the controller manager, so that only one replica grants and expires leases.")
	flag.BoolVar(&singleReplica, "single-replica", false,
		"Run without leader election (with --leader-elect=false): only if this is the only replica. Two controllers deciding at once stay safe but fight over every lease.")
	flag.DurationVar(&maxCommitLag, "max-commit-lag", fencing.DefaultCommitLag,
		"The longest the API server may take to commit a guarded write after the fencing webhook admitted it; must be > 0. The webhook stops accepting a token this long plus --webhook-clock-skew before its tenure's expiry, "+
			"but at most a tenth of the lease before it: for leases shorter than 10 x (skew + this) the bound shrinks to a tenth of the lease, skew included. "+
			"The controller waits this long after an operator revokes a tenure, before the first grant of a recreated lease, and, with --enforcement=policy, after a grant's barrier.")
	flag.BoolVar(&secureMetrics, "metrics-secure", true,
		"If set, the metrics endpoint is served securely via HTTPS, behind authentication and authorization.")
	flag.IntVar(&webhookPort, "webhook-port", 9443, "The port the webhook server listens on.")
	flag.StringVar(&webhookCertMode, "webhook-cert-mode", "provided",
		"Where the webhook serving certificate comes from: \"provided\" (files in --webhook-cert-path, e.g. from cert-manager) "+
			"or \"self-signed\" (the manager keeps a CA and certificate in --webhook-secret-name and patches the webhook configurations' caBundle).")
	flag.StringVar(&webhookServiceName, "webhook-service-name", "kubefence-webhook-service", "The webhook Service (self-signed mode: the certificate's DNS names).")
	flag.StringVar(&webhookSecretName, "webhook-secret-name", "kubefence-webhook-server-cert", "The Secret holding the self-signed CA and certificate.")
	flag.Var(&webhookConfigs, "webhook-configuration-name",
		"A ValidatingWebhookConfiguration whose caBundle the manager keeps current in self-signed mode (repeatable).")
	flag.StringVar(&webhookCertPath, "webhook-cert-path", "", "The directory that contains the webhook certificate.")
	flag.StringVar(&webhookCertName, "webhook-cert-name", "tls.crt", "The name of the webhook certificate file.")
	flag.StringVar(&webhookKey, "webhook-cert-key", "tls.key", "The name of the webhook key file.")
	flag.StringVar(&metricsCertPath, "metrics-cert-path", "", "The directory that contains the metrics server certificate.")
	flag.StringVar(&metricsCertName, "metrics-cert-name", "tls.crt", "The name of the metrics server certificate file.")
	flag.StringVar(&metricsKey, "metrics-cert-key", "tls.key", "The name of the metrics server key file.")
	flag.BoolVar(&enableHTTP2, "enable-http2", false,
		"If set, HTTP/2 will be enabled for the metrics and webhook servers (off by default: CVE-2023-44487, CVE-2023-39325).")
	flag.StringVar(&namespace, "namespace", envOr("POD_NAMESPACE", "kubefence-system"),
		"The operator's namespace: it holds the epoch store ConfigMap.")
	flag.StringVar(&serviceAccount, "service-account", envOr("POD_SERVICE_ACCOUNT", "kubefence-controller-manager"),
		"The operator's service account; its username is trusted by the FencedLease webhook as the controller.")
	flag.Var(&adminGroups, "lease-admin-group",
		"A group whose members may change the settings of existing FencedLeases (repeatable; default system:masters).")
	flag.Var(&controllerUsers, "controller-user",
		"An additional username trusted as the controller by the FencedLease webhook (repeatable).")
	flag.Float64Var(&driftRatio, "drift-ratio", fencedlease.DefaultTiming().DriftRatio,
		"Clock-drift allowance added to every lease, as a fraction of its duration.")
	flag.DurationVar(&minDrift, "min-drift", fencedlease.DefaultTiming().MinDrift,
		"Smallest clock-drift allowance added to every lease.")
	flag.Var(&cleanupUsers, "fencing-cleanup-user",
		"A user whose DELETEs of guarded objects are accepted without holding their lease (repeatable; default: the namespace controller "+
			"and the garbage collector of kube-controller-manager, "+strings.Join(fencing.DefaultCleanupUsers, ", ")+"; \"-\" for nobody).")
	flag.BoolVar(&acknowledgeStamped, "acknowledge-stamped-renewals", false,
		"Acknowledge stamped renewals in status too (two API writes per renewal), for a rolling upgrade from a release before renewTime: "+
			"its webhook replicas judge tenures from status.expireTime alone. Set it for that rollout, then roll out again without it (docs/versioning.md).")
	flag.IntVar(&maxConcurrentReconciles, "max-concurrent-reconciles", fencedlease.DefaultMaxConcurrentReconciles,
		"How many leases the controller decides at once. After a mass fail-over every expired lease waits for a worker; each worker mostly waits for one API write.")
	flag.DurationVar(&webhookSkew, "webhook-clock-skew", fencing.DefaultSkew,
		"The fencing webhook refuses a token this long before its tenure's expiry, covering the clock difference between webhook and controller.")
	var enforcement enforcementFlags
	enforcement.bind(flag.CommandLine)
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

	if !enableLeaderElection && !singleReplica {
		setupLog.Error(errors.New("--leader-elect=false needs --single-replica: without leader election every replica grants and expires leases"), "Invalid flags")
		os.Exit(1)
	}
	timing := fencedlease.Timing{DriftRatio: driftRatio, MinDrift: minDrift, CommitLag: maxCommitLag, AcknowledgeStamped: acknowledgeStamped}
	if err := timing.Validate(); err != nil {
		setupLog.Error(err, "Invalid timing flags (--drift-ratio, --min-drift, --max-commit-lag)")
		os.Exit(1)
	}
	if maxConcurrentReconciles < 1 {
		setupLog.Error(fmt.Errorf("--max-concurrent-reconciles=%d: expected at least 1", maxConcurrentReconciles), "Invalid flag")
		os.Exit(1)
	}

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
			webhookConfigs = stringList{"kubefence-validating-webhook-configuration", "kubefence-fencing-webhook-configuration"}
		}
		var err error
		rotator, err = certrotation.New(certrotation.Options{
			SecretKey:             types.NamespacedName{Namespace: namespace, Name: webhookSecretName},
			DNSNames:              certrotation.ServiceDNSNames(webhookServiceName, namespace),
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
		LeaderElectionID:              operator.LeaderElectionID,
		LeaderElectionNamespace:       namespace,
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		setupLog.Error(err, "Failed to create manager")
		os.Exit(1)
	}

	operatorOpts := operator.DefaultOptions()
	operatorOpts.Namespace = namespace
	operatorOpts.Timing = timing
	operatorOpts.MaxConcurrentReconciles = maxConcurrentReconciles
	operatorOpts.ControllerUsers = append([]string{fmt.Sprintf("system:serviceaccount:%s:%s", namespace, serviceAccount)}, controllerUsers...)
	operatorOpts.AdminGroups = adminGroups
	operatorOpts.WebhookSkew = webhookSkew
	switch {
	case len(cleanupUsers) == 1 && cleanupUsers[0] == "-":
		operatorOpts.CleanupUsers = nil
	case len(cleanupUsers) > 0:
		operatorOpts.CleanupUsers = cleanupUsers
	}
	if err := enforcement.apply(&operatorOpts); err != nil {
		setupLog.Error(err, "Invalid flags")
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

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return fmt.Sprint(*s) }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }
