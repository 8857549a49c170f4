package fence

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
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
}
