package install

import (
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// TestPolicyComponent checks config/policy (config/default plus the
// component config/components/policy) object by object: the manager runs in
// policy mode, the fencing webhook keeps only /scale and evictions, and the
// manager may manage the policies and the tenure tables.
func TestPolicyComponent(t *testing.T) {
	docs := documents(t, buildDir(t, "config/policy"))

	deps := decodeKind[appsv1.Deployment](t, docs, "Deployment")
	if len(deps) != 1 {
		t.Fatalf("%d Deployments, want 1", len(deps))
	}
	args := deps[0].Spec.Template.Spec.Containers[0].Args
	for _, want := range []string{"--enforcement=policy", "--required-fencing-kind=widgets.example.kubefence.io"} {
		if !slices.Contains(args, want) {
			t.Errorf("manager args %v lack %s", args, want)
		}
	}

	var fencing []string
	for _, c := range decodeKind[admissionregistrationv1.ValidatingWebhookConfiguration](t, docs, "ValidatingWebhookConfiguration") {
		if c.Name != "kubefence-fencing-webhook-configuration" {
			continue
		}
		for _, w := range c.Webhooks {
			fencing = append(fencing, w.Name)
		}
	}
	if want := []string{"scale.fencing.kubefence.io", "eviction.fencing.kubefence.io"}; !slices.Equal(fencing, want) {
		t.Errorf("fencing webhooks %v, want %v: in policy mode the policy decides guarded and required writes", fencing, want)
	}

	var role *rbacv1.ClusterRole
	for _, r := range decodeKind[rbacv1.ClusterRole](t, docs, "ClusterRole") {
		if r.Name == "kubefence-policy-role" {
			role = &r
		}
	}
	if role == nil {
		t.Fatal("no ClusterRole kubefence-policy-role")
	}
	can := func(group, resource, verb string) bool {
		for _, r := range role.Rules {
			if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) {
				return true
			}
		}
		return false
	}
	for _, v := range []string{"get", "create", "patch"} {
		for _, res := range []string{"validatingadmissionpolicies", "validatingadmissionpolicybindings"} {
			if !can("admissionregistration.k8s.io", res, v) {
				t.Errorf("the policy role cannot %s %s", v, res)
			}
		}
	}
	if !can("", "configmaps", "update") {
		t.Error("the policy role cannot update the tenure tables")
	}
	var bound bool
	for _, b := range decodeKind[rbacv1.ClusterRoleBinding](t, docs, "ClusterRoleBinding") {
		if b.RoleRef.Name == role.Name && len(b.Subjects) == 1 && b.Subjects[0].Name == deps[0].Spec.Template.Spec.ServiceAccountName &&
			b.Subjects[0].Namespace == deps[0].Namespace {
			bound = true
		}
	}
	if !bound {
		t.Errorf("the policy role is not bound to the manager's service account %s/%s", deps[0].Namespace, deps[0].Spec.Template.Spec.ServiceAccountName)
	}
}

func TestChartPolicyMatchesConfigPolicy(t *testing.T) {
	want := normalize(t, buildDir(t, "config/policy"))
	got := normalize(t, helmTemplate(t, "--set", "enforcement=policy"))
	compareObjects(t, "config/policy", want, "dist/chart (enforcement=policy)", got)
}
