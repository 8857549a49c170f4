package fencing

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// The webhook counts a heartbeat's renewTime as the tenure's stamp exactly
// when the controller counts the heartbeat: the grant acknowledged, the
// Lease labelled, naming the holder, made by the granted request's user
// (docs/design.md, "Heartbeats"). Counting it before the acknowledgement
// would let a session that keeps beating stretch the cut-off of a grant the
// controller expires at grant + L.
func TestReadLeaseTakesTheHeartbeatStampAsTheControllerCountsIt(t *testing.T) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = coordv1alpha1.AddToScheme(s)
	granted := time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC)
	beat := granted.Add(5 * time.Second)
	ack := metav1.NewMicroTime(granted.Add(time.Second))
	expire := metav1.NewMicroTime(granted.Add(15 * time.Second))
	lease := func(renewSequence int64) *coordv1alpha1.FencedLease {
		return &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "job"},
			Spec: coordv1alpha1.FencedLeaseSpec{Requests: []coordv1alpha1.LeaseRequest{
				{HolderIdentity: "a", User: "alice", RenewSequence: renewSequence, RenewTime: &ack, Heartbeat: "hb"}}},
			Status: coordv1alpha1.FencedLeaseStatus{HolderIdentity: "a", HolderUser: "alice", FencingToken: 3, LeaseDurationSeconds: 15, ExpireTime: &expire}}
	}
	hb := func(holder, user string, labelled bool) *coordinationv1.Lease {
		rt := metav1.NewMicroTime(beat)
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "hb",
			Annotations: map[string]string{coordv1alpha1.HeartbeatUserAnnotation: user}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, RenewTime: &rt}}
		if labelled {
			l.Labels = map[string]string{coordv1alpha1.HeartbeatLabel: "true"}
		}
		return l
	}
	for _, c := range []struct {
		name  string
		lease *coordv1alpha1.FencedLease
		hb    *coordinationv1.Lease
		want  time.Time
	}{
		{"acknowledged, the holder's heartbeat", lease(1), hb("a", "alice", true), beat},
		{"not acknowledged yet", lease(0), hb("a", "alice", true), ack.Time},
		{"made by another user", lease(1), hb("a", "mallory", true), ack.Time},
		{"naming another holder", lease(1), hb("b", "alice", true), ack.Time},
		{"without the label", lease(1), hb("a", "alice", false), ack.Time},
		{"missing", lease(1), nil, ack.Time},
	} {
		b := fake.NewClientBuilder().WithScheme(s).WithObjects(c.lease)
		if c.hb != nil {
			b = b.WithObjects(c.hb)
		}
		st, err := readLease(context.Background(), b.Build(), "ns", "job")
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !st.RenewStamp.Equal(c.want) {
			t.Errorf("%s: stamp %v, want %v", c.name, st.RenewStamp, c.want)
		}
	}
}
