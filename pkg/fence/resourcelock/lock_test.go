package resourcelock

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	rl "k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence/protocol"
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

// heldLock is a Lock of identity a holding jobs/job with token 42 (its own
// request), on a fake
// API server whose guarded creates block until the test answers them
// (answer), and which records what is sent: "create sent", "create
// returned", "renew", "withdraw".
func heldLock(t *testing.T, clk clock.Clock, answer <-chan error, ev *events) *Lock {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := coordv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	lease := &coordv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "jobs", Name: "job"},
		Spec: coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: 30,
			Requests: []coordv1alpha1.LeaseRequest{{HolderIdentity: "a", User: "a", RenewSequence: 1}}},
		Status: coordv1alpha1.FencedLeaseStatus{HolderIdentity: "a", FencingToken: 42, LeaseDurationSeconds: 30},
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(lease).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			ev.add("create sent")
			err := <-answer
			ev.add("create returned")
			return err
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			if _, ok := obj.(*coordv1alpha1.FencedLease); ok {
				data, _ := p.Data(obj)
				if strings.Contains(string(data), `"op":"remove"`) {
					ev.add("withdraw")
				} else {
					ev.add("renew")
				}
			}
			return c.Patch(ctx, obj, p, opts...)
		},
	}).Build()
	l, err := New(Config{Client: c, Namespace: "jobs", Name: "job", Identity: "a", User: "a", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Get(context.Background()); err != nil {
		t.Fatal(err)
	}
	l.own.Appended(lease.Spec.Requests[0]) // its own, as its acknowledgement left it
	l.token, l.deadline = 42, clk.Now().Add(time.Minute)
	return l
}

// events is what a test's client was asked to send, in order.
type events struct {
	mu   sync.Mutex
	list []string
}

func (e *events) add(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, s)
}

func (e *events) get() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.list)
}

// A release (Update with an empty record: client-go's ReleaseOnCancel)
// withdraws the request only after the writes of lock.Client in flight
// returned: the controller grants the next request at once (2026-12-01
// review, finding 4b). After one that returned without an answer (it may
// still be admitted and commit) it keeps the request, and renews it no more:
// the tenure expires (fence.Writes.Quiesce). Fails when the Lock withdraws
// without waiting (the withdraw is then sent while the create is blocked), or
// withdraws after a create without an answer.
func TestReleaseWaitsForTheWritesInFlight(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer error
		keep   bool
	}{
		{"answered", nil, false},
		{"no answer", context.DeadlineExceeded, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Now())
			answer := make(chan error)
			ev := &events{}
			l := heldLock(t, clk, answer, ev)
			created := make(chan error, 1)
			go func() {
				created <- l.Client(l.cfg.Client).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "jobs", Name: "x"}})
			}()
			for !slices.Contains(ev.get(), "create sent") {
				time.Sleep(time.Millisecond)
			}
			released := make(chan error, 1)
			go func() { released <- l.Update(context.Background(), rl.LeaderElectionRecord{}) }()
			time.Sleep(200 * time.Millisecond)
			if got := ev.get(); slices.Contains(got, "withdraw") {
				answer <- tc.answer
				t.Fatalf("sent %v: the request was withdrawn while a token-42 create was in flight", got)
			}
			if _, ok := l.Token(); ok {
				t.Error("the Lock still hands out its token while it releases")
			}
			answer <- tc.answer
			if err := <-created; !errors.Is(err, tc.answer) {
				t.Fatalf("create: %v, want %v", err, tc.answer)
			}
			select {
			case err := <-released:
				if err != nil {
					t.Fatalf("release: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the release did not return")
			}
			want := []string{"create sent", "create returned", "withdraw"}
			if tc.keep {
				// The elector runs again: the kept request is not renewed.
				if err := l.Update(context.Background(), rl.LeaderElectionRecord{HolderIdentity: "a"}); !errors.Is(err, ErrNotGranted) {
					t.Errorf("renewing after a release that kept the request: %v, want ErrNotGranted", err)
				}
				want = want[:2]
			}
			if got := ev.get(); !slices.Equal(got, want) {
				t.Fatalf("sent %v, want %v", got, want)
			}
		})
	}
}

// A Lock renews, leads and withdraws only its own request: not one of its
// identity another process made (a fresh Lock finding it), nor its own once
// another process renewed it (2026-12-01 review, finding 13).
func TestLockLeadsOnlyItsOwnRequest(t *testing.T) {
	ctx := context.Background()
	leader := rl.LeaderElectionRecord{HolderIdentity: "a"}

	ev := &events{}
	fresh := heldLock(t, clocktesting.NewFakeClock(time.Now()), nil, ev)
	fresh.own.Disown()
	fresh.token = 0
	if err := fresh.Update(ctx, leader); !errors.Is(err, ErrNotGranted) || !errors.Is(err, protocol.ErrNotOwnRequest) {
		t.Fatalf("a fresh Lock renewing a request of its identity it did not make: %v, want ErrNotGranted and ErrNotOwnRequest", err)
	}
	if _, ok := fresh.Token(); ok {
		t.Fatal("a fresh Lock leads a tenure of its identity it did not acquire")
	}
	if err := fresh.Update(ctx, rl.LeaderElectionRecord{}); err != nil {
		t.Fatal(err)
	}
	if got := ev.get(); len(got) != 0 {
		t.Fatalf("a fresh Lock sent %v, want nothing", got)
	}

	ev = &events{}
	l := heldLock(t, clocktesting.NewFakeClock(time.Now()), nil, ev)
	if err := l.Update(ctx, leader); err != nil {
		t.Fatalf("renewing its own request: %v", err)
	}
	if tok, ok := l.Token(); !ok || tok != 42 {
		t.Fatalf("Token() = %d, %v after renewing its own request; want 42, true", tok, ok)
	}
	// Another process with identity a renews the request.
	var lease coordv1alpha1.FencedLease
	if err := l.cfg.Client.Get(ctx, l.key, &lease); err != nil {
		t.Fatal(err)
	}
	p, err := protocol.RenewPatch(&lease, "a", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.cfg.Client.Patch(ctx, &lease, p); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Get(ctx); err != nil { // client-go's elector reads before each try
		t.Fatal(err)
	}
	if _, ok := l.Token(); ok {
		t.Fatal("the Lock still leads after another process renewed its request")
	}
	if err := l.Update(ctx, leader); !errors.Is(err, protocol.ErrNotOwnRequest) {
		t.Fatalf("renewing a request another process renewed: %v, want ErrNotOwnRequest", err)
	}
	if err := l.Update(ctx, rl.LeaderElectionRecord{}); err != nil {
		t.Fatal(err)
	}
	if got, want := ev.get(), []string{"renew", "renew"}; !slices.Equal(got, want) {
		t.Fatalf("sent %v, want %v (its renewal, the other process's; no withdraw)", got, want)
	}
}
