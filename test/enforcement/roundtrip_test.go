package enforcement_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/controllers/policy"
	"github.com/kubefence/kubefence/pkg/fence"
	"github.com/kubefence/kubefence/test/testenv"
)

// notForThisPolicy is the fencing policy's refusal while a namespace's
// tenure table was written for another installation of it.
const notForThisPolicy = "was not written for the installed fencing policy"

// TestPolicyModeRoundTripDistrustsLeftoverTables: policy mode, then webhook
// mode (the policies deleted as docs/design.md's "Switching modes" says, the
// tenure tables left behind), a grant in webhook mode, then policy mode
// again. The re-installed fencing policy must not trust the leftover table,
// which still names the tenure that webhook mode ended: before any policy-mode
// controller runs, the old holder's token and the new holder's are refused
// (fail closed); once the controller has rewritten the table, the new
// holder's is accepted and the old one refused as stale. Without the
// incarnation the old holder's create is accepted after the new grant.
//
// The test keeps another binding with a ConfigMap parameter in place
// throughout (paramKeepalive): without one, each kube-apiserver stops its
// ConfigMap parameter informer for good when the last such binding goes
// (kubernetes/kubernetes#130887), and policy mode then refuses every guarded
// write until the API server restarts (docs/design.md, "Switching modes").
func TestPolicyModeRoundTripDistrustsLeftoverTables(t *testing.T) {
	t.Parallel() // a control plane of its own
	h := start(t, operator.EnforcementPolicy)
	h.paramKeepalive(t)
	ns := h.namespace(t, nil)
	h.lease(t, ns, "job", 30)
	alice, aliceToken := h.lead(t, "alice", ns, "job")
	testenv.Within(t, 10*time.Second, "the table names alice", func() error { return h.tableNames(ns, "job", aliceToken, "alice") })

	// To webhook mode: the operator stops, its policies and bindings are
	// deleted; the table stays. A webhook-mode operator hands the lease to
	// bob.
	h.stopOperator()
	h.deletePolicies(t)
	// The API server drops a deleted policy within about a second (it
	// recompiles its policies at most once a second).
	testenv.Within(t, 20*time.Second, "the fencing policy no longer judges", func() error {
		if h.policyJudges(ns) {
			return errors.New("still judging")
		}
		return nil
	})
	h.runOperator(t, h.cluster.Operator())
	alice.stop() // releases
	_, bobToken := h.lead(t, "bob", ns, "job")
	must(t, h.tableNames(ns, "job", aliceToken, "alice")) // left behind
	h.stopOperator()

	// Back to policy mode: the policies are applied (the installer's first
	// step) before any policy-mode controller has rewritten a table.
	must(t, h.options().PolicySettings().Apply(h.ctx, h.admin))
	testenv.Within(t, 20*time.Second, "the fencing policy judges again", func() error {
		if !h.policyJudges(ns) {
			return errors.New("not yet")
		}
		return nil
	})
	aliceWrites := fence.NewFencedClient(h.users["alice"], "job", fixedToken(aliceToken))
	bobWrites := fence.NewFencedClient(h.users["bob"], "job", fixedToken(bobToken))
	check(t, h, "round trip, before the controller: alice's create with her old token", aliceWrites.Create(h.ctx, widget(ns, "a", "", "", "alice")), plainRefusal(notForThisPolicy))
	check(t, h, "round trip, before the controller: alice's tokenless create", h.users["alice"].Create(h.ctx, widget(ns, "a", "job", "", "alice")), plainRefusal(notForThisPolicy))
	check(t, h, "round trip, before the controller: bob's create", bobWrites.Create(h.ctx, widget(ns, "b", "", "", "bob")), plainRefusal(notForThisPolicy))

	// The policy-mode controller rewrites the table from the lease.
	h.runOperator(t, h.options())
	testenv.Within(t, 20*time.Second, "bob's create is accepted", func() error {
		return bobWrites.Create(h.ctx, widget(ns, "b", "", "", "bob"))
	})
	must(t, h.tableNames(ns, "job", bobToken, "bob"))
	check(t, h, "round trip, after the controller: alice's create with her old token", aliceWrites.Create(h.ctx, widget(ns, "a", "", "", "alice")), staleToken(aliceToken))
}

// paramKeepalive installs a ValidatingAdmissionPolicy with a ConfigMap
// parameter and a binding that matches no object, so that the API server
// keeps its ConfigMap parameter informer while policy mode's policies are
// deleted.
func (h *harness) paramKeepalive(t *testing.T) {
	t.Helper()
	must(t, h.admin.Create(h.ctx, &admissionv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "param-keepalive"},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			ParamKind: &admissionv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
				Operations: []admissionv1.OperationType{admissionv1.Create},
				Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}}}},
			Validations: []admissionv1.Validation{{Expression: "true"}},
		}}))
	must(t, h.admin.Create(h.ctx, &admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "param-keepalive"},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: "param-keepalive",
			ParamRef: &admissionv1.ParamRef{Name: "none", Namespace: "default",
				ParameterNotFoundAction: ptr.To(admissionv1.AllowAction)},
			MatchResources: &admissionv1.MatchResources{ObjectSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubefence.io/never": "matched"}}},
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
		}}))
}

// policyJudges tells whether the fencing policy refuses a dry-run create of
// a Widget in ns with a malformed token.
func (h *harness) policyJudges(ns string) bool {
	err := h.admin.Create(h.ctx, widget(ns, "probe", "job", "not-a-token", "admin"), client.DryRunAll)
	return err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policy.FencingPolicyName+"'")
}

// tableNames tells (nil) whether ns's tenure table names user as lease's
// holder with token, for the installed policy's incarnation.
func (h *harness) tableNames(ns, lease string, token int64, user string) error {
	var cm corev1.ConfigMap
	if err := h.admin.Get(h.ctx, client.ObjectKey{Namespace: ns, Name: coordv1alpha1.TenureTableName}, &cm); err != nil {
		return err
	}
	if got := policy.EntryOf(&cm, lease); !strings.HasPrefix(got, tok(token)+" ") || !strings.HasSuffix(got, " "+user) {
		return errors.New("the tenure table's entry of " + lease + " is " + got + ", want " + user + "'s tenure with token " + tok(token))
	}
	return nil
}

// deletePolicies deletes policy mode's policies and bindings, as an
// administrator leaving policy mode does (docs/design.md, "Switching modes").
func (h *harness) deletePolicies(t *testing.T) {
	t.Helper()
	for _, name := range []string{policy.GuardedBindingName, policy.RequiredBindingName, policy.TerminatingPolicyName, policy.ClusterScopedPolicyName, policy.TablePolicyName, policy.LeasePolicyName} {
		err := h.admin.Delete(h.ctx, &admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name}})
		must(t, client.IgnoreNotFound(err))
	}
	for _, name := range []string{policy.FencingPolicyName, policy.TerminatingPolicyName, policy.ClusterScopedPolicyName, policy.TablePolicyName, policy.LeasePolicyName} {
		must(t, client.IgnoreNotFound(h.admin.Delete(h.ctx, &admissionv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}})))
	}
}
