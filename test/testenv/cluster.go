package testenv

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/hack/devenv"
	"github.com/kubefence/kubefence/pkg/fence/protocol"
)

// Cluster is a started control plane as the operator's suites use it: the
// environment, the admin's rest config and client (with Scheme), and the
// admin's username, which the suites trust as "the controller".
type Cluster struct {
	Env       *envtest.Environment
	Config    *rest.Config
	Scheme    *runtime.Scheme
	Admin     client.WithWatch
	AdminUser string
	// First and Second are the two kube-apiservers of Input.TwoAPIServers,
	// nil otherwise (apiservers.go). First is envtest's: it can be paused, not
	// killed or restarted (envtest stops it). Second can be paused, stopped,
	// killed and started again. Config then addresses First, with a Dial
	// function that reaches each advertised address (IP:port) at its
	// server's bound one: configurations copied from it reach the servers at
	// the addresses the kubernetes Service lists.
	First, Second *APIServerProcess

	namespace string   // Input.Namespace: the operator's
	running   managers // started by ServeOperator, StartController and Start; stopped by Stop
}

// bootstrap builds the admin's client, asks who the admin is (a
// SelfSubjectReview: with envtest's admin config, the identity the webhook
// trusts as "the controller") and creates namespace if it is not empty.
func (c *Cluster) bootstrap(ctx context.Context, namespace string) error {
	var err error
	if c.Admin, err = client.NewWithWatch(c.Config, client.Options{Scheme: c.Scheme}); err != nil {
		return fmt.Errorf("creating the admin's client: %w", err)
	}
	if c.AdminUser, err = protocol.WhoAmI(ctx, c.Admin); err != nil {
		return fmt.Errorf("asking who the admin is: %w", err)
	}
	c.namespace = namespace
	if namespace == "" {
		return nil
	}
	if err := c.Admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", namespace, err)
	}
	return nil
}

// User adds user name, in groups (a client certificate the API server
// authenticates), and returns a client acting as it, with its rest config.
func (c *Cluster) User(name string, groups ...string) (client.WithWatch, *rest.Config, error) {
	u, err := c.Env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("adding user %s: %w", name, err)
	}
	cl, err := client.NewWithWatch(u.Config(), client.Options{Scheme: c.Scheme})
	if err != nil {
		return nil, nil, fmt.Errorf("creating the client of user %s: %w", name, err)
	}
	return cl, u.Config(), nil
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

// Clients are a suite's lease clients: users of group, granted rules by the
// ClusterRole role (devenv.GrantClusterRole). It returns their clients and
// rest configs by name (Users).
func (c *Cluster) Clients(ctx context.Context, role, group string, rules []rbacv1.PolicyRule, names ...string) (map[string]client.WithWatch, map[string]*rest.Config, error) {
	if err := devenv.GrantClusterRole(ctx, c.Admin, role, group, rules...); err != nil {
		return nil, nil, err
	}
	return c.Users(group, names...)
}

// Kubeconfig adds user name, in groups, and writes a kubeconfig file acting
// as it into dir; it returns the file's path.
func (c *Cluster) Kubeconfig(dir, name string, groups ...string) (string, error) {
	u, err := c.Env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return "", fmt.Errorf("adding user %s: %w", name, err)
	}
	data, err := u.KubeConfig()
	if err != nil {
		return "", fmt.Errorf("the kubeconfig of user %s: %w", name, err)
	}
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return "", err
	}
	return path, nil
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

// Operator are the options of the operator the suites run: the deployed
// operator's defaults (operator.DefaultOptions), in Input.Namespace, with the
// admin trusted as the controller.
func (c *Cluster) Operator() operator.Options {
	o := operator.DefaultOptions()
	o.Namespace = c.namespace
	o.ControllerUsers = []string{c.AdminUser}
	return o
}

// Webhooks are the options of the operator's webhooks alone (Operator
// without the reconciler).
func (c *Cluster) Webhooks() operator.Options {
	o := c.Operator()
	o.Reconciler = false
	return o
}

// etcdVia makes env's kube-apiserver reach etcd through the address via
// returns for etcd's own (Input.EtcdVia). It fixes etcd's client address
// beforehand (a free loopback port), so that via knows where etcd will
// listen before it starts.
func etcdVia(env *envtest.Environment, via func(etcd string) (string, error)) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("finding a port for etcd: %w", err)
	}
	etcd := l.Addr().String()
	_ = l.Close()
	addr, err := via(etcd)
	if err != nil {
		return fmt.Errorf("kube-apiserver's way to etcd: %w", err)
	}
	if env.ControlPlane.Etcd == nil {
		env.ControlPlane.Etcd = &envtest.Etcd{}
	}
	env.ControlPlane.Etcd.URL = &url.URL{Scheme: "http", Host: etcd}
	env.ControlPlane.GetAPIServer().Configure().Set("etcd-servers", (&url.URL{Scheme: "http", Host: addr}).String())
	return nil
}
