package fence

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// events is what a test's client was asked to send, or what a test's logger
// logged, in order.
type events struct {
	mu   sync.Mutex
	list []string
}

func (e *events) add(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, s)
}

// log is a funcr sink: it adds each line's key-value pairs.
func (e *events) log(_, args string) { e.add(args) }

func (e *events) get() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.list)
}

// writeEnds are the ways a guarded write can end, each with whether the
// release after it keeps the request (keep): after an answer it may withdraw;
// after none (the client gave up, or the server timed out) the API server may
// still admit the write, so the tenure is left to expire.
var writeEnds = []struct {
	name   string
	answer error
	keep   bool
}{
	{"answered", nil, false},
	{"refused (an answer)", apierrors.NewConflict(corev1.Resource("configmaps"), "x", errors.New("modified")), false},
	{"given up (no answer)", context.DeadlineExceeded, true},
	{"server timeout", apierrors.NewTimeoutError("slow", 1), true},
}

// heldLease is lease jobs/job held by identity a with token 42.
func heldLease() *coordv1alpha1.FencedLease {
	return &coordv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "jobs", Name: "job"},
		Spec: coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: 30,
			Requests: []coordv1alpha1.LeaseRequest{{HolderIdentity: "a", User: "a", RenewSequence: 1}}},
		Status: coordv1alpha1.FencedLeaseStatus{HolderIdentity: "a", FencingToken: 42, LeaseDurationSeconds: 30},
	}
}

// recordingClient is a fake API server holding heldLease, whose client
// records each guarded create ("write token N") and each lease patch
// ("withdraw").
func recordingClient(t *testing.T, ev *events) client.WithWatch {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := coordv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(heldLease()).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			ev.add("write token " + obj.GetAnnotations()[coordv1alpha1.FencingTokenAnnotation])
			return c.Create(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			if _, ok := obj.(*coordv1alpha1.FencedLease); ok {
				ev.add("withdraw")
			}
			return c.Patch(ctx, obj, p, opts...)
		},
	}).Build()
}

// leadingElector is an Elector of identity a that leads jobs/job with token
// 42 and has seen the lease, its own request as its acknowledgement left it,
// as lead leaves it.
func leadingElector(t *testing.T, c client.WithWatch) *Elector {
	t.Helper()
	e, err := New(Config{Client: c, Namespace: "jobs", Name: "job", Identity: "a", User: "a",
		Callbacks: Callbacks{OnStartedLeading: func(context.Context, int64) {}}})
	if err != nil {
		t.Fatal(err)
	}
	lease := heldLease()
	e.view.offer(lease)
	e.own.Appended(lease.Spec.Requests[0])
	e.setLeading(true, 42, time.Now().Add(time.Minute))
	return e
}

// releasingAtTokenCheck is an Elector whose Token, the first time a write
// reads it, sets off the end of the tenure as lead's release runs it (stop
// leading, then withdraw, which waits for the writes in flight) on another
// goroutine, and gives it 200 ms before it answers: a writer preempted right
// after it read the token, while the holder releases.
type releasingAtTokenCheck struct {
	*Elector
	once     sync.Once
	released chan error
}

func (s *releasingAtTokenCheck) Token() (int64, bool) {
	t, ok := s.Elector.Token()
	s.once.Do(func() {
		go func() {
			s.setLeading(false, 0, time.Time{})
			s.released <- s.withdraw(context.Background())
		}()
		select {
		case err := <-s.released:
			s.released <- err
		case <-time.After(200 * time.Millisecond):
		}
	})
	return t, ok
}

// A write is either counted in flight before the release looks for writes,
// so the withdraw waits for it, or refused: never sent with the token after
// the withdraw, while the next holder may already be granted (2026-12-01
// review, finding 4a). Fails when the FencedClient reads the token and counts
// the write in two steps: the withdraw is then sent first.
func TestReleaseWaitsForAWriteThatTookTheTokenBeforeIt(t *testing.T) {
	ev := &events{}
	c := recordingClient(t, ev)
	src := &releasingAtTokenCheck{Elector: leadingElector(t, c), released: make(chan error, 1)}
	err := NewFencedClient(c, "job", src).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "jobs", Name: "x"}})
	select {
	case werr := <-src.released:
		if werr != nil {
			t.Fatalf("withdraw: %v", werr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the release did not finish")
	}
	got := ev.get()
	switch {
	case err == nil && slices.Equal(got, []string{"write token 42", "withdraw"}):
		// counted, and waited for
	case errors.Is(err, ErrNotLeading) && slices.Equal(got, []string{"withdraw"}):
		// refused before anything was sent
	default:
		t.Fatalf("write error %v, sent %v; want the token-42 write sent before the withdraw, or refused with ErrNotLeading and never sent", err, got)
	}
}

// Once the tenure ended, a write is refused before it is sent, and the
// withdraw does not wait.
func TestWriteAfterTheTenureEndedIsRefused(t *testing.T) {
	ev := &events{}
	c := recordingClient(t, ev)
	e := leadingElector(t, c)
	e.setLeading(false, 0, time.Time{})
	fc := e.Client(c)
	if err := fc.Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "jobs", Name: "x"}}); !errors.Is(err, ErrNotLeading) {
		t.Fatalf("create after the tenure ended: %v, want ErrNotLeading", err)
	}
	start := time.Now()
	if err := e.withdraw(context.Background()); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("withdraw took %v with no write in flight", took)
	}
	if got := ev.get(); !slices.Equal(got, []string{"withdraw"}) {
		t.Fatalf("sent %v, want only the withdraw", got)
	}
}

