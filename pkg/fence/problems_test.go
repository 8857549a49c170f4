package fence

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// The reasons of kubefence_client_lease_errors_total, from the errors the API
// server and the transport return (the messages are kube-apiserver 1.37's).
func TestErrorReason(t *testing.T) {
	gr := leaseResource
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"conflict between candidates", apierrors.NewConflict(gr, "job", errors.New("the object has been modified")), ""},
		{"context cancelled", fmt.Errorf("queueing: %w", context.Canceled), ""},
		{"no lease", apierrors.NewNotFound(gr, "job"), ReasonNotFound},
		{"no CRD", &meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: gr.Group, Kind: "FencedLease"}}, ReasonNotFound},
		{"no RBAC", apierrors.NewForbidden(gr, "job", errors.New(`User "eve" cannot get resource "fencedleases"`)), ReasonForbidden},
		{"wrapped no RBAC", fmt.Errorf("queueing request for jobs/job: %w", apierrors.NewForbidden(gr, "job", errors.New("no"))), ReasonForbidden},
		{"webhook denial (a 403)", refusal(http.StatusForbidden, `admission webhook "fencedlease.kubefence.io" denied the request: spec.requests[0] names user "bob"`), ReasonRefused},
		{"admission policy denial", refusal(http.StatusUnprocessableEntity, `fencedleases.coordination.kubefence.io "job" is forbidden: ValidatingAdmissionPolicy 'kubefence-fencedlease' with binding 'kubefence-fencedlease' denied request: no`), ReasonRefused},
		{"webhook down", apierrors.NewInternalError(errors.New(`failed calling webhook "fencedlease.kubefence.io": failed to call webhook: Post "https://kubefence-webhook-service.kubefence-system.svc:443/validate": dial tcp 10.96.0.7:443: connect: connection refused`)), ReasonUnreachable},
		{"webhook timeout", refusal(http.StatusInternalServerError, `Internal error occurred: failed calling webhook "fencedlease.kubefence.io": context deadline exceeded`), ReasonUnreachable},
		{"API server unavailable", apierrors.NewServiceUnavailable("etcdserver: leader changed"), ReasonUnreachable},
		{"API server refuses connections", &url.Error{Op: "Get", URL: "https://10.96.0.1/apis", Err: syscall.ECONNREFUSED}, ReasonUnreachable},
		{"client timeout", fmt.Errorf("renewing: %w", context.DeadlineExceeded), ReasonUnreachable},
		{"bad request", apierrors.NewBadRequest("no"), ReasonOther},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ErrorReason(tc.err); got != tc.want {
				t.Fatalf("ErrorReason(%v) = %q, want %q", tc.err, got, tc.want)
			}
		})
	}
}

// A failure is logged with its reason the first time, at once when the reason
// changes, and then at most every problemLogEvery with the failures since the
// last line; every failure is counted; Ready fails with "lease never seen"
// and the reason until the lease is seen.
func TestProblemsLogCountAndReady(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	m, err := NewMetrics(prometheus.NewPedanticRegistry())
	if err != nil {
		t.Fatal(err)
	}
	m.init("jobs", "job")
	key := types.NamespacedName{Namespace: "jobs", Name: "job"}
	p := newProblems(key, clk, m, false)
	sink := &events{}
	p.setLogger(funcr.New(sink.log, funcr.Options{}))
	count := func(reason string) float64 {
		return testutil.ToFloat64(m.leaseErrors.WithLabelValues("jobs", "job", reason))
	}

	if err := p.ready(); err == nil || !strings.Contains(err.Error(), "lease never seen: not read yet") {
		t.Fatalf("ready() before any read = %v", err)
	}
	forbidden := apierrors.NewForbidden(leaseResource, "job", errors.New(`User "eve" cannot get resource "fencedleases"`))
	for range 3 {
		p.failed("read", forbidden)
		clk.Step(time.Second)
	}
	lines := sink.get()
	if len(lines) != 1 || !strings.Contains(lines[0], `"reason"="forbidden"`) || !strings.Contains(lines[0], "kubefence-fencedlease-candidate-role") {
		t.Fatalf("logged %q after 3 failures; want one line with reason forbidden and the RoleBinding hint", lines)
	}
	if got := count(ReasonForbidden); got != 3 {
		t.Fatalf("forbidden counted %v times, want 3", got)
	}
	if err := p.ready(); err == nil || !strings.Contains(err.Error(), "lease never seen: forbidden: read: ") {
		t.Fatalf("ready() = %v, want lease never seen: forbidden", err)
	}

	clk.Step(problemLogEvery)
	p.failed("read", forbidden)
	if lines = sink.get(); len(lines) != 2 || !strings.Contains(lines[1], `"failuresSinceLastLog"=3`) {
		t.Fatalf("after %v: logged %q; want a second line counting the 2 failures not logged and this one", problemLogEvery, lines)
	}
	p.failed("watch", apierrors.NewInternalError(errors.New(`failed calling webhook "x": connection refused`)))
	if lines = sink.get(); len(lines) != 3 || !strings.Contains(lines[2], `"reason"="unreachable"`) {
		t.Fatalf("a new reason: logged %q; want it at once", lines)
	}
	p.failed("queue", apierrors.NewConflict(leaseResource, "job", errors.New("modified")))
	if len(sink.get()) != 3 || count(ReasonOther) != 0 {
		t.Fatal("an optimistic-concurrency conflict was logged or counted")
	}

	p.seenLease()
	if err := p.ready(); err != nil {
		t.Fatalf("ready() after the lease was seen: %v", err)
	}
	if lines = sink.get(); len(lines) != 4 || !strings.Contains(lines[3], "FencedLease found") {
		t.Fatalf("logged %q; want a line saying the lease was found", lines)
	}
	p.failed("renew", forbidden)
	if err := p.ready(); err != nil {
		t.Fatalf("ready() after a failed renewal of a seen lease: %v (readiness is about the lease being there)", err)
	}
	p.goneLease()
	if err := p.ready(); err == nil || !strings.Contains(err.Error(), "no longer exists") {
		t.Fatalf("ready() after the lease was deleted = %v", err)
	}
}

