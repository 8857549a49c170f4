package manager

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	crmanager "sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence"
)

type leaderRunnable bool

func (leaderRunnable) Start(context.Context) error { return nil }
func (r leaderRunnable) NeedLeaderElection() bool  { return bool(r) }

type cacheRunnable struct{ cache.Cache }

func (cacheRunnable) Start(context.Context) error { return nil }
func (c cacheRunnable) GetCache() cache.Cache     { return c.Cache }

func TestNeedsLeaderElection(t *testing.T) {
	tests := []struct {
		name string
		r    crmanager.Runnable
		want bool
	}{
		{"a plain runnable, as in controller-runtime", crmanager.RunnableFunc(func(context.Context) error { return nil }), true},
		{"a runnable that needs leader election", leaderRunnable(true), true},
		{"a runnable that does not", leaderRunnable(false), false},
		{"a cache", cacheRunnable{}, false},
		{"a webhook server", webhook.NewServer(webhook.Options{}), false},
		{"an HTTP server", &crmanager.Server{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := needsLeaderElection(tt.r); got != tt.want {
				t.Errorf("needsLeaderElection() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestNewRefusesControllerRuntimeLeaderElection(t *testing.T) {
	if _, err := New(&rest.Config{}, ctrl.Options{LeaderElection: true}, LeaseOptions{Namespace: "ns", Name: "l", Identity: "a"}); err == nil {
		t.Fatal("New accepted ctrl.Options.LeaderElection=true alongside a FencedLease")
	}
}

// The fenced client fences writes in the lease's own namespace only: an
// object in another namespace, or a cluster-scoped one, is refused locally
// (fence.ErrUnfenceable) before anything is sent, instead of being stamped
// with a token no lease would check.
func TestFencedClientOnlyInTheLeaseNamespace(t *testing.T) {
	m, err := New(&rest.Config{Host: "https://127.0.0.1:1"}, ctrl.Options{Metrics: metricsserver.Options{BindAddress: "0"}},
		LeaseOptions{Namespace: "team-a", Name: "widgets", Identity: "a", User: "a"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for what, obj := range map[string]client.Object{
		"another namespace": &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "cm"}},
		"cluster-scoped":    &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "cr"}},
	} {
		if err := m.GetFencedClient().Create(ctx, obj); !errors.Is(err, fence.ErrUnfenceable) {
			t.Errorf("%s: %v, want fence.ErrUnfenceable", what, err)
		}
	}
}

// New wires the elector's Ready as the readiness check fencedlease: a
// manager whose FencedLease does not exist is not ready, and /readyz says
// why ("lease never seen: not-found").
func TestReadyzSaysLeaseNeverSeen(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	s := runtime.NewScheme()
	if err := coordv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	m, err := New(&rest.Config{Host: "https://127.0.0.1:1"},
		ctrl.Options{Scheme: s, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: addr},
		LeaseOptions{Namespace: "team-a", Name: "widgets", Identity: "a", User: "a", Client: fake.NewClientBuilder().WithScheme(s).Build()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Logf("Start: %v", err)
		}
	}()
	var body string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/readyz/fencedlease")
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		body = string(b)
		if resp.StatusCode == http.StatusOK {
			t.Fatalf("/readyz/fencedlease is OK without a lease: %q", body)
		}
		if strings.Contains(body, "lease never seen: not-found") {
			return
		}
	}
	t.Fatalf("/readyz/fencedlease said %q, want lease never seen: not-found", body)
}
