// Package tenure_test proves the fencing promise for every way a tenure ends
// (expiry, release, operator release and hand-over, delete-then-recreate) and
// every write path, against a real kube-apiserver and etcd. Its webhook
// manager's informer cache can be frozen, its webhook answers can be
// delayed after the decision, and its live lease reads can be held after
// the API server answered them, so that neither a lagging cache, nor the
// time from admission to commit, nor a slow decision can let an old token in
// (docs/design.md).
package tenure_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/hack/devenv"
	"github.com/kubefence/kubefence/test/testenv"
	"github.com/kubefence/kubefence/test/testenv/fault"
	"github.com/kubefence/kubefence/test/testenv/specs"
)

const operatorNamespace = "kubefence-system"

var (
	// cluster is the control plane (cluster.Admin its admin's client).
	cluster  *testenv.Cluster
	suiteCtx context.Context
	users    map[string]client.WithWatch
	// freeze holds the webhook manager's FencedLease watch: its informer
	// cache then shows the leases as they were.
	freeze = &watchFreezer{}
	// answerDelay delays every fencing webhook answer after the decision.
	answerDelay atomic.Int64
	// slowReads holds the fencing webhook's live lease reads in one
	// namespace after the API server answered them.
	slowReads = &readDelay{}
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, testenv.Input{Root: "../..", CRDs: true, Webhooks: true, Namespace: operatorNamespace, Log: GinkgoWriter, Setup: setup}))
}

func TestTenure(t *testing.T) {
	defer freeze.set(false) // the webhook manager's watch must end with the suite
	specs.Run(t, "Every way a tenure ends, every write path (real kube-apiserver + etcd)", 15*time.Second)
}

// setup gives group kubefence:clients what fencedlease-candidate-role gives
// a lease client (its heartbeat Leases included, the heartbeat policy
// installed), plus full rights on the guarded objects of the tests
// (Widgets, Pods, Deployments, evictions), so that only fencing refuses; and
// runs the operator's webhooks on a manager whose FencedLease watch can be
// frozen and whose answers can be delayed, and its reconciler.
func setup(ctx context.Context, c *testenv.Cluster) error {
	suiteCtx, cluster = ctx, c
	// Heartbeat renewals (testenv.Renewals) need the heartbeat policy as
	// shipped and the candidate role's rule on Leases.
	if err := devenv.ApplyHeartbeatPolicy(ctx, c.Admin, filepath.Join("..", "..")); err != nil {
		return err
	}
	var err error
	if users, _, err = c.Clients(ctx, "tenure-client", "kubefence:clients", []rbacv1.PolicyRule{
		{APIGroups: []string{coordv1alpha1.GroupVersion.Group}, Resources: []string{"fencedleases"},
			Verbs: []string{"get", "list", "watch", "update", "patch", "create", "delete"}},
		devenv.HeartbeatRule,
		devenv.WidgetRule,
		{APIGroups: []string{""}, Resources: []string{"pods", "pods/status", "pods/eviction", "configmaps"}, Verbs: devenv.AllVerbs},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments", "deployments/status"}, Verbs: devenv.AllVerbs},
	}, "alice", "bob", "mallory"); err != nil {
		return err
	}
	// An operator: a lease admin (system:masters is the default admin group),
	// not a controller user.
	if users["operator"], _, err = c.User("operator", "system:masters"); err != nil {
		return err
	}

	whMgr, err := c.ServeOperator(ctx, c.Webhooks(), func(cfg *rest.Config, opts *ctrl.Options) {
		cfg.Wrap(freeze.wrap)
		cfg.Wrap(slowReads.wrap)
		opts.WebhookServer = &delayingServer{Server: opts.WebhookServer}
	})
	if err != nil {
		return err
	}
	// The manager reads FencedLeases through its cache: start that informer.
	if !whMgr.GetCache().WaitForCacheSync(ctx) {
		return errors.New("the webhook manager's cache did not sync")
	}
	var l coordv1alpha1.FencedLeaseList
	if err := whMgr.GetClient().List(ctx, &l); err != nil {
		return err
	}

	_, err = c.StartController(ctx, c.Operator(), nil)
	return err
}

// watchFreezer holds the bodies of FencedLease watch responses while frozen.
type watchFreezer struct {
	mu     sync.Mutex
	frozen bool
	thaw   chan struct{}
}

func (f *watchFreezer) set(frozen bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if frozen && !f.frozen {
		f.thaw = make(chan struct{})
	}
	if !frozen && f.frozen {
		close(f.thaw)
	}
	f.frozen = frozen
}

func (f *watchFreezer) gate() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.frozen {
		return nil
	}
	return f.thaw
}

func (f *watchFreezer) wrap(rt http.RoundTripper) http.RoundTripper {
	return fault.RoundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err == nil && req.URL.Query().Get("watch") == "true" && strings.Contains(req.URL.Path, "/fencedleases") {
			resp.Body = &frozenBody{ReadCloser: resp.Body, f: f}
		}
		return resp, err
	})
}

type frozenBody struct {
	io.ReadCloser
	f *watchFreezer
}

func (b *frozenBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if g := b.f.gate(); g != nil {
		<-g // hold what was read until thawed
	}
	return n, err
}

// delayingServer delays every fencing webhook answer by answerDelay after the
// handler decided: the time from admission to commit grows by that much.
type delayingServer struct{ webhook.Server }

func (s *delayingServer) Register(path string, h http.Handler) {
	if !strings.HasPrefix(path, "/fence-") {
		s.Server.Register(path, h)
		return
	}
	s.Server.Register(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		time.Sleep(time.Duration(answerDelay.Load()))
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = io.Copy(w, bytes.NewReader(rec.Body.Bytes()))
	}))
}

// readDelay holds the answers to the webhook manager's GETs of FencedLeases
// in one namespace (the fencing webhook's live lease reads: its cache only
// lists and watches) for a while after they arrived: a read linearised at
// once, whose decision ends late.
type readDelay struct {
	mu        sync.Mutex
	namespace string
	delay     time.Duration
}

// set holds the reads in namespace ns by d ("", 0: none).
func (r *readDelay) set(ns string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.namespace, r.delay = ns, d
}

func (r *readDelay) of(req *http.Request) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.delay == 0 || req.Method != http.MethodGet || req.URL.Query().Get("watch") == "true" ||
		!strings.Contains(req.URL.Path, "/namespaces/"+r.namespace+"/fencedleases/") {
		return 0
	}
	return r.delay
}

func (r *readDelay) wrap(rt http.RoundTripper) http.RoundTripper {
	return fault.RoundTripperFunc(func(req *http.Request) (*http.Response, error) {
		d := r.of(req)
		resp, err := rt.RoundTrip(req)
		time.Sleep(d)
		return resp, err
	})
}
