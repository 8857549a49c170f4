package fencedlease

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/metrics"
)

// FencedLeaseValidator guards FencedLease objects (I6): only the controller
// grants, expires and writes status; a client may add, renew and withdraw only
// its own request.
type FencedLeaseValidator struct {
	// ControllerUsers are the usernames the kubefence controller runs as. They may
	// write status, remove expired requests and manage the epoch finalizer.
	ControllerUsers []string
	// AdminGroups may change a lease's settings (leaseDurationSeconds,
	// lockDelaySeconds, minFencingToken) after it was created; clients, who may
	// update the lease to queue and renew, may not (a shorter duration or a huge
	// floor would let them disturb other holders). They may also act as
	// operators (kubectl fence release and handover: remove or reorder others'
	// requests, revoking the holder's tenure with the revoked annotation),
	// change ownerReferences and finalizers, and delete a held lease.
	// Default: system:masters.
	AdminGroups []string
	// CleanupUsers may delete leases and change their ownerReferences and
	// finalizers: the cluster's namespace controller and garbage collector, so
	// that a namespace holding FencedLeases can finish terminating.
	CleanupUsers []string
	// ExcludedNamespaces are the namespaces the fencing webhooks never look
	// at (the operator's own, kube-system): a FencedLease there would guard
	// nothing, so creating one is refused.
	ExcludedNamespaces []string
	// Clock bounds a request's renewTime: it may not be later than the
	// webhook's clock plus StampSkew (default: the real clock), so that it is
	// never later than the renewal's commit (docs/design.md).
	Clock     clock.PassiveClock
	StampSkew time.Duration
	// DurationWarning, if set, is the warning for a lease duration that the
	// fencing webhook cannot protect fully ("" for none): the assembly passes
	// fencing.ShortLeaseWarning with its clock skew and commit lag (webhook
	// mode). It is sent to whoever creates a lease of that duration or
	// changes a lease to it, and logged.
	DurationWarning func(leaseDuration time.Duration) string
}

// durationWarnings is DurationWarning for lease, logged.
func (v *FencedLeaseValidator) durationWarnings(ctx context.Context, lease *coordv1alpha1.FencedLease) admission.Warnings {
	if v.DurationWarning == nil {
		return nil
	}
	w := v.DurationWarning(time.Duration(lease.Spec.LeaseDurationSeconds) * time.Second)
	if w == "" {
		return nil
	}
	logf.FromContext(ctx).Info("Warned about a lease too short for the full commit-lag bound",
		"lease", lease.Namespace+"/"+lease.Name, "leaseDurationSeconds", lease.Spec.LeaseDurationSeconds, "warning", w)
	return admission.Warnings{w}
}

// checkRenewTimes refuses a renewTime later than the webhook's clock plus
// skew, a renewTime that moves back, and the removal of one: the fencing
// webhook counts the holder's tenure from it, so it must never be later than
// the renewal's commit.
func (v *FencedLeaseValidator) checkRenewTimes(oldLease, lease *coordv1alpha1.FencedLease) error {
	c := v.Clock
	if c == nil {
		c = clock.RealClock{}
	}
	latest := c.Now().Add(v.StampSkew)
	old := map[string]*metav1.MicroTime{}
	if oldLease != nil {
		for _, r := range oldLease.Spec.Requests {
			old[r.HolderIdentity] = r.RenewTime
		}
	}
	for i, r := range lease.Spec.Requests {
		prev := old[r.HolderIdentity]
		if equality.Semantic.DeepEqual(prev, r.RenewTime) {
			continue
		}
		switch {
		case r.RenewTime == nil:
			return fmt.Errorf("spec.requests[%d].renewTime (holderIdentity %q) cannot be removed once set", i, r.HolderIdentity)
		case r.RenewTime.Time.After(latest):
			return fmt.Errorf("spec.requests[%d].renewTime %s (holderIdentity %q) is later than the webhook's clock %s (allowing %v of skew): renewTime is when the renewal was sent, so it cannot be in the future; check the client's clock",
				i, r.RenewTime.UTC().Format(time.RFC3339Nano), r.HolderIdentity, c.Now().UTC().Format(time.RFC3339Nano), v.StampSkew)
		case prev != nil && r.RenewTime.Before(prev):
			return fmt.Errorf("spec.requests[%d].renewTime %s (holderIdentity %q) is earlier than its previous %s: it may only move forward",
				i, r.RenewTime.UTC().Format(time.RFC3339Nano), r.HolderIdentity, prev.UTC().Format(time.RFC3339Nano))
		}
	}
	return nil
}

