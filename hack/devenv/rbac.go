package devenv

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// AllVerbs is every verb a test client gets on the objects it writes, so that
// only fencing refuses a write.
var AllVerbs = []string{"get", "list", "watch", "create", "update", "patch", "delete"}

// LeaseClientRule is what config/rbac's editor role gives a lease client:
// read and update FencedLeases (its own request), nothing on status.
var LeaseClientRule = rbacv1.PolicyRule{APIGroups: []string{coordv1alpha1.GroupVersion.Group},
	Resources: []string{"fencedleases"}, Verbs: []string{"get", "list", "watch", "update", "patch"}}

// WidgetRule gives every verb on the example kind (WidgetGVK) and its
// subresources.
var WidgetRule = rbacv1.PolicyRule{APIGroups: []string{WidgetGVK.Group},
	Resources: []string{"widgets", "widgets/status", "widgets/scale"}, Verbs: AllVerbs}

// HeartbeatRule lets a client create and renew its heartbeat Leases (what
// config/rbac's candidate role gives on coordination.k8s.io leases).
var HeartbeatRule = rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"},
	Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}}

// ClientRules are what a fenced client of the suites, the demo and the
// history test gets: LeaseClientRule and WidgetRule.
var ClientRules = []rbacv1.PolicyRule{LeaseClientRule, WidgetRule}

// GrantClusterRole creates the ClusterRole name with rules and binds it to
// group (a ClusterRoleBinding of the same name).
func GrantClusterRole(ctx context.Context, c client.Client, name, group string, rules ...rbacv1.PolicyRule) error {
	if err := c.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}); err != nil {
		return fmt.Errorf("creating ClusterRole %s: %w", name, err)
	}
	if err := c.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, Name: group}},
	}); err != nil {
		return fmt.Errorf("creating ClusterRoleBinding %s: %w", name, err)
	}
	return nil
}
