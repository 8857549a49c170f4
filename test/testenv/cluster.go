package testenv

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/operator"
)

// NewScheme is the scheme of the suites: client-go's kinds and the
// FencedLease API, as cmd/main.go registers them.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(coordv1alpha1.AddToScheme(s))
	return s
}

// Cluster is a started control plane as the operator's suites use it: the
// environment, the admin's rest config and client (with Scheme), and the
// admin's username, which the suites trust as "the controller".
type Cluster struct {
	Env       *envtest.Environment
	Config    *rest.Config
	Scheme    *runtime.Scheme
	Admin     client.WithWatch
	AdminUser string

	mu       sync.Mutex
	managers []*Manager // started by ServeOperator and Start, stopped by Stop
}

// StartCluster starts the control plane of in (Start), builds the admin's
// client with in.Scheme (NewScheme if nil), asks who the admin is
// (AdminUser) and, if namespace is not empty, creates that namespace (the
// operator's). On an error after the start it stops the control plane.
func StartCluster(ctx context.Context, in Input, namespace string) (*Cluster, error) {
	if in.Scheme == nil {
		in.Scheme = NewScheme()
	}
	env, cfg, err := Start(in)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Env: env, Config: cfg, Scheme: in.Scheme}
	if err := c.bootstrap(ctx, namespace); err != nil {
		_ = env.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) bootstrap(ctx context.Context, namespace string) error {
	var err error
	if c.Admin, err = client.NewWithWatch(c.Config, client.Options{Scheme: c.Scheme}); err != nil {
		return fmt.Errorf("creating the admin's client: %w", err)
	}
	if c.AdminUser, err = AdminUser(ctx, c.Admin); err != nil {
		return err
	}
	if namespace == "" {
		return nil
	}
	if err := c.Admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", namespace, err)
	}
	return nil
}

// User adds user name, in groups, (UserClient) and returns its client and
// rest config.
func (c *Cluster) User(name string, groups ...string) (client.WithWatch, *rest.Config, error) {
	return UserClient(c.Env, c.Scheme, envtest.User{Name: name, Groups: groups})
}

// Users adds a user of group for each name (User) and returns their clients
// and rest configs by name.
func (c *Cluster) Users(group string, names ...string) (map[string]client.WithWatch, map[string]*rest.Config, error) {
	clients, configs := map[string]client.WithWatch{}, map[string]*rest.Config{}
	for _, name := range names {
		var err error
		if clients[name], configs[name], err = c.User(name, group); err != nil {
			return nil, nil, err
		}
	}
	return clients, configs, nil
}

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
	c.mu.Lock()
	defer c.mu.Unlock()
	c.managers = append(c.managers, m)
	return m
}

// Stop stops the managers ServeOperator and Start started, each within 30 s,
// then the control plane; it returns what went wrong: a manager that did not
// stop or whose Start returned an error, a control plane that did not stop.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	managers := c.managers
	c.managers = nil
	c.mu.Unlock()
	var errs []error
	for _, m := range managers {
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

// Namespace creates a namespace of its own for one test, named prefix, a
// dash and a random suffix, and returns its name. envtest runs no namespace
// controller: namespaces stay until the control plane stops.
func (c *Cluster) Namespace(ctx context.Context, prefix string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := c.Admin.Create(ctx, ns); err != nil {
		return "", fmt.Errorf("creating a namespace %s-...: %w", prefix, err)
	}
	return ns.Name, nil
}
