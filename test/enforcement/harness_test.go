// Package enforcement_test runs one fencing table, every write path on
// built-in kinds and custom resources, against a real kube-apiserver in both
// enforcement modes: the fencing webhook (--enforcement=webhook) and the
// ValidatingAdmissionPolicy with its tenure tables (--enforcement=policy).
// Policy mode's own claims (the table is the controller's alone, a policy
// refusal is recognised by fence.IsStale, the operator may be down) are
// proven here too.
package enforcement_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/controllers/policy"
	"github.com/kubefence/kubefence/controllers/webhooks/fencing"
	"github.com/kubefence/kubefence/pkg/fence"
	"github.com/kubefence/kubefence/test/ruletable"
	"github.com/kubefence/kubefence/test/testenv"
)

const (
	root              = "../.."
	operatorNamespace = "kubefence-system"
)

// harness is one control plane with the operator in one enforcement mode.
type harness struct {
	mode string
	env  *envtest.Environment
	cfg  *rest.Config
	// cluster is the control plane; two is it if it has two API servers
	// (startTwo), else nil.
	cluster, two *testenv.Cluster
	admin        client.WithWatch
	users        map[string]client.WithWatch
	// userCfgs are the users' configurations, addressing the first server.
	userCfgs map[string]*rest.Config
	scheme   *runtime.Scheme
	ctx      context.Context
	ns       atomic.Int32
	// stopOperator stops the operator's manager (reconciler and webhooks).
	stopOperator func()
	// adminUser is the test's admin, a controller user of the operator.
	adminUser string
}

func start(t *testing.T, mode string) *harness {
	t.Helper()
	return startOn(t, mode, false)
}

// startTwo is start on two kube-apiservers (testenv.Input.TwoAPIServers);
// the operator and the clients address the first.
func startTwo(t *testing.T, mode string) *harness {
	t.Helper()
	return startOn(t, mode, true)
}

func startOn(t *testing.T, mode string, two bool) *harness {
	t.Helper()
	testenv.SkipIfShort(t)
	logf.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapLevel())))
	in := testenv.Input{Root: root, CRDs: true, Webhooks: true, Policy: mode == operator.EnforcementPolicy, TwoAPIServers: two, Namespace: operatorNamespace}
	c, err := testenv.Start(context.Background(), in)
	must(t, err)
	t.Cleanup(func() { _ = c.Stop() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	h := &harness{mode: mode, users: map[string]client.WithWatch{}, userCfgs: map[string]*rest.Config{}, ctx: ctx,
		cluster: c, env: c.Env, cfg: c.Config, scheme: c.Scheme, admin: c.Admin, adminUser: c.AdminUser}
	if two {
		h.two = c
	}
	h.grantRoles(t)
	for _, name := range []string{"alice", "bob", "mallory"} {
		h.users[name] = h.user(t, name)
	}
	h.runOperator(t, h.options())
	if mode == operator.EnforcementPolicy {
		testenv.Within(t, 20*time.Second, "the policies are applied", func() error {
			return h.admin.Get(ctx, client.ObjectKey{Name: policy.GuardedBindingName}, &admissionv1.ValidatingAdmissionPolicyBinding{})
		})
	}
	return h
}

// options are the operator's options in the harness's mode.
func (h *harness) options() operator.Options {
	o := h.cluster.Operator()
	o.Enforcement = h.mode
	if h.mode == operator.EnforcementPolicy {
		o.RequiredKinds = ruletable.RequiredKinds // the example kind, as the fencing webhook configuration lists it
	}
	return o
}

// runOperator starts an operator process (a manager: reconciler and
// webhooks) with o; h.stopOperator stops it.
func (h *harness) runOperator(t *testing.T, o operator.Options) {
	t.Helper()
	m, err := h.cluster.ServeOperator(h.ctx, o, nil)
	must(t, err)
	var once sync.Once
	h.stopOperator = func() {
		once.Do(func() {
			if err := m.Stop(30 * time.Second); err != nil {
				t.Errorf("operator manager: %v", err)
			}
		})
	}
	t.Cleanup(h.stopOperator)
}

func zapLevel() zapcore.Level {
	if os.Getenv("ENFORCEMENT_DEBUG") != "" {
		return -1
	}
	return 2
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (h *harness) user(t *testing.T, name string) client.WithWatch {
	t.Helper()
	c, cfg, err := h.cluster.User(name, "kubefence:clients")
	must(t, err)
	h.userCfgs[name] = cfg
	return c
}

// grantRoles gives group kubefence:clients a lease client's rights and full
// rights on the guarded objects of the tests, so that only fencing refuses.
func (h *harness) grantRoles(t *testing.T) {
	t.Helper()
	all := []string{"get", "list", "watch", "create", "update", "patch", "delete"}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "enforcement-client"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{coordv1alpha1.GroupVersion.Group}, Resources: []string{"fencedleases"}, Verbs: all},
			{APIGroups: []string{"example.kubefence.io"}, Resources: []string{"widgets", "widgets/status", "widgets/scale", "clusterwidgets", "clusterwidgets/status"}, Verbs: all},
			{APIGroups: []string{""}, Resources: []string{"configmaps", "pods", "pods/status", "pods/eviction", "pods/ephemeralcontainers"}, Verbs: all},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: all},
			{APIGroups: []string{"apps"}, Resources: []string{"deployments", "deployments/status"}, Verbs: all},
		},
	}
	must(t, h.admin.Create(h.ctx, role))
	must(t, h.admin.Create(h.ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "enforcement-client"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, Name: "kubefence:clients"}},
	}))
}

