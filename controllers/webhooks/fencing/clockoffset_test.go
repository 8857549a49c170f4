package fencing

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/metrics"
)

// clockOffsetGauge is kubefence_webhook_clock_offset_seconds as a registry
// with the package's metrics serves it.
func clockOffsetGauge(t *testing.T) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := metrics.Register(reg); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "kubefence_webhook_clock_offset_seconds" {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("kubefence_webhook_clock_offset_seconds is not served")
	return 0
}

// stampedLease serves a lease granted a minute ago whose holder renews with
// stamps: status.renewTime stays at the grant (the controller's clock,
// ahead), the holder's request carries its latest stamp.
type stampedLease struct {
	client.Reader
	ahead time.Duration
}

func (s stampedLease) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	ctrl := time.Now().Add(s.ahead)
	granted := metav1.NewMicroTime(ctrl.Add(-61 * time.Second))
	stamp := metav1.NewMicroTime(time.Now())
	exp := metav1.NewMicroTime(ctrl.Add(10 * time.Second))
	*obj.(*coordv1alpha1.FencedLease) = coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Spec: coordv1alpha1.FencedLeaseSpec{Requests: []coordv1alpha1.LeaseRequest{{HolderIdentity: "bob", User: "bob", RenewTime: &stamp}}},
		Status: coordv1alpha1.FencedLeaseStatus{HolderIdentity: "bob", HolderUser: "bob", FencingToken: 42, LeaseDurationSeconds: 15,
			AcquireTime: &granted, RenewTime: &granted, ExpireTime: &exp}}
	return nil
}

// leaderLease is the controller's leader-election Lease as renewed at
// renewTime on the leader's clock.
func leaderLease(renewTime time.Time) *coordinationv1.Lease {
	rt := metav1.NewMicroTime(renewTime)
	holder := "kubefence-controller-manager-0_1"
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kubefence-system", Name: "controller.coordination.kubefence.io"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, RenewTime: &rt}}
}

// The controller's clock runs 300 ms ahead of this replica's. Its holders
// renew with stamps, so no FencedLease's status.renewTime moves after its
// grant, and the gauge, fed from it, showed minus the grant's age (about
// -61 s here) instead of the offset. Fed from the renewals of the
// controller's leader-election Lease (written on its clock every retry
// period), it shows the offset, less the time from the renewal to its
// sample, while the webhook keeps reading stamped leases.
func TestClockOffsetGaugeFollowsTheControllersRenewalsNotTheGrants(t *testing.T) {
	const ahead = 300 * time.Millisecond
	r := &LeaseReader{Reader: stampedLease{ahead: ahead}}
	s := &ClockSampler{Clock: clock.RealClock{}}
	for range 3 {
		s.Observe(leaderLease(time.Now().Add(ahead)))
		if _, err := r.Read(context.Background(), "jobs", "job", time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if got := clockOffsetGauge(t); got < 0.2 || got > ahead.Seconds() {
		t.Fatalf("kubefence_webhook_clock_offset_seconds = %v with the controller's clock %v ahead, want a lower bound within 100 ms of it", got, ahead)
	}
}

// The gauge is the largest sample of the last minute: a smaller sample
// does not lower it within the window, and the first sample after it starts
// the next window. A Lease version without renewTime is no sample.
func TestClockOffsetGaugeKeepsTheLargestSampleOfAMinute(t *testing.T) {
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(start)
	s := &ClockSampler{Clock: clk}
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, step := range []struct {
		at, ahead time.Duration // when, and how far ahead of it the renewal's renewTime is
		want      time.Duration
	}{
		{0, ms(-2000), ms(-2000)},          // the watch's first event: a renewal 2 s old
		{ms(100), ms(150), ms(150)},        // a fresh renewal: the controller is 150 ms ahead
		{ms(2100), ms(20), ms(150)},        // smaller: the window keeps 150 ms
		{61 * time.Second, ms(30), ms(30)}, // the window ended: a new one starts
		{62 * time.Second, ms(40), ms(40)},
	} {
		clk.SetTime(start.Add(step.at))
		s.Observe(leaderLease(start.Add(step.at + step.ahead)))
		if got := clockOffsetGauge(t); time.Duration(got*float64(time.Second)).Round(time.Millisecond) != step.want {
			t.Fatalf("at +%v: gauge %vs, want %v", step.at, got, step.want)
		}
	}
	noRenewTime := leaderLease(start)
	noRenewTime.Spec.RenewTime = nil
	s.Observe(noRenewTime)
	if got := clockOffsetGauge(t); got != 0.04 {
		t.Fatalf("a Lease without renewTime changed the gauge to %v", got)
	}
}
