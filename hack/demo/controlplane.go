package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/hack/devenv"
)

// operatorNamespace holds the operator's epoch store, as in a real install.
const operatorNamespace = "kubefence-system"

// workersGroup is the group of the workers' users; it gets what
// config/rbac's editor role gives a lease client, plus the Widgets.
const workersGroup = "kubefence:demo-workers"

// controlPlane is etcd, kube-apiserver and the kubefence operator.
type controlPlane struct {
	env     *envtest.Environment
	cfg     *rest.Config
	scheme  *runtime.Scheme
	admin   client.WithWatch
	version string
	// adminKubeconfig is a kubeconfig file for the cluster admin.
	adminKubeconfig string
	// kubectl is the control plane's kubectl; kubectlCache its cache directory.
	kubectl, kubectlCache string

	stopOperator context.CancelFunc
	operatorDone chan error
}

// startControlPlane starts etcd and kube-apiserver with envtest, with the
// CRDs and webhook configurations of config/ (and the Widget CRD of
// test/crds), then runs the operator's controller and webhooks in this
// process. Its directories live in dir. On error, whatever started is stopped.
func startControlPlane(ctx context.Context, root, assets, dir string) (cp *controlPlane, err error) {
	for _, d := range []string{"etcd", "apiserver"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	scheme := devenv.NewScheme()
	env := &envtest.Environment{
		Scheme:                   scheme,
		CRDDirectoryPaths:        devenv.CRDPaths(root),
		ErrorIfCRDPathMissing:    true,
		WebhookInstallOptions:    envtest.WebhookInstallOptions{Paths: devenv.WebhookPaths(root), LocalServingHost: "127.0.0.1"},
		BinaryAssetsDirectory:    assets,
		ControlPlaneStartTimeout: 90 * time.Second,
		ControlPlaneStopTimeout:  20 * time.Second,
		ControlPlane: envtest.ControlPlane{
			Etcd:      &envtest.Etcd{DataDir: filepath.Join(dir, "etcd")},
			APIServer: &envtest.APIServer{CertDir: filepath.Join(dir, "apiserver")},
		},
	}
	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop() // whatever did start
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", assets, err)
	}
	cp = &controlPlane{env: env, cfg: cfg, scheme: scheme, kubectl: filepath.Join(assets, "kubectl"), kubectlCache: filepath.Join(dir, "kubectl-cache")}
	defer func() {
		if err != nil {
			err = errors.Join(err, cp.stop())
			cp = nil
		}
	}()
	if cp.admin, err = client.NewWithWatch(cp.cfg, client.Options{Scheme: scheme}); err != nil {
		return cp, err
	}
	if dc, err := discovery.NewDiscoveryClientForConfig(cp.cfg); err == nil {
		if v, err := dc.ServerVersion(); err == nil {
			cp.version = v.GitVersion
		}
	}
	if cp.version == "" || strings.HasPrefix(cp.version, "v0.0.0") {
		// Built from source without version stamps (hack/setup-envtest.sh).
		cp.version = filepath.Base(assets)
	}
	cp.adminKubeconfig = filepath.Join(dir, "admin.kubeconfig")
	if err := os.WriteFile(cp.adminKubeconfig, env.KubeConfig, 0o600); err != nil {
		return cp, err
	}
	if err := cp.setUpCluster(ctx); err != nil {
		return cp, err
	}
	return cp, cp.startOperator(ctx)
}

// setUpCluster creates the operator's namespace and the workers' RBAC.
func (cp *controlPlane) setUpCluster(ctx context.Context) error {
	if err := cp.admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", operatorNamespace, err)
	}
	// A lease client reads and updates FencedLeases (its own request); status
	// is the controller's. Full rights on the guarded kind: only fencing
	// refuses a write.
	if err := devenv.GrantClusterRole(ctx, cp.admin, "kubefence-demo-worker", workersGroup, devenv.ClientRules...); err != nil {
		return err
	}
	return nil
}

// startOperator runs what bin/manager runs (cmd/main.go): the FencedLease
// controller, the FencedLease webhook and the fencing webhooks, serving on
// the port and certificates envtest registered with the API server.
func (cp *controlPlane) startOperator(ctx context.Context) error {
	// The operator runs as the envtest admin; that username is the one the
	// FencedLease webhook trusts as the controller.
	review := &authenticationv1.SelfSubjectReview{}
	if err := cp.admin.Create(ctx, review); err != nil {
		return fmt.Errorf("asking the API server who the admin is: %w", err)
	}
	wopts := cp.env.WebhookInstallOptions
	mgr, err := ctrl.NewManager(cp.cfg, ctrl.Options{
		Scheme:  cp.scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: wopts.LocalServingHost, Port: wopts.LocalServingPort, CertDir: wopts.LocalServingCertDir,
		}),
	})
	if err != nil {
		return fmt.Errorf("creating the operator's manager: %w", err)
	}
	opts := operator.DefaultOptions()
	opts.Namespace = operatorNamespace
	opts.ControllerUsers = []string{review.Status.UserInfo.Username}
	if err := operator.Setup(mgr, opts); err != nil {
		return err
	}

	opCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	cp.stopOperator, cp.operatorDone = cancel, make(chan error, 1)
	go func() { cp.operatorDone <- mgr.Start(opCtx) }()

	deadline := time.Now().Add(30 * time.Second)
	for mgr.GetWebhookServer().StartedChecker()(nil) != nil {
		select {
		case err := <-cp.operatorDone:
			cp.operatorDone <- err
			return fmt.Errorf("the operator stopped while starting: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("the operator's webhook server did not start within 30s")
		}
	}
	return nil
}

// addWorkerUser creates a user for a worker and writes its kubeconfig.
func (cp *controlPlane) addWorkerUser(name, path string) error {
	u, err := cp.env.AddUser(envtest.User{Name: name, Groups: []string{workersGroup}}, nil)
	if err != nil {
		return fmt.Errorf("adding user %s: %w", name, err)
	}
	kc, err := u.KubeConfig()
	if err != nil {
		return err
	}
	return os.WriteFile(path, kc, 0o600)
}

// stop stops the operator, then kube-apiserver and etcd, and removes the
// webhook certificates envtest wrote.
func (cp *controlPlane) stop() error {
	var opErr error
	if cp.stopOperator != nil {
		cp.stopOperator()
		select {
		case opErr = <-cp.operatorDone:
		case <-time.After(15 * time.Second):
		}
		cp.stopOperator = nil
	}
	if opErr != nil {
		opErr = fmt.Errorf("the operator: %w", opErr)
	}
	return errors.Join(opErr, cp.env.Stop())
}
