package resourcelock

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	rl "k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

func TestRecordOf(t *testing.T) {
	acquired := time.Date(2026, 1, 2, 3, 4, 5, 600000000, time.UTC)
	renewed := acquired.Add(7 * time.Second)
	micro := func(t time.Time) *metav1.MicroTime { m := metav1.NewMicroTime(t); return &m }
	tests := []struct {
		name  string
		lease coordv1alpha1.FencedLease
		want  rl.LeaderElectionRecord
	}{{
		name:  "unclaimed: the spec's duration, no holder",
		lease: coordv1alpha1.FencedLease{Spec: coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: 15}},
		want:  rl.LeaderElectionRecord{LeaseDurationSeconds: 15},
	}, {
		name: "held: the tenure's duration and the controller's times",
		lease: coordv1alpha1.FencedLease{
			Spec: coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: 30},
			Status: coordv1alpha1.FencedLeaseStatus{HolderIdentity: "a", FencingToken: 9, LeaseDurationSeconds: 15,
				AcquireTime: micro(acquired), RenewTime: micro(renewed), LeaseTransitions: 3},
		},
		want: rl.LeaderElectionRecord{HolderIdentity: "a", LeaseDurationSeconds: 15,
			AcquireTime: metav1.NewTime(acquired), RenewTime: metav1.NewTime(renewed), LeaderTransitions: 3},
	}, {
		name: "released: no holder, the next tenure's duration",
		lease: coordv1alpha1.FencedLease{
			Spec:   coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: 30},
			Status: coordv1alpha1.FencedLeaseStatus{FencingToken: 9, LeaseDurationSeconds: 15, LeaseTransitions: 3},
		},
		want: rl.LeaderElectionRecord{LeaseDurationSeconds: 30, LeaderTransitions: 3},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := RecordOf(&tt.lease); got != tt.want {
				t.Errorf("RecordOf() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestNewValidates(t *testing.T) {
	var c client.Client = struct{ client.Client }{}
	valid := Config{Client: c, Namespace: "ns", Name: "l", Identity: "pod-0"}
	if _, err := New(valid); err != nil {
		t.Fatalf("New(valid) = %v", err)
	}
	for name, mutate := range map[string]func(*Config){
		"no client":       func(c *Config) { c.Client = nil },
		"no name":         func(c *Config) { c.Name = "" },
		"upper identity":  func(c *Config) { c.Identity = "Pod-0" },
		"empty identity":  func(c *Config) { c.Identity = "" },
		"negative margin": func(c *Config) { c.SafetyMargin = -time.Second },
	} {
		cfg := valid
		mutate(&cfg)
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New succeeded, want an error", name)
		}
	}
}

func TestTokenNeedsGrantAndDeadline(t *testing.T) {
	l, err := New(Config{Client: struct{ client.Client }{}, Namespace: "ns", Name: "l", Identity: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Token(); ok {
		t.Fatal("a fresh Lock has a token")
	}
	l.token, l.deadline = 7, time.Now().Add(time.Minute)
	if tok, ok := l.Token(); !ok || tok != 7 {
		t.Fatalf("Token() = %d, %v; want 7, true", tok, ok)
	}
	l.seen(&coordv1alpha1.FencedLease{Status: coordv1alpha1.FencedLeaseStatus{HolderIdentity: "b", FencingToken: 8}})
	if _, ok := l.Token(); ok {
		t.Fatal("Token() still valid after the lease went to someone else")
	}
	l.token, l.deadline = 8, time.Now().Add(-time.Millisecond)
	if _, ok := l.Token(); ok {
		t.Fatal("Token() valid past the local deadline")
	}
	l.token, l.deadline = 8, time.Now().Add(time.Minute)
	l.stepDown()
	if _, ok := l.Token(); ok || l.refused != 8 {
		t.Fatalf("after stepDown: token valid %v, refused %d; want false, 8", ok, l.refused)
	}
}