// namespace creates a namespace with labels; nil labels mean
// kubefence.io/fencing=enabled, the label that puts pod evictions in scope
// and lets pods be guarded there (the pod-scope entry refuses guarded pods
// elsewhere). An empty map creates an unlabelled namespace.
func (h *harness) namespace(t *testing.T, labels map[string]string) string {
	t.Helper()
	if labels == nil {
		labels = map[string]string{coordv1alpha1.FencingNamespaceLabel: fencing.FencingEnabledValue}
	}
	name := fmt.Sprintf("%s-%d", h.mode, h.ns.Add(1))
	must(t, h.admin.Create(h.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}))
	return name
}

func (h *harness) lease(t *testing.T, ns, name string, seconds int32) {
	t.Helper()
	must(t, h.admin.Create(h.ctx, &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: seconds}}))
}

// elector runs user's pkg/fence Elector for ns/lease until stop; it returns
// once user leads, with its token.
type elector struct {
	el   *fence.Elector
	stop func()
}

func (h *harness) lead(t *testing.T, user, ns, lease string) (*elector, int64) {
	t.Helper()
	e := h.elect(t, user, ns, lease)
	return e, h.leads(t, e, 30*time.Second, user+" leads "+ns+"/"+lease)
}

// leads waits up to timeout until e leads and returns its token.
func (h *harness) leads(t *testing.T, e *elector, timeout time.Duration, what string) int64 {
	t.Helper()
	var token int64
	testenv.Within(t, timeout, what, func() error {
		tok, ok := e.el.Token()
		if !ok {
			return fmt.Errorf("not leading")
		}
		token = tok
		return nil
	})
	return token
}

// elect starts user's Elector for ns/lease without waiting for it to lead.
func (h *harness) elect(t *testing.T, user, ns, lease string) *elector {
	t.Helper()
	return h.electAs(t, h.users[user], user, user, ns, lease)
}

// electAs starts an Elector for ns/lease with client c, as identity of
// user, without waiting for it to lead.
func (h *harness) electAs(t *testing.T, c client.WithWatch, identity, user, ns, lease string) *elector {
	t.Helper()
	el, err := fence.New(fence.Config{Client: c, Namespace: ns, Name: lease, Identity: identity, User: user,
		Callbacks: fence.Callbacks{OnStartedLeading: func(ctx context.Context, _ int64) { <-ctx.Done() }}})
	must(t, err)
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = el.Run(ctx) }()
	e := &elector{el: el, stop: func() { cancel(); <-done }}
	t.Cleanup(e.stop)
	return e
}