// +kubebuilder:webhook:path=/validate-coordination-kubefence-io-v1alpha1-fencedlease,mutating=false,failurePolicy=fail,sideEffects=None,groups=coordination.kubefence.io,resources=fencedleases;fencedleases/status,verbs=create;update;delete,versions=v1alpha1,name=vfencedlease-v1alpha1.kb.io,admissionReviewVersions=v1,timeoutSeconds=3

// SetupWithManager registers the webhook.
func (v *FencedLeaseValidator) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &coordv1alpha1.FencedLease{}).WithValidator(v).Complete()
}

var _ admission.Validator[*coordv1alpha1.FencedLease] = &FencedLeaseValidator{}

// ValidateCreate lets a client create a lease with no requests or with its own.
func (v *FencedLeaseValidator) ValidateCreate(ctx context.Context, lease *coordv1alpha1.FencedLease) (admission.Warnings, error) {
	if slices.Contains(v.ExcludedNamespaces, lease.Namespace) {
		return nil, v.refuse(lease, coordv1alpha1.LeaseRefusalNamespace, fmt.Sprintf(
			"FencedLeases cannot be created in namespace %s: the fencing webhooks never look at it (excluded: %s), so objects guarded there would not be fenced; create the lease in the namespace of the objects it guards",
			lease.Namespace, strings.Join(v.ExcludedNamespaces, ", ")))
	}
	user, sub, err := requester(ctx)
	if err != nil || v.isController(user) {
		return nil, err
	}
	if sub != "" {
		return nil, v.refuse(lease, coordv1alpha1.LeaseRefusalStatus, "status is written only by the kubefence controller")
	}
	if err := v.checkRenewTimes(nil, lease); err != nil {
		return nil, v.refuse(lease, coordv1alpha1.LeaseRefusalRenewTime, err.Error())
	}
	if len(lease.OwnerReferences) > 0 && !v.isAdmin(user) {
		return nil, v.refuse(lease, coordv1alpha1.LeaseRefusalOwner, fmt.Sprintf(
			"only the kubefence controller and members of %v may set ownerReferences on a FencedLease: the garbage collector deletes a lease whose owner is gone, which would depose its holder", v.adminGroups()))
	}
	if _, ok := lease.Annotations[coordv1alpha1.ExpiredAnnotation]; ok {
		return nil, v.refuse(lease, coordv1alpha1.LeaseRefusalAnnotation, fmt.Sprintf("annotation %s is written only by the kubefence controller", coordv1alpha1.ExpiredAnnotation))
	}
	for i, r := range lease.Spec.Requests {
		if err := checkOwnRequest(lease, i, r, user); err != nil {
			return nil, v.refuse(lease, coordv1alpha1.LeaseRefusalForeignRequest, err.Error())
		}
	}
	return v.durationWarnings(ctx, lease), nil
}

