package testenv

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/kubefence/kubefence/controllers/operator"
)

// Webhooks are the options of the operator's webhooks alone (no
// reconciler), the admin trusted as the controller: RegisterWebhooks.
func (c *Cluster) Webhooks() operator.Options { return webhooksOnly([]string{c.AdminUser}) }

// ServeOperator starts a manager running the operator o (operator.Setup)
// until ctx ends, and returns it once its webhook server serves. Its options
// are WebhookManagerOptions and its rest config a copy of Config, both
// changed by configure first if it is not nil (to wrap the transport or the
// webhook server, or to elect a leader).
func (c *Cluster) ServeOperator(ctx context.Context, o operator.Options, configure func(*rest.Config, *ctrl.Options)) (*Manager, error) {
	cfg, opts := rest.CopyConfig(c.Config), WebhookManagerOptions(c.Env, c.Scheme)
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
	if err := WaitForWebhookServer(mgr, 30*time.Second); err != nil {
		m.cancel()
		return nil, errors.Join(err, m.Err())
	}
	return m, nil
}

// StartController starts a controller process until ctx ends: a manager
// running the FencedLease reconciler alone (SetupReconciler, its epoch store
// in namespace). Its options are ControllerManagerOptions and its rest config
// a copy of Config; configure, if not nil, changes them first (leader
// election, a fault transport). Stop stops it.
func (c *Cluster) StartController(ctx context.Context, namespace string, configure func(*rest.Config, *ctrl.Options)) (*Manager, error) {
	cfg, opts := rest.CopyConfig(c.Config), ControllerManagerOptions(c.Scheme, namespace)
	if configure != nil {
		configure(cfg, &opts)
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("creating the controller manager: %w", err)
	}
	if err := SetupReconciler(mgr, namespace); err != nil {
		return nil, fmt.Errorf("setting up the reconciler: %w", err)
	}
	return c.Start(ctx, mgr), nil
}

// Start starts mgr until ctx ends (StartManager); Stop stops it.
func (c *Cluster) Start(ctx context.Context, mgr ctrl.Manager) *Manager {
	m := StartManager(ctx, mgr)
	c.running.add(m)
	return m
}

// Stop stops the managers ServeOperator and Start started, each within 30 s,
// then the control plane; it returns what went wrong: a manager that did not
// stop or whose Start returned an error, a control plane that did not stop.
func (c *Cluster) Stop() error {
	var errs []error
	for _, m := range c.running.take() {
		if err := m.Stop(30 * time.Second); err != nil {
			errs = append(errs, fmt.Errorf("manager: %w", err))
		}
	}
	if err := c.Env.Stop(); err != nil {
		errs = append(errs, fmt.Errorf("stopping kube-apiserver and etcd: %w", err))
	}
	return errors.Join(errs...)
}

// Manager is a controller-runtime manager running in a goroutine of its own
// (StartManager), as an operator process would: Stop ends it, Done tells
// that it ended, Err what its Start returned.
type Manager struct {
	ctrl.Manager
	cancel context.CancelFunc
	done   chan struct{}
	err    error // Start's result, once done is closed
}

// StartManager starts mgr in a goroutine until ctx ends or Stop is called.
func StartManager(ctx context.Context, mgr ctrl.Manager) *Manager {
	ctx, cancel := context.WithCancel(ctx)
	m := &Manager{Manager: mgr, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		m.err = mgr.Start(ctx)
	}()
	return m
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

// Serve runs start (a manager's or a server's Start) in a goroutine until t
// ends: t's cleanup cancels its context, waits for it to return, and fails t
// if it returned an error (what names it in the failure).
func Serve(t testing.TB, what string, start func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", what, err)
		}
	})
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
