package fence

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// The client metrics register once per registry, start at zero, follow
// leadership and count stale refusals; nil Metrics record nothing.
func TestMetrics(t *testing.T) {
	if _, err := NewMetrics(nil); err == nil {
		t.Fatal("NewMetrics(nil) succeeded")
	}
	reg := prometheus.NewPedanticRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	again, err := NewMetrics(reg)
	if err != nil || again.leading != m.leading || again.stale != m.stale {
		t.Fatalf("NewMetrics on the same registry: %v; want the collectors already registered", err)
	}

	m.init("jobs", "job")
	if got := testutil.ToFloat64(m.leading.WithLabelValues("jobs", "job")); got != 0 {
		t.Fatalf("leading %v before any grant, want 0", got)
	}
	m.setLeading("jobs", "job", true, 7)
	m.observeRenewal("jobs", "job", RenewalOK, 20*time.Millisecond)
	if l, tok := testutil.ToFloat64(m.leading.WithLabelValues("jobs", "job")), testutil.ToFloat64(m.token.WithLabelValues("jobs", "job")); l != 1 || tok != 7 {
		t.Fatalf("leading %v token %v, want 1 and 7", l, tok)
	}
	m.setLeading("jobs", "job", false, 0)
	if l, tok := testutil.ToFloat64(m.leading.WithLabelValues("jobs", "job")), testutil.ToFloat64(m.token.WithLabelValues("jobs", "job")); l != 0 || tok != 7 {
		t.Fatalf("after the tenure: leading %v token %v, want 0 and the last token 7", l, tok)
	}

	base := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Update: func(context.Context, client.WithWatch, client.Object, ...client.UpdateOption) error {
			return refusal(409, "stale", staleCauses("jobs/job", "stale")...)
		},
	}).Build()
	c := NewFencedClient(base, "job", fixedToken{7, true}, ClientConfig{Metrics: m})
	err = c.Update(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "jobs", Name: "cm"}})
	var se *StaleError
	if !errors.As(err, &se) {
		t.Fatalf("update: %v, want a StaleError", err)
	}
	if got := testutil.ToFloat64(m.stale.WithLabelValues("jobs", "job")); got != 1 {
		t.Fatalf("stale refusals %v, want 1", got)
	}
	if n, err := testutil.GatherAndCount(reg, "kubefence_client_leading", "kubefence_client_fencing_token",
		"kubefence_client_renewal_duration_seconds", "kubefence_client_stale_refusals_total"); err != nil || n != 4 {
		t.Fatalf("gathered %d series (%v), want 4", n, err)
	}

	var none *Metrics // opt-in: nil records nothing and does not panic
	none.init("jobs", "job")
	none.setLeading("jobs", "job", true, 1)
	none.observeRenewal("jobs", "job", RenewalError, time.Second)
	none.staleRefusal("jobs", "job")
	none.leaseError("jobs", "job", ReasonForbidden)
}

// Every fenced write is timed, from sending it to its answer, by result: an
// acknowledged write's round trip bounds its admission-to-commit time from
// above (kubefence_client_write_duration_seconds, alert
// KubefenceClientWritesSlow).
func TestWriteDurations(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	base := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			time.Sleep(60 * time.Millisecond) // a slow commit
			return c.Create(ctx, obj, opts...)
		},
		Update: func(context.Context, client.WithWatch, client.Object, ...client.UpdateOption) error {
			return refusal(409, "the object has been modified")
		},
		Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
			return errors.New("connection reset by peer") // no answer
		},
		Delete: func(context.Context, client.WithWatch, client.Object, ...client.DeleteOption) error {
			return apierrors.NewTimeoutError("the write may still commit", 1)
		},
	}).Build()
	c := NewFencedClient(base, "job", fixedToken{7, true}, ClientConfig{Metrics: m})
	cm := func() *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "jobs", Name: "cm"}}
	}
	ctx := context.Background()
	if err := c.Create(ctx, cm()); err != nil {
		t.Fatal(err)
	}
	_ = c.Update(ctx, cm())
	_ = c.Patch(ctx, cm(), client.MergeFrom(cm()))
	_ = c.Delete(ctx, cm())
	_ = c.Status().Update(ctx, cm()) // refused by the interceptor too
	for result, want := range map[string]uint64{WriteOK: 1, WriteRefused: 2, WriteUnknown: 2} {
		h := &dto.Metric{}
		if err := m.write.WithLabelValues("jobs", "job", result).(prometheus.Histogram).Write(h); err != nil {
			t.Fatal(err)
		}
		if got := h.GetHistogram().GetSampleCount(); got != want {
			t.Errorf("%s writes timed: %d, want %d", result, got, want)
		}
		if result == WriteOK && h.GetHistogram().GetSampleSum() < 0.06 {
			t.Errorf("the acknowledged write's round trip %vs is below the 60ms it took", h.GetHistogram().GetSampleSum())
		}
	}
	// A write never sent (not leading) is not timed.
	notLeading := NewFencedClient(base, "job", fixedToken{0, false}, ClientConfig{Metrics: m})
	if err := notLeading.Create(ctx, cm()); !errors.Is(err, ErrNotLeading) {
		t.Fatalf("create while not leading: %v", err)
	}
	if n := testutil.CollectAndCount(m.write); n != 3 {
		t.Errorf("%d write series, want 3 (ok, refused, unknown)", n)
	}
	var none *Metrics
	none.observeWrite("jobs", "job", nil, time.Second)
}
