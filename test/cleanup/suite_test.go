// Package cleanup_test runs a real kube-controller-manager (its garbage
// collector and namespace controller) against the test kube-apiserver, with
// the operator's webhooks and reconciler in-process, and proves the fencing
// webhook's clean-up exemption (docs/design.md, "Clean-up exemption") in both
// of kube-controller-manager's credential modes: namespace deletion and
// foreground and orphan cascades of guarded objects finish, and a holder that
// lost its lease cannot delete a guarded object through an owner guarded by
// the same lease. TestCleanupWithKubeControllerManagerPolicyMode does the
// namespace deletion in policy mode, on a control plane of its own.
package cleanup_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/controllers/webhooks/fencing"
	"github.com/kubefence/kubefence/hack/devenv"
	"github.com/kubefence/kubefence/test/testenv"
)

const (
	operatorNamespace = "kubefence-system"
	// kcmUser is kube-controller-manager's own identity. Without
	// --use-service-account-credentials every controller of it runs as this
	// user, the garbage collector and the namespace controller included.
	kcmUser = "system:kube-controller-manager"
	// Variants of the webhooks' clean-up users (see cleanupSwitch).
	variantDefault = "default" // fencing.DefaultCleanupUsers
	variantKCM     = "kcm"     // the defaults and kcmUser (--fencing-cleanup-user)
)

var (
	// cluster is the control plane; admin its admin's client.
	cluster  *testenv.Cluster
	admin    client.WithWatch
	suiteCtx context.Context
	// users are lease clients (group kubefence:clients); userConfigs their configs.
	users       map[string]client.WithWatch
	userConfigs map[string]*rest.Config
	// kcmKubeconfig authenticates as kcmUser, bound to cluster-admin by RBAC
	// (not system:masters, which the FencedLease validator trusts as a lease admin).
	kcmKubeconfig []byte
	// cleanup chooses which clean-up users the webhooks exempt.
	cleanup = &cleanupSwitch{handlers: map[string]map[string]http.Handler{}, registered: map[string]bool{}}
)

func TestMain(m *testing.M) {
	// Refusals are asserted, not logged: the operator's log goes to
	// CLEANUP_LOG if set (a file), else nowhere.
	logOut := io.Discard
	if p := os.Getenv("CLEANUP_LOG"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		logOut = f
	}
	os.Exit(testenv.Run(m, testenv.Input{Root: "../..", CRDs: true, Webhooks: true, Namespace: operatorNamespace, Log: logOut, Setup: setup}))
}

func setup(ctx context.Context, c *testenv.Cluster) error {
	suiteCtx, cluster, admin = ctx, c, c.Admin
	var err error
	if users, userConfigs, err = c.Clients(ctx, "cleanup-client", "kubefence:clients", []rbacv1.PolicyRule{
		{APIGroups: []string{coordv1alpha1.GroupVersion.Group}, Resources: []string{"fencedleases"},
			Verbs: []string{"get", "list", "watch", "update", "patch", "create"}},
		{APIGroups: []string{"example.kubefence.io"}, Resources: []string{"widgets"}, Verbs: devenv.AllVerbs},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: devenv.AllVerbs},
	}, "alice", "bob"); err != nil {
		return err
	}
	if kcmKubeconfig, err = kcmIdentity(ctx, c, "cleanup-kcm-admin"); err != nil {
		return err
	}

	// The webhooks, wired as the operator wires them (operator.Setup), twice:
	// with the default clean-up users and with kcmUser added. The variant
	// servers share one real webhook server; cleanup.use picks whose handlers
	// answer.
	cleanup.use(variantDefault)
	var kcmErr error
	whMgr, err := cluster.ServeOperator(suiteCtx, cluster.Webhooks(), func(_ *rest.Config, opts *ctrl.Options) {
		real := opts.WebhookServer
		// Never started: only its handlers are used, served by real.
		kcmOpts := *opts
		kcmOpts.WebhookServer = &variantServer{Server: real, sw: cleanup, variant: variantKCM, mux: http.NewServeMux()}
		kcmMgr, err := ctrl.NewManager(cluster.Config, kcmOpts)
		if err != nil {
			kcmErr = err
			return
		}
		kcmCleanup := cluster.Webhooks()
		kcmCleanup.CleanupUsers = append(append([]string(nil), fencing.DefaultCleanupUsers...), kcmUser)
		kcmErr = operator.Setup(kcmMgr, kcmCleanup)
		opts.WebhookServer = &variantServer{Server: real, sw: cleanup, variant: variantDefault, mux: http.NewServeMux()}
	})
	if err = errors.Join(kcmErr, err); err != nil {
		return err
	}
	ctrlMgr, err := c.StartController(ctx, c.Operator(), nil)
	if err != nil {
		return err
	}
	exitOnError("webhook manager", whMgr)
	exitOnError("controller manager", ctrlMgr)
	return nil
}

// kcmIdentity makes kube-controller-manager's own identity (kcmUser)
// cluster-admin on c, by the ClusterRoleBinding binding (what it needs
// without --use-service-account-credentials: its controllers act as it), and
// returns a kubeconfig acting as it.
func kcmIdentity(ctx context.Context, c *testenv.Cluster, binding string) ([]byte, error) {
	if err := c.Admin.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: binding},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: kcmUser}},
	}); err != nil {
		return nil, err
	}
	u, err := c.Env.AddUser(envtest.User{Name: kcmUser}, nil)
	if err != nil {
		return nil, err
	}
	return u.KubeConfig()
}

// exitOnError ends the test binary if m's Start fails while the tests run.
func exitOnError(name string, m *testenv.Manager) {
	go func() {
		<-m.Done()
		if err := m.Err(); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
			os.Exit(1)
		}
	}()
}

// cleanupSwitch serves each webhook path with the handler of the current
// variant: the same operator wiring with different clean-up users.
type cleanupSwitch struct {
	mu         sync.Mutex
	handlers   map[string]map[string]http.Handler // variant -> path -> handler
	registered map[string]bool
	current    atomic.Value // string
}

func (s *cleanupSwitch) use(variant string) { s.current.Store(variant) }

func (s *cleanupSwitch) add(real webhook.Server, variant, path string, h http.Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.handlers[variant] == nil {
		s.handlers[variant] = map[string]http.Handler{}
	}
	s.handlers[variant][path] = h
	if s.registered[path] {
		return
	}
	s.registered[path] = true
	real.Register(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		h := s.handlers[s.current.Load().(string)][path]
		s.mu.Unlock()
		if h == nil {
			http.Error(w, "no handler for "+path, http.StatusInternalServerError)
			return
		}
		h.ServeHTTP(w, r)
	}))
}

// variantServer registers its handlers as one variant of cleanup. Its mux is
// its own (controller-runtime's builder skips paths the mux already serves).
type variantServer struct {
	webhook.Server
	sw      *cleanupSwitch
	variant string
	mux     *http.ServeMux
}

func (v *variantServer) Register(path string, h http.Handler) {
	v.mux.Handle(path, h)
	v.sw.add(v.Server, v.variant, path, h)
}

func (v *variantServer) WebhookMux() *http.ServeMux { return v.mux }
