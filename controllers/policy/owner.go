package policy

import (
	"context"
	"errors"
	"fmt"
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultOwnerClusterRole is the ClusterRole of policy mode's RBAC
// (config/components/policy/policy_role.yaml, the chart's
// templates/rbac/policy.yaml), which both `make undeploy` and `helm
// uninstall` delete: the deployed operator names it with
// --owner-cluster-role.
const DefaultOwnerClusterRole = "kubefence-policy-role"

// ErrOwnerGone is wrapped by Owner.Ref's error when the owner ClusterRole is
// missing or being deleted: the operator is being uninstalled (or switched to
// webhook mode), and nothing it would create now would be collected.
var ErrOwnerGone = errors.New("the owner ClusterRole is gone")

// Owner is the cluster-scoped object that owns what policy mode creates at
// run time: the ValidatingAdmissionPolicies and bindings (Installer) and the
// tenure tables (Table). Each carries an ownerReference to it, so that when
// an uninstall deletes it, the cluster's garbage collector deletes them
// (docs/operations.md, "Uninstall"). ClusterRole empty (or a nil Owner): no
// owner, nothing is collected.
type Owner struct {
	// Reader reads the ClusterRole from the API server (not a cache: a
	// recreated ClusterRole has a new UID).
	Reader      client.Reader
	ClusterRole string
}

// Ref is the ownerReference to the ClusterRole as it is now; nil with no
// owner configured. blockOwnerDeletion is not set: nothing needs to wait for
// the dependants, and setting it needs more than read access to the owner.
func (o *Owner) Ref(ctx context.Context) (*metav1.OwnerReference, error) {
	if o == nil || o.ClusterRole == "" {
		return nil, nil
	}
	var cr metav1.PartialObjectMetadata
	cr.SetGroupVersionKind(rbacv1.SchemeGroupVersion.WithKind("ClusterRole"))
	if err := o.Reader.Get(ctx, client.ObjectKey{Name: o.ClusterRole}, &cr); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: ClusterRole %s does not exist", ErrOwnerGone, o.ClusterRole)
		}
		return nil, fmt.Errorf("reading the owner ClusterRole %s: %w", o.ClusterRole, err)
	}
	if cr.DeletionTimestamp != nil {
		return nil, fmt.Errorf("%w: ClusterRole %s is being deleted", ErrOwnerGone, o.ClusterRole)
	}
	return &metav1.OwnerReference{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRole", Name: cr.Name, UID: cr.UID}, nil
}

// owned reports whether obj names the owner ClusterRole among its owners.
func (o *Owner) owned(obj metav1.Object) bool {
	if o == nil || o.ClusterRole == "" {
		return true
	}
	return slices.ContainsFunc(obj.GetOwnerReferences(), func(r metav1.OwnerReference) bool {
		return r.Kind == "ClusterRole" && r.Name == o.ClusterRole
	})
}
