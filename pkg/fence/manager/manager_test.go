package manager

import (
	"context"
	"testing"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	crmanager "sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
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
