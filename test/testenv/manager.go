package testenv

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/operator"
)

// ServeOperator starts a manager running the operator o (operator.Setup)
// until ctx ends, and returns it once its webhook server serves. Its webhook
// server listens where Env.WebhookInstallOptions (prepared by Start) points
// the API server, with their certificates; it has no metrics server, and
// controller names may repeat across the managers of one process. Its rest
// config is a copy of Config. configure, if not nil, changes both first (to
// wrap the transport or the webhook server, or to elect a leader).
func (c *Cluster) ServeOperator(ctx context.Context, o operator.Options, configure func(*rest.Config, *ctrl.Options)) (*Manager, error) {
	wopts := c.Env.WebhookInstallOptions
	cfg, opts := rest.CopyConfig(c.Config), managerOptions(c.Scheme)
	opts.WebhookServer = webhook.NewServer(webhook.Options{
		Host: wopts.LocalServingHost, Port: wopts.LocalServingPort, CertDir: wopts.LocalServingCertDir,
	})
	if configure != nil {
		configure(cfg, &opts)
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return nil, err
	}
	if err := operator.Setup(mgr, o); err != nil {
		return nil, err
	}
	m := c.Start(ctx, mgr)
	for deadline := time.Now().Add(30 * time.Second); mgr.GetWebhookServer().StartedChecker()(nil) != nil; {
		if time.Now().After(deadline) {
			m.cancel()
			return nil, errors.Join(errors.New("the webhook server did not start within 30s"), m.Err())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return m, nil
}

// StartController starts a controller process until ctx ends: a manager
// running the reconciler of the operator o alone (operator.Setup with
// o.Webhooks false; its epoch store in o.Namespace), as cmd/main.go sets it
// up. It has no metrics or probe servers, controller names may repeat across
// the managers of one process, and, should configure turn leader election
// on, it elects with the deployed operator's Lease
// (coordv1alpha1.LeaderElectionID in o.Namespace). Its rest config is a copy
// of Config; configure, if not nil, changes both first (leader election, a
// fault transport). Stop stops it.
func (c *Cluster) StartController(ctx context.Context, o operator.Options, configure func(*rest.Config, *ctrl.Options)) (*Manager, error) {
	cfg, opts := rest.CopyConfig(c.Config), managerOptions(c.Scheme)
	opts.HealthProbeBindAddress = "0"
	opts.LeaderElectionID = coordv1alpha1.LeaderElectionID
	opts.LeaderElectionNamespace = o.Namespace
	if configure != nil {
		configure(cfg, &opts)
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("creating the controller manager: %w", err)
	}
	o.Webhooks = false
	if err := operator.Setup(mgr, o); err != nil {
		return nil, fmt.Errorf("setting up the reconciler: %w", err)
	}
	return c.Start(ctx, mgr), nil
}

// Start starts mgr in a goroutine until ctx ends or the Manager's Stop is
// called; the Cluster's Stop stops it too.
func (c *Cluster) Start(ctx context.Context, mgr ctrl.Manager) *Manager {
	ctx, cancel := context.WithCancel(ctx)
	m := &Manager{Manager: mgr, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		m.err = mgr.Start(ctx)
	}()
	c.running.add(m)
	return m
}

// managerOptions are what every manager of a suite starts from: scheme, no
// metrics server, and controller names that may repeat across the managers of
// one process.
func managerOptions(scheme *runtime.Scheme) ctrl.Options {
	return ctrl.Options{
		Scheme:     scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	}
}

// Stop stops the managers ServeOperator, StartController and Start started,
// each within 30 s, then the control plane (a paused kube-apiserver resumed,
// the second stopped, then envtest's); it returns what went wrong: a manager
// that did not stop or whose Start returned an error, a control plane that
// did not stop.
func (c *Cluster) Stop() error {
	var errs []error
	for _, m := range c.running.take() {
		if err := m.Stop(30 * time.Second); err != nil {
			errs = append(errs, fmt.Errorf("manager: %w", err))
		}
	}
	errs = append(errs, c.stopSecond())
	if err := c.Env.Stop(); err != nil {
		errs = append(errs, fmt.Errorf("stopping kube-apiserver and etcd: %w", err))
	}
	return errors.Join(errs...)
}

// Manager is a controller-runtime manager running in a goroutine of its own
// (Cluster.Start), as an operator process would: Stop ends it, Done tells
// that it ended, Err what its Start returned.
type Manager struct {
	ctrl.Manager
	cancel context.CancelFunc
	done   chan struct{}
	err    error // Start's result, once done is closed
}

// Done is closed once the manager's Start returned.
func (m *Manager) Done() <-chan struct{} { return m.done }

// Err is what the manager's Start returned, nil while it runs.
func (m *Manager) Err() error {
	select {
	case <-m.done:
		return m.err
	default:
		return nil
	}
}

// ErrStillRunning is Stop's error for a manager that did not stop in time.
var ErrStillRunning = errors.New("the manager did not stop")

// Stop cancels the manager's context and waits, at most timeout, for Start
// to return; it returns Start's error, or ErrStillRunning.
func (m *Manager) Stop(timeout time.Duration) error {
	m.cancel()
	select {
	case <-m.done:
		return m.err
	case <-time.After(timeout):
		return fmt.Errorf("%w within %v", ErrStillRunning, timeout)
	}
}

// managers are the Managers a Cluster started; safe for concurrent use.
type managers struct {
	mu   sync.Mutex
	list []*Manager
}

func (ms *managers) add(m *Manager) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	ms.list = append(ms.list, m)
}

// take returns the managers and forgets them.
func (ms *managers) take() []*Manager {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	l := ms.list
	ms.list = nil
	return l
}
