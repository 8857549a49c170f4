package policy

import (
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// LeasePolicyName is the ValidatingAdmissionPolicy that guards FencedLeases
// in policy mode (I6), in place of the FencedLease webhook, so that renewals
// do not depend on the operator; its binding has the same name.
const LeasePolicyName = coordv1alpha1.LeasePolicyName

// adminGroups are the groups that may act as operators on FencedLeases
// (empty: system:masters, as the FencedLease webhook).
func (s Settings) adminGroups() []string {
	if len(s.AdminGroups) == 0 {
		return []string{"system:masters"}
	}
	return s.AdminGroups
}

// The rules of controllers/webhooks/fencedlease (FencedLeaseValidator), in
// CEL, rule by rule; what CEL cannot express is listed in docs/design.md
// ("I6 as a policy"). Each rule is one validation with its own message. The
// controller users are left out by a match condition, except for a create in
// an excluded namespace, which is refused for everyone.

// owns is the webhook's ownsRequest for request r: the requester made it
// and, with Pod binding, from the pod it names.
func owns(r string) string {
	return strings.ReplaceAll(`(R.user == variables.user && (variables.binding != 'Pod' || variables.pod == [R.holderIdentity]))`, "R", r)
}

// ownNew is the webhook's checkOwnRequest for a request r the requester adds:
// its user is the requester and its holderIdentity satisfies the identity
// binding.
func ownNew(r string) string {
	return strings.ReplaceAll(`(R.user == variables.user &&
  (variables.binding != 'ServiceAccount' || R.holderIdentity == variables.user) &&
  (variables.binding != 'Pod' || (size(variables.pod) == 1 && variables.pod[0] != '' && R.holderIdentity == variables.pod[0])))`, "R", r)
}

// annotation spells whether annotation key is set on obj, and its value, as
// one string that two versions can be compared by.
func annotation(obj, key string) string {
	return fmt.Sprintf("(%[1]s == null ? 'unset' : %[1]s.metadata.?annotations[?%[2]q].hasValue() ? 'set:' + %[1]s.metadata.annotations[%[2]q] : 'unset')", obj, key)
}

func (s Settings) leaseVariables() []admissionregistrationv1.Variable {
	v := func(name, expr string) admissionregistrationv1.Variable {
		return admissionregistrationv1.Variable{Name: name, Expression: expr}
	}
	return []admissionregistrationv1.Variable{
		v("sub", "request.?subResource.orValue('')"),
		v("user", "request.userInfo.username"),
		v("admin", fmt.Sprintf("request.userInfo.?groups.orValue([]).exists(g, g in %s)", celList(s.adminGroups()))),
		v("cleanup", fmt.Sprintf("request.userInfo.username in %s", celList(s.CleanupUsers))),
		v("pod", fmt.Sprintf("request.userInfo.?extra[?%q].orValue([])", coordv1alpha1.PodNameExtraKey)),
		v("update", "request.operation == 'UPDATE' && variables.sub == ''"),
		// Judged by the roles of the webhook: the clean-up users that are
		// not admins may change metadata only; the others, not admins,
		// only their own requests.
		v("client", "variables.update && !variables.admin && !variables.cleanup"),
		v("binding", "object == null ? '' : object.?spec.?identityBinding.orValue('None')"),
		v("oldReqs", "oldObject == null ? [] : oldObject.?spec.?requests.orValue([])"),
		v("newReqs", "object == null || request.operation == 'DELETE' ? [] : object.?spec.?requests.orValue([])"),
		v("oldIDs", "variables.oldReqs.map(r, r.holderIdentity)"),
		v("newIDs", "variables.newReqs.map(r, r.holderIdentity)"),
		v("holder", "oldObject == null ? '' : oldObject.?status.?holderIdentity.orValue('')"),
		v("tenure", "variables.holder + '/' + string(oldObject == null ? 0 : oldObject.?status.?fencingToken.orValue(0))"),
	}
}

// leaseValidations are the webhook's rules, in its order.
func (s Settings) leaseValidations() []admissionregistrationv1.Validation {
	rule := func(expr, msg string) admissionregistrationv1.Validation {
		return admissionregistrationv1.Validation{Expression: expr, MessageExpression: msg, Reason: ptr.To(metav1.StatusReasonForbidden)}
	}
	ctrl := "the kubefence controller"
	admins := strings.Join(s.adminGroups(), ", ")
	others := fmt.Sprintf("%s, members of %s and the cluster\\'s clean-up controllers", ctrl, admins)
	fin := coordv1alpha1.EpochFinalizer
	exp := coordv1alpha1.ExpiredAnnotation
	rev := coordv1alpha1.RevokedAnnotation
	return []admissionregistrationv1.Validation{
		rule(fmt.Sprintf("request.operation != 'CREATE' || !(request.namespace in %s)", celList(s.ExcludedNamespaces)),
			fmt.Sprintf(`'FencedLeases cannot be created in namespace ' + request.namespace + ': the fencing policies never look at it (excluded: %s), so objects guarded there would not be fenced; create the lease in the namespace of the objects it guards'`,
				strings.Join(s.ExcludedNamespaces, ", "))),
		rule("variables.sub == ''",
			fmt.Sprintf(`variables.sub == 'status' ? 'status is written only by %s: a client cannot grant, renew, expire or change the fencing token through status' : 'subresource ' + variables.sub + ' of a FencedLease cannot be written'`, ctrl)),
		// checkRenewTimes, without the clock: a set renewTime stays, and
		// moves only forward (its bound by the clock is the controller's,
		// Timing.ClampStamps).
		rule(`request.operation != 'UPDATE' || variables.oldReqs.all(o, !has(o.renewTime) || variables.newReqs.all(n, n.holderIdentity != o.holderIdentity || has(n.renewTime)))`,
			`'spec.requests[].renewTime (holderIdentity ' + variables.oldReqs.filter(o, has(o.renewTime) && variables.newReqs.exists(n, n.holderIdentity == o.holderIdentity && !has(n.renewTime))).map(o, o.holderIdentity).join(', ') + ') cannot be removed once set'`),
		rule(`request.operation != 'UPDATE' || variables.oldReqs.all(o, !has(o.renewTime) || variables.newReqs.all(n, n.holderIdentity != o.holderIdentity || !has(n.renewTime) || timestamp(string(n.renewTime)) >= timestamp(string(o.renewTime))))`,
			`'spec.requests[].renewTime (holderIdentity ' + variables.oldReqs.filter(o, has(o.renewTime) && variables.newReqs.exists(n, n.holderIdentity == o.holderIdentity && has(n.renewTime) && timestamp(string(n.renewTime)) < timestamp(string(o.renewTime)))).map(o, o.holderIdentity + ': ' + string(o.renewTime)).join(', ') + ') moved back: it is earlier than its previous value, and may only move forward'`),
		rule(fmt.Sprintf("request.operation != 'UPDATE' || !(%[1]q in oldObject.metadata.?finalizers.orValue([])) || %[1]q in object.metadata.?finalizers.orValue([])", fin),
			fmt.Sprintf("'finalizer %s is removed only by %s, after it has recorded the lease\\'s highest token'", fin, ctrl)),
		rule("request.operation != 'CREATE' || variables.admin || size(object.metadata.?ownerReferences.orValue([])) == 0",
			fmt.Sprintf("'only %s and members of %s may set ownerReferences on a FencedLease: the garbage collector deletes a lease whose owner is gone, which would depose its holder'", ctrl, admins)),
		rule("!variables.update || variables.admin || variables.cleanup || oldObject.metadata.?ownerReferences.orValue([]) == object.metadata.?ownerReferences.orValue([])",
			fmt.Sprintf("'only %s may change the ownerReferences of a FencedLease: the garbage collector deletes a lease whose owner is gone, which would depose its holder'", others)),
		rule("!variables.update || variables.admin || variables.cleanup || oldObject.metadata.?finalizers.orValue([]) == object.metadata.?finalizers.orValue([])",
			fmt.Sprintf("'only %s may change the finalizers of a FencedLease: a foreign finalizer would keep a deleted lease terminating forever'", others)),
		rule("!variables.update || variables.admin || !variables.cleanup || (object.?spec.orValue({}) == oldObject.?spec.orValue({}) && object.metadata.?annotations.orValue({}) == oldObject.metadata.?annotations.orValue({}))",
			"variables.user + ' may change only the ownerReferences and finalizers of a FencedLease'"),
		rule(fmt.Sprintf("request.operation == 'DELETE' || %s == %s", annotation("oldObject", exp), annotation("object", exp)),
			fmt.Sprintf("'annotation %s is written only by %s'", exp, ctrl)),
		rule(fmt.Sprintf("!variables.client || %s == %s", annotation("oldObject", rev), annotation("object", rev)),
			fmt.Sprintf("'annotation %s is written only by operators (members of %s) revoking a tenure'", rev, admins)),
		// checkRevocation: an operator removing the holder's request says so.
		rule(fmt.Sprintf("!variables.update || !variables.admin || variables.holder == '' || variables.holder in variables.newIDs || "+
			"variables.oldReqs.exists(r, r.holderIdentity == variables.holder && %s) || object.metadata.?annotations[?%q].orValue('') == variables.tenure", owns("r"), rev),
			fmt.Sprintf("'removing the request of holder ' + variables.holder + ' revokes its tenure: set annotation %s=' + variables.tenure + ' in the same write (kubectl fence release and handover do), so that the controller waits for that holder\\'s admitted writes before it grants the lease again'", rev)),
		// checkHolderRequeued: no request under the identity status still
		// names as holder once its request was withdrawn.
		rule("!variables.update || variables.holder == '' || variables.holder in variables.oldIDs || !(variables.holder in variables.newIDs)",
			fmt.Sprintf("'spec.requests (holderIdentity ' + variables.holder + ') queues the identity status.holderIdentity still names as the holder of token ' + string(oldObject.?status.?fencingToken.orValue(0)) + ', whose request was withdrawn: until %s has ended that tenure, a new request under that identity would be taken for it; wait until status.holderIdentity no longer names ' + variables.holder + ', then request again'", ctrl)),
		// checkOwnRequest on create (for everyone but the controller) and
		// checkRequestChanges on update (clients).
		rule(fmt.Sprintf("request.operation != 'CREATE' || variables.newReqs.all(r, %s)", ownNew("r")),
			foreignRequests(fmt.Sprintf("variables.newReqs.filter(r, !%s)", ownNew("r")))),
		rule(fmt.Sprintf("!variables.client || variables.newReqs.all(r, r.holderIdentity in variables.oldIDs || %s)", ownNew("r")),
			foreignRequests(fmt.Sprintf("variables.newReqs.filter(r, !(r.holderIdentity in variables.oldIDs) && !%s)", ownNew("r")))),
		rule(fmt.Sprintf("!variables.client || variables.oldReqs.all(r, r.holderIdentity in variables.newIDs || %s)", owns("r")),
			fmt.Sprintf("'cannot remove the request of holderIdentity ' + variables.oldReqs.filter(r, !(r.holderIdentity in variables.newIDs) && !%s).map(r, r.holderIdentity + ' (user ' + r.user + ')').join(', ') + ': only the requester can withdraw or release it, and the request comes from ' + variables.user + (size(variables.pod) == 1 ? ' (pod ' + variables.pod[0] + ')' : '')", owns("r"))),
		rule(fmt.Sprintf("!variables.client || variables.oldReqs.all(o, !(o.holderIdentity in variables.newIDs) || variables.newReqs.exists(n, n == o) || %s)", owns("o")),
			fmt.Sprintf("'cannot change the request of holderIdentity ' + variables.oldReqs.filter(o, o.holderIdentity in variables.newIDs && !variables.newReqs.exists(n, n == o) && !%s).map(o, o.holderIdentity + ' (user ' + o.user + ')').join(', ') + ': only the holder can renew it, and the request comes from ' + variables.user + (size(variables.pod) == 1 ? ' (pod ' + variables.pod[0] + ')' : '')", owns("o"))),
		rule("!variables.client || variables.newIDs == variables.newIDs.filter(id, id in variables.oldIDs) + variables.newIDs.filter(id, !(id in variables.oldIDs))",
			"'a request was moved behind a new request in [' + variables.newIDs.join(', ') + ']: new requests are appended at the end of the queue'"),
		rule("!variables.client || variables.newIDs.filter(id, id in variables.oldIDs) == variables.oldIDs.filter(id, id in variables.newIDs)",
			"'the order of spec.requests changed from [' + variables.oldIDs.filter(id, id in variables.newIDs).join(', ') + '] to [' + variables.newIDs.filter(id, id in variables.oldIDs).join(', ') + ']: requests are granted in arrival order, which a client cannot change'"),
		rule("!variables.update || variables.admin || "+
			"(object.?spec.?leaseDurationSeconds.orValue(0) == oldObject.spec.?leaseDurationSeconds.orValue(0) && "+
			"object.?spec.?lockDelaySeconds.orValue(0) == oldObject.spec.?lockDelaySeconds.orValue(0) && "+
			"object.?spec.?minFencingToken.orValue(0) == oldObject.spec.?minFencingToken.orValue(0))",
			fmt.Sprintf("'only %s and members of %s may change leaseDurationSeconds, lockDelaySeconds or minFencingToken of an existing lease; ' + variables.user + ' may only queue, renew and withdraw its own requests'", ctrl, admins)),
		// ValidateDelete: deleting a held lease deposes its holder.
		rule("request.operation != 'DELETE' || variables.admin || variables.cleanup || variables.holder == ''",
			fmt.Sprintf("'fencedlease ' + request.namespace + '/' + request.name + ' is held by ' + variables.tenure + ' (holder/token): only %s may delete a held lease; release it first (kubectl fence release)'", others)),
	}
}

// foreignRequests is the message of a request the requester may not add.
func foreignRequests(list string) string {
	return list + `.map(r, 'spec.requests (holderIdentity ' + r.holderIdentity + ') names user ' + r.user + ', but the request comes from ' + variables.user +
  (size(variables.pod) == 1 ? ' (pod ' + variables.pod[0] + ')' : '') + ': a client can request the lease only for itself (user must equal its own username' +
  (variables.binding == 'ServiceAccount' ? '; identityBinding ServiceAccount: holderIdentity must equal the username' : variables.binding == 'Pod' ? '; identityBinding Pod: holderIdentity must equal the pod name of a pod-bound service-account token' : '') + ')').join('; ')`
}

// LeasePolicy is the ValidatingAdmissionPolicy for FencedLeases (I6).
func (s Settings) LeasePolicy() *admissionregistrationv1.ValidatingAdmissionPolicy {
	return newPolicy(LeasePolicyName, admissionregistrationv1.ValidatingAdmissionPolicySpec{
		MatchConstraints: &admissionregistrationv1.MatchResources{
			ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{coordv1alpha1.GroupVersion.Group}, APIVersions: []string{"*"},
					Resources: []string{"fencedleases", "fencedleases/*"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
			}}},
		},
		MatchConditions: []admissionregistrationv1.MatchCondition{{
			Name: "not-the-controller",
			Expression: fmt.Sprintf("!(request.userInfo.username in %s) || (request.operation == 'CREATE' && request.namespace in %s)",
				celList(s.ControllerUsers), celList(s.ExcludedNamespaces)),
		}},
		Variables:   s.leaseVariables(),
		Validations: s.leaseValidations(),
	})
}

// LeaseBinding binds LeasePolicy to every FencedLease.
func (s Settings) LeaseBinding() *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return bindEverywhere(LeasePolicyName)
}