// ValidateUpdate enforces who may change what.
func (v *FencedLeaseValidator) ValidateUpdate(ctx context.Context, oldLease, lease *coordv1alpha1.FencedLease) (admission.Warnings, error) {
	user, sub, err := requester(ctx)
	if err != nil || v.isController(user) {
		return nil, err
	}
	if sub == "status" {
		return nil, v.refuse(lease, coordv1alpha1.LeaseRefusalStatus, "status is written only by the kubefence controller: a client cannot grant, renew, expire or change the fencing token through status")
	}
	if sub != "" {
		return nil, v.refuse(lease, coordv1alpha1.LeaseRefusalSubresource, fmt.Sprintf("subresource %q of a FencedLease cannot be written", sub))
	}
	if err := v.checkRenewTimes(oldLease, lease); err != nil {
		return nil, v.refuse(lease, coordv1alpha1.LeaseRefusalRenewTime, err.Error())
	}
	if slices.Contains(oldLease.Finalizers, coordv1alpha1.EpochFinalizer) && !slices.Contains(lease.Finalizers, coordv1alpha1.EpochFinalizer) {
		return nil, v.refuse(lease, coordv1alpha1.LeaseRefusalFinalizer, fmt.Sprintf("finalizer %s is removed only by the kubefence controller, after it has recorded the lease's highest token", coordv1alpha1.EpochFinalizer))
	}
	privileged := v.isAdmin(user) || slices.Contains(v.CleanupUsers, user.Username)
	if !privileged && !equality.Semantic.DeepEqual(oldLease.OwnerReferences, lease.OwnerReferences) {
		return nil, v.refuse(lease, coordv1alpha1.LeaseRefusalOwner, fmt.Sprintf(
			"only the kubefence controller, members of %v and the cluster's clean-up controllers may change the ownerReferences of a FencedLease: the garbage collector deletes a lease whose owner is gone, which would depose its holder", v.adminGroups()))
	}
	if !privileged && !slices.Equal(oldLease.Finalizers, lease.Finalizers) {
		return nil, v.refuse(lease, coordv1alpha1.LeaseRefusalFinalizer, fmt.Sprintf(
			"only the kubefence controller, members of %v and the cluster's clean-up controllers may change the finalizers of a FencedLease: a foreign finalizer would keep a deleted lease terminating forever", v.adminGroups()))
	}
	if privileged && !v.isAdmin(user) {
		// A clean-up controller finishing a cascade: nothing but metadata.
		if !equality.Semantic.DeepEqual(oldLease.Spec, lease.Spec) || !equality.Semantic.DeepEqual(oldLease.Annotations, lease.Annotations) {
			return nil, v.refuse(lease, coordv1alpha1.LeaseRefusalForeignRequest, fmt.Sprintf("%s may change only the ownerReferences and finalizers of a FencedLease", user.Username))
		}
		return nil, nil
	}
	oldAnn, hadAnn := oldLease.Annotations[coordv1alpha1.ExpiredAnnotation]
	newAnn, hasAnn := lease.Annotations[coordv1alpha1.ExpiredAnnotation]
	if hadAnn != hasAnn || oldAnn != newAnn {
		return nil, v.refuse(lease, coordv1alpha1.LeaseRefusalAnnotation, fmt.Sprintf("annotation %s is written only by the kubefence controller", coordv1alpha1.ExpiredAnnotation))
	}
	if err := checkHolderRequeued(oldLease, lease); err != nil {
		return nil, v.refuse(lease, coordv1alpha1.LeaseRefusalRequeuedHolder, err.Error())
	}
	if v.isAdmin(user) {
		// An operator action: it may remove and reorder others' requests, but
		// removing the holder's must say so, so that the controller waits for
		// the revoked holder's admitted writes before the next grant.
		if err := checkRevocation(oldLease, lease, user); err != nil {
			return nil, v.refuse(lease, coordv1alpha1.LeaseRefusalRevocation, err.Error())
		}
	} else {
		oldRev, hadRev := oldLease.Annotations[coordv1alpha1.RevokedAnnotation]
		newRev, hasRev := lease.Annotations[coordv1alpha1.RevokedAnnotation]
		if hadRev != hasRev || oldRev != newRev {
			return nil, v.refuse(lease, coordv1alpha1.LeaseRefusalAnnotation, fmt.Sprintf("annotation %s is written only by operators (members of %v) revoking a tenure", coordv1alpha1.RevokedAnnotation, v.adminGroups()))
		}
		if err := checkRequestChanges(oldLease, lease, user); err != nil {
			return nil, v.refuse(lease, coordv1alpha1.LeaseRefusalForeignRequest, err.Error())
		}
	}
	if settingsChanged(oldLease, lease) && !v.isAdmin(user) {
		return nil, v.refuse(lease, coordv1alpha1.LeaseRefusalSettings, fmt.Sprintf(
			"only the kubefence controller and members of %v may change leaseDurationSeconds, lockDelaySeconds or minFencingToken of an existing lease; %q may only queue, renew and withdraw its own requests",
			v.adminGroups(), user.Username))
	}
	if oldLease.Spec.LeaseDurationSeconds != lease.Spec.LeaseDurationSeconds {
		return v.durationWarnings(ctx, lease), nil
	}
	return nil, nil
}

func settingsChanged(a, b *coordv1alpha1.FencedLease) bool {
	return a.Spec.LeaseDurationSeconds != b.Spec.LeaseDurationSeconds ||
		a.Spec.LockDelaySeconds != b.Spec.LockDelaySeconds ||
		a.Spec.MinFencingToken != b.Spec.MinFencingToken
}

func (v *FencedLeaseValidator) adminGroups() []string {
	if len(v.AdminGroups) == 0 {
		return []string{"system:masters"}
	}
	return v.AdminGroups
}

func (v *FencedLeaseValidator) isAdmin(user authenticationv1.UserInfo) bool {
	for _, g := range v.adminGroups() {
		if slices.Contains(user.Groups, g) {
			return true
		}
	}
	return false
}