// The back-off of a candidate's retries: jittered in [d/2, d], d doubling
// from backoffBase to backoffCap, and starting again after a reset.
func TestBackoff(t *testing.T) {
	var b backoff
	d := backoffBase
	for range 10 {
		got := b.step()
		if got < d/2 || got > d {
			t.Fatalf("step() = %v, want within [%v, %v]", got, d/2, d)
		}
		d = min(2*d, backoffCap)
	}
	if d != backoffCap {
		t.Fatalf("not capped: %v", d)
	}
	b.reset()
	if got := b.step(); got > backoffBase {
		t.Fatalf("step() after reset = %v, want at most %v", got, backoffBase)
	}
}

// A candidate whose reads are forbidden backs off instead of reading 5 times
// a second (2026-12-01 ecosystem review, §4: gets=15 in 3 s, no log line).
// Fails with the fixed 200 ms retry.
func TestCandidateBacksOffWhenForbidden(t *testing.T) {
	var mu sync.Mutex
	gets := 0
	cl := fake.NewClientBuilder().WithScheme(testScheme(t)).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			mu.Lock()
			gets++
			mu.Unlock()
			return apierrors.NewForbidden(leaseResource, "job", errors.New(`User "eve" cannot get resource "fencedleases"`))
		},
	}).Build()
	sink := &events{}
	e, err := New(Config{Client: cl, Namespace: "jobs", Name: "job", Identity: "eve", User: "eve",
		Callbacks: Callbacks{OnStartedLeading: func(context.Context, int64) {}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(logf.IntoContext(context.Background(), funcr.New(sink.log, funcr.Options{})), 3*time.Second)
	defer cancel()
	if err := e.Run(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	// Waits of at least 100, 200, 400, 800, 1600 ms: at most 6 reads in 3 s.
	if gets > 6 {
		t.Fatalf("%d reads in 3 s, want at most 6 (a jittered exponential back-off)", gets)
	}
	if lines := sink.get(); len(lines) != 1 || !strings.Contains(lines[0], `"reason"="forbidden"`) {
		t.Fatalf("logged %q, want one line with reason forbidden", lines)
	}
	if err := e.Ready(nil); err == nil || !strings.Contains(err.Error(), "lease never seen: forbidden") {
		t.Fatalf("Ready() = %v", err)
	}
}

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := coordv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// Ready fails while the last attempt to queue failed, and passes once one
// succeeded.
func TestReadyWhileNotQueued(t *testing.T) {
	p := newProblems(types.NamespacedName{Namespace: "jobs", Name: "job"}, clocktesting.NewFakeClock(time.Now()), nil, false)
	p.seenLease()
	p.failed("queue", apierrors.NewInternalError(errors.New(`failed calling webhook "fencedlease.kubefence.io": connection refused`)))
	if err := p.ready(); err == nil || !strings.Contains(err.Error(), "request not queued: unreachable: ") || !strings.Contains(err.Error(), "kubectl fence check") {
		t.Fatalf("ready() = %v, want request not queued: unreachable", err)
	}
	p.queued()
	if err := p.ready(); err != nil {
		t.Fatalf("ready() after queueing: %v", err)
	}
}