// Quiesce waits for the writes in flight, and lets the release withdraw the
// request of a tenure unless a write with its token ended without an answer
// or is still in flight when it stops waiting: then the tenure must expire.
func TestQuiesceWaitsForWritesAndKeepsATenureAWriteMayStillCommitIn(t *testing.T) {
	quiesce := func(w *Writes, clk *clocktesting.FakeClock, token int64) <-chan bool {
		done := make(chan bool, 1)
		go func() { done <- w.Quiesce(context.Background(), clk, time.Minute, token) }()
		for !clk.HasWaiters() { // Quiesce waits on its timer
			time.Sleep(time.Millisecond)
		}
		return done
	}
	returned := func(done <-chan bool, within time.Duration) (withdraw, ok bool) {
		select {
		case withdraw := <-done:
			return withdraw, true
		case <-time.After(within):
			return false, false
		}
	}

	t.Run("a write in flight", func(t *testing.T) {
		clk := clocktesting.NewFakeClock(time.Now())
		var w Writes
		_, end, err := w.Begin(fixedToken{42, true})
		if err != nil {
			t.Fatal(err)
		}
		done := quiesce(&w, clk, 42)
		if _, ok := returned(done, 50*time.Millisecond); ok {
			t.Fatal("Quiesce returned with a write in flight")
		}
		end(nil)
		if withdraw, ok := returned(done, 5*time.Second); !ok || !withdraw {
			t.Fatalf("Quiesce once the write was answered: returned %v, withdraw %v; want the withdraw at once", ok, withdraw)
		}
	})
	t.Run("a write still in flight when it stops waiting", func(t *testing.T) {
		clk := clocktesting.NewFakeClock(time.Now())
		var w Writes
		if _, _, err := w.Begin(fixedToken{42, true}); err != nil {
			t.Fatal(err)
		}
		done := quiesce(&w, clk, 42)
		clk.Step(time.Minute)
		for range 100 { // at most 100 steps of a second: the former commit-lag wait
			if len(done) > 0 || !clk.HasWaiters() {
				break
			}
			time.Sleep(time.Millisecond)
			clk.Step(time.Second)
		}
		if withdraw, ok := returned(done, 5*time.Second); !ok || withdraw {
			t.Fatalf("Quiesce after its limit with a write in flight: returned %v, withdraw %v; want it to keep the request", ok, withdraw)
		}
	})
	for _, tc := range writeEnds {
		t.Run("a write that ended "+tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Now())
			var w Writes
			_, end, err := w.Begin(fixedToken{42, true})
			if err != nil {
				t.Fatal(err)
			}
			end(tc.answer)
			// Nothing in flight: each returns at once, without waiting on
			// clk (it is never stepped).
			now := func(token int64) bool {
				t.Helper()
				done := make(chan bool, 1)
				go func() { done <- w.Quiesce(context.Background(), clk, time.Minute, token) }()
				withdraw, ok := returned(done, 5*time.Second)
				if !ok {
					t.Fatalf("the release of token %d waits with no write in flight", token)
				}
				return withdraw
			}
			if got := now(42); got == tc.keep {
				t.Errorf("the release of token 42: withdraw %v, want %v", got, !tc.keep)
			}
			if got := now(42); got == tc.keep {
				t.Errorf("a second release of token 42 (Run's, on its way out): withdraw %v, want %v", got, !tc.keep)
			}
			// A later tenure, or a request that holds none, is withdrawn:
			// token 42's tenure did not end by a withdraw.
			if !now(43) || !now(0) {
				t.Error("the release of token 43, or of a request without a tenure, may not withdraw")
			}
		})
	}
	t.Run("no token", func(t *testing.T) {
		var w Writes
		if _, _, err := w.Begin(fixedToken{}); !errors.Is(err, ErrNotLeading) {
			t.Fatalf("Begin without a token: %v, want ErrNotLeading", err)
		}
		// nothing counted: returns at once
		if !w.Quiesce(context.Background(), clocktesting.NewFakeClock(time.Now()), time.Minute, 42) {
			t.Error("the release may not withdraw, with no write sent")
		}
	})
}

// A release after a write whose answer its client gave up on keeps the
// request: the API server may still admit that write again (a conflict in
// its compare-and-swap re-runs admission, with a live lease read that still
// shows the tenure; a request held in the network arrives late), later than
// any wait counted from the give-up, so the tenure is left to expire and the
// expiry's cut-off covers it (docs/design.md, "How each way a tenure ends
// keeps the promise", release). Run's own withdraw on its way out keeps it
// too. Fails when the release withdraws after waiting the commit lag: the
// withdraw is then sent (the explorer's trace:
// TestAWriteAdmittedAgainAfterItsClientGaveUpCommitsBeforeTheGrant).
func TestReleaseAfterAWriteWithoutAnAnswerKeepsTheRequest(t *testing.T) {
	for _, tc := range writeEnds {
		t.Run(tc.name, func(t *testing.T) {
			ev := &events{}
			c := recordingClient(t, ev)
			e := leadingElector(t, c)
			fc := NewFencedClient(interceptor.NewClient(c, interceptor.Funcs{
				Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					ev.add("write token " + obj.GetAnnotations()[coordv1alpha1.FencingTokenAnnotation])
					return tc.answer
				},
			}), "job", e)
			if err := fc.Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "jobs", Name: "x"}}); !errors.Is(err, tc.answer) {
				t.Fatalf("create: %v, want %v", err, tc.answer)
			}
			// lead's release: stop leading, then withdraw; then Run's
			// withdraw as its context ends.
			e.setLeading(false, 0, time.Time{})
			for range 2 {
				if err := e.withdraw(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			want := []string{"write token 42", "withdraw"}
			if tc.keep {
				want = want[:1]
			}
			if got := ev.get(); !slices.Equal(got, want) {
				t.Fatalf("sent %v, want %v", got, want)
			}
		})
	}
}