// ValidateDelete lets the controller, lease admins and the cluster's clean-up
// controllers delete a lease, and anyone RBAC allows delete a lease nobody
// holds: deleting a held lease deposes its holder, which a candidate must not
// be able to do. The epoch finalizer carries the tokens forward either way.
func (v *FencedLeaseValidator) ValidateDelete(ctx context.Context, lease *coordv1alpha1.FencedLease) (admission.Warnings, error) {
	user, _, err := requester(ctx)
	if err != nil || v.isController(user) || v.isAdmin(user) || slices.Contains(v.CleanupUsers, user.Username) {
		return nil, err
	}
	if lease.Status.HolderIdentity != "" {
		return nil, v.refuse(lease, coordv1alpha1.LeaseRefusalDelete, fmt.Sprintf(
			"fencedlease %s/%s is held by %s (token %d): only the kubefence controller, members of %v and the cluster's clean-up controllers may delete a held lease; release it first (kubectl fence release)",
			lease.Namespace, lease.Name, lease.Status.HolderIdentity, lease.Status.FencingToken, v.adminGroups()))
	}
	return nil, nil
}

// checkRevocation lets an operator remove the holder's request only with the
// revoked annotation naming that tenure ("<holder>/<token>").
func checkRevocation(oldLease, lease *coordv1alpha1.FencedLease, user authenticationv1.UserInfo) error {
	h := oldLease.Status.HolderIdentity
	if h == "" {
		return nil
	}
	for _, r := range lease.Spec.Requests {
		if r.HolderIdentity == h {
			return nil
		}
	}
	for _, r := range oldLease.Spec.Requests {
		if r.HolderIdentity == h && ownsRequest(lease, r, user) == nil {
			return nil // the holder releasing its own request
		}
	}
	want := fmt.Sprintf("%s/%d", h, oldLease.Status.FencingToken)
	if lease.Annotations[coordv1alpha1.RevokedAnnotation] != want {
		return fmt.Errorf("removing the request of holder %q revokes its tenure: set annotation %s=%s in the same write (kubectl fence release and handover do), so that the controller waits for that holder's admitted writes before it grants the lease again",
			h, coordv1alpha1.RevokedAnnotation, want)
	}
	return nil
}

func (v *FencedLeaseValidator) isController(user authenticationv1.UserInfo) bool {
	return slices.Contains(v.ControllerUsers, user.Username)
}

func (v *FencedLeaseValidator) refuse(lease *coordv1alpha1.FencedLease, reason coordv1alpha1.RefusalReason, msg string) error {
	metrics.LeaseWriteRefused(string(reason))
	return apierrors.NewForbidden(coordv1alpha1.GroupVersion.WithResource("fencedleases").GroupResource(), lease.Name, fmt.Errorf("%s", msg))
}

func requester(ctx context.Context) (authenticationv1.UserInfo, string, error) {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return authenticationv1.UserInfo{}, "", fmt.Errorf("reading admission request: %w", err)
	}
	logf.FromContext(ctx).V(1).Info("Validating FencedLease write", "user", req.UserInfo.Username, "subResource", req.SubResource, "operation", req.Operation)
	return req.UserInfo, req.SubResource, nil
}

// checkOwnRequest checks that request i was made by user, and that its
// holderIdentity satisfies the lease's identity binding.
func checkOwnRequest(lease *coordv1alpha1.FencedLease, i int, r coordv1alpha1.LeaseRequest, user authenticationv1.UserInfo) error {
	if r.User != user.Username {
		return fmt.Errorf("spec.requests[%d] (holderIdentity %q) names user %q, but the request comes from %q: a client can request the lease only for itself, so user must equal its own username",
			i, r.HolderIdentity, r.User, user.Username)
	}
	switch lease.Spec.IdentityBinding {
	case coordv1alpha1.IdentityBindingServiceAccount:
		if r.HolderIdentity != user.Username {
			return fmt.Errorf("spec.requests[%d].holderIdentity %q must equal the requester's username %q (identityBinding ServiceAccount)", i, r.HolderIdentity, user.Username)
		}
	case coordv1alpha1.IdentityBindingPod:
		pods := user.Extra[coordv1alpha1.PodNameExtraKey]
		if len(pods) != 1 || pods[0] == "" {
			return fmt.Errorf("spec.requests[%d]: identityBinding Pod needs a requester authenticated with a pod-bound service-account token (user info extra %q), but user %q carries none", i, coordv1alpha1.PodNameExtraKey, user.Username)
		}
		if r.HolderIdentity != pods[0] {
			return fmt.Errorf("spec.requests[%d].holderIdentity %q must equal the requester's pod name %q (identityBinding Pod)", i, r.HolderIdentity, pods[0])
		}
	}
	return nil
}

