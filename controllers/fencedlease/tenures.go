package fencedlease

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// TenureTable is what the reconciler tells the policy mode's tenure tables
// (controllers/policy.Tenures); nil in webhook mode.
type TenureTable interface {
	// Grant is called before a status write from lease's status to next. If
	// next grants a tenure, it writes the grant to the table and returns once
	// every API server enforces it; the status write happens only if it
	// returns nil, and done is called with that write's outcome.
	Grant(ctx context.Context, lease *coordv1alpha1.FencedLease, next *coordv1alpha1.FencedLeaseStatus) (done func(context.Context, error), err error)
	// Sync brings lease's entry up to what the lease says (a tenure ended,
	// an entry missing, a grant whose status write failed).
	Sync(ctx context.Context, lease *coordv1alpha1.FencedLease) error
	// Deleted records a deleted lease's highest token without a holder.
	Deleted(ctx context.Context, lease *coordv1alpha1.FencedLease, high int64) error
}

// writeStatus writes updated's status, through the tenure table in policy
// mode: a grant reaches the table and every API server first.
func (r *FencedLeaseReconciler) writeStatus(ctx context.Context, lease, updated *coordv1alpha1.FencedLease) error {
	if r.Tenures == nil {
		return r.Status().Update(ctx, updated)
	}
	done, err := r.Tenures.Grant(ctx, lease, &updated.Status)
	if err != nil {
		return err
	}
	err = r.Status().Update(ctx, updated)
	done(ctx, err)
	if err != nil {
		return err
	}
	// A tenure that ended without a grant is cleared after the write; if
	// that fails, the next reconcile's Sync does it (until then only the old
	// holder's writes pass, and no newer token has been granted).
	if err := r.Tenures.Sync(ctx, updated); err != nil {
		logf.FromContext(ctx).Error(err, "Updating the tenure table after a status write", "lease", client.ObjectKeyFromObject(updated))
	}
	return nil
}

// syncTenure brings the lease's tenure table entry up to its status (policy
// mode only).
func (r *FencedLeaseReconciler) syncTenure(ctx context.Context, lease *coordv1alpha1.FencedLease) error {
	if r.Tenures == nil {
		return nil
	}
	return r.Tenures.Sync(ctx, lease)
}

// recordDeleted records a deleted lease in the tenure table (policy mode only).
func (r *FencedLeaseReconciler) recordDeleted(ctx context.Context, lease *coordv1alpha1.FencedLease, high int64) error {
	if r.Tenures == nil {
		return nil
	}
	return r.Tenures.Deleted(ctx, lease, high)
}
