package install

import (
	"reflect"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/kubefence/kubefence/test/testenv"
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
	var webhooks []admissionregistrationv1.ValidatingWebhook
	for _, c := range decodeKind[admissionregistrationv1.ValidatingWebhookConfiguration](t, docs, "ValidatingWebhookConfiguration") {
		if c.Name != "kubefence-fencing-webhook-configuration" {
			continue
		}
		webhooks = c.Webhooks
		for _, w := range c.Webhooks {
			fencing = append(fencing, w.Name)
		}
	}
	if want := []string{"required.fencing.kubefence.io", "scale.fencing.kubefence.io", "eviction.fencing.kubefence.io", "pod-scope.fencing.kubefence.io"}; !slices.Equal(fencing, want) {
		t.Fatalf("fencing webhooks %v, want %v: in policy mode the policy decides guarded and required writes, the webhook /scale (also in required namespaces), evictions, and pods guarded outside the eviction scope", fencing, want)
	}
	// The required entry judges /scale only: the scale entry leaves
	// required namespaces to it, and a Scale carries no labels for the
	// required binding to read (safety review 2026-12-01, finding 3).
	required := webhooks[0]
	if i := slices.IndexFunc(required.MatchConditions, func(c admissionregistrationv1.MatchCondition) bool { return c.Name == "scale-only" }); i < 0 ||
		required.MatchConditions[i].Expression != "request.?subResource.orValue('') == 'scale'" {
		t.Errorf("the required entry's match conditions %+v: want scale-only, request.?subResource.orValue('') == 'scale'", required.MatchConditions)
	}
	if !slices.ContainsFunc(required.Rules, func(r admissionregistrationv1.RuleWithOperations) bool {
		return slices.Contains(r.APIGroups, "example.kubefence.io") && slices.Contains(r.Resources, "widgets/scale")
	}) {
		t.Errorf("the required entry's rules %+v do not list widgets/scale, a required kind's /scale", required.Rules)
	}
	// The envtest suites run policy mode with these entries.
	envtest, err := testenv.PolicyModeFencingWebhooks(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(envtest.Webhooks) != len(webhooks) {
		t.Fatalf("testenv.PolicyModeFencingWebhooks has %d entries, config/policy %d", len(envtest.Webhooks), len(webhooks))
	}
	for i, w := range webhooks {
		e := envtest.Webhooks[i]
		if w.Name != e.Name || !reflect.DeepEqual(w.Rules, e.Rules) || !reflect.DeepEqual(w.MatchConditions, e.MatchConditions) ||
			!reflect.DeepEqual(w.ObjectSelector, e.ObjectSelector) || !reflect.DeepEqual(w.NamespaceSelector, e.NamespaceSelector) || !reflect.DeepEqual(w.ClientConfig.Service.Path, e.ClientConfig.Service.Path) {
			t.Errorf("entry %d: config/policy has\n%+v\ntestenv.PolicyModeFencingWebhooks\n%+v", i, w, e)
		}
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
	for _, v := range []string{"list", "watch", "patch"} {
		if !can("", "namespaces", v) {
			t.Errorf("the policy role cannot %s namespaces: the manager marks namespaces being deleted (policy.NamespaceMarker)", v)
		}
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