// ownsRequest tells whether user made request r. Under identityBinding Pod the
// pod must match too: replicas of one Deployment share a service account.
func ownsRequest(lease *coordv1alpha1.FencedLease, r coordv1alpha1.LeaseRequest, user authenticationv1.UserInfo) error {
	if r.User != user.Username {
		return fmt.Errorf("it belongs to user %q, not %q", r.User, user.Username)
	}
	if lease.Spec.IdentityBinding == coordv1alpha1.IdentityBindingPod {
		pods := user.Extra[coordv1alpha1.PodNameExtraKey]
		if len(pods) != 1 || pods[0] != r.HolderIdentity {
			return fmt.Errorf("it belongs to pod %q, and the request comes from pod %v of the same user", r.HolderIdentity, pods)
		}
	}
	return nil
}

// checkHolderRequeued refuses, from anyone but the controller, a request
// added under the identity status still names as holder after that
// holder's request was withdrawn: the controller has not ended the tenure
// yet, and until it has, a request under that identity could be taken for
// the tenure (by a controller that restarted, by the live reads of the
// fencing webhook and the tenure table; status.holderUser tells the
// granted request from one another user makes, nothing tells it from one
// the same user makes). The client waits until status names another
// holder or none (docs/protocol.md; the Go helper does).
func checkHolderRequeued(oldLease, lease *coordv1alpha1.FencedLease) error {
	h := oldLease.Status.HolderIdentity
	if h == "" || coordv1alpha1.RequestIndex(oldLease.Spec.Requests, h) >= 0 {
		return nil
	}
	i := coordv1alpha1.RequestIndex(lease.Spec.Requests, h)
	if i < 0 {
		return nil
	}
	return fmt.Errorf("spec.requests[%d] (holderIdentity %q) queues the identity status.holderIdentity still names as the holder of token %d, whose request was withdrawn: until the kubefence controller has ended that tenure, a new request under that identity would be taken for it; wait until status.holderIdentity no longer names %q, then request again",
		i, h, oldLease.Status.FencingToken, h)
}

// checkRequestChanges lets a client append its own requests, renew (raise the
// renewSequence of) its own requests and withdraw its own requests; it may not
// touch anyone else's, nor change the order of the queue.
func checkRequestChanges(oldLease, lease *coordv1alpha1.FencedLease, user authenticationv1.UserInfo) error {
	oldIdx := map[string]int{}
	for i, r := range oldLease.Spec.Requests {
		oldIdx[r.HolderIdentity] = i
	}
	newIdx := map[string]int{}
	for i, r := range lease.Spec.Requests {
		newIdx[r.HolderIdentity] = i
	}
	for _, r := range oldLease.Spec.Requests {
		if _, kept := newIdx[r.HolderIdentity]; !kept {
			if err := ownsRequest(lease, r, user); err != nil {
				return fmt.Errorf("cannot remove the request of holderIdentity %q: %v; only the requester can withdraw or release it", r.HolderIdentity, err)
			}
		}
	}
	var kept []string
	seenNew := false
	for i, r := range lease.Spec.Requests {
		j, existed := oldIdx[r.HolderIdentity]
		if !existed {
			if err := checkOwnRequest(lease, i, r, user); err != nil {
				return err
			}
			seenNew = true
			continue
		}
		if seenNew {
			return fmt.Errorf("spec.requests[%d] (holderIdentity %q) was moved behind a new request: new requests are appended at the end of the queue", i, r.HolderIdentity)
		}
		kept = append(kept, r.HolderIdentity)
		if o := oldLease.Spec.Requests[j]; !equality.Semantic.DeepEqual(o, r) {
			if err := ownsRequest(lease, o, user); err != nil {
				return fmt.Errorf("cannot change the request of holderIdentity %q: %v; only the holder can renew it", r.HolderIdentity, err)
			}
		}
	}
	var oldKept []string
	for _, r := range oldLease.Spec.Requests {
		if _, ok := newIdx[r.HolderIdentity]; ok {
			oldKept = append(oldKept, r.HolderIdentity)
		}
	}
	if !slices.Equal(kept, oldKept) {
		return fmt.Errorf("the order of spec.requests changed from [%s] to [%s]: requests are granted in arrival order, which a client cannot change",
			strings.Join(oldKept, ", "), strings.Join(kept, ", "))
	}
	return nil
}
