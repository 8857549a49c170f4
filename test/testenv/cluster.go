package testenv

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kubefence/kubefence/hack/devenv"
)

// NewScheme is the scheme of the suites (devenv.NewScheme): client-go's kinds
// and the FencedLease API, as cmd/main.go registers them.
var NewScheme = devenv.NewScheme

// Cluster is a started control plane as the operator's suites use it: the
// environment, the admin's rest config and client (with Scheme), and the
// admin's username, which the suites trust as "the controller".
type Cluster struct {
	Env       *envtest.Environment
	Config    *rest.Config
	Scheme    *runtime.Scheme
	Admin     client.WithWatch
	AdminUser string

	running managers // started by ServeOperator, StartController and Start; stopped by Stop
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
