package fencing

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// heartbeatStamp is the renewTime of the heartbeat Lease the holder's
// request names, read live after the lease (docs/design.md, "Heartbeats"),
// when it counts for the tenure as the controller counts it: the grant
// acknowledged (the request renewed since status recorded it), the Lease
// labelled, naming the holder and made by the granted request's user. Zero
// when it does not count. The stamp is bounded by no admission clock: the
// controller's order of an expiry (a live look, the request's removal, a
// second look, the commit lag if the heartbeat moved or ran ahead) keeps
// the cut-off from it before the next grant.
func heartbeatStamp(ctx context.Context, r client.Reader, l *coordv1alpha1.FencedLease, req *coordv1alpha1.LeaseRequest) (time.Time, error) {
	if req.Heartbeat == "" || req.RenewSequence <= l.Status.RenewSequence {
		return time.Time{}, nil
	}
	var hb coordinationv1.Lease
	if err := r.Get(ctx, types.NamespacedName{Namespace: l.Namespace, Name: req.Heartbeat}, &hb); err != nil {
		if apierrors.IsNotFound(err) {
			return time.Time{}, nil
		}
		return time.Time{}, fmt.Errorf("reading heartbeat Lease %s/%s of lease %s: %w", l.Namespace, req.Heartbeat, l.Name, err)
	}
	user := l.Status.HolderUser
	if user == "" {
		user = req.User
	}
	_, labelled := hb.Labels[coordv1alpha1.HeartbeatLabel]
	if !labelled || hb.Spec.HolderIdentity == nil || *hb.Spec.HolderIdentity != req.HolderIdentity ||
		hb.Annotations[coordv1alpha1.HeartbeatUserAnnotation] != user || hb.Spec.RenewTime == nil {
		return time.Time{}, nil
	}
	return hb.Spec.RenewTime.Time, nil
}
