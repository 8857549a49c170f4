// Package policy is kubefence's policy enforcement mode
// (--enforcement=policy): fencing judged inside the API server by a
// ValidatingAdmissionPolicy, with no webhook in the write path of guarded
// objects. It holds the policies the operator generates and keeps current,
// the tenure table each policy decision reads (one ConfigMap per lease
// namespace, written only by the controller, on grants and tenure ends), and
// the propagation barrier that proves every API server enforces a grant
// before its holder can learn of it (docs/design.md, "Policy mode").
//
// It imports only api/ among kubefence packages (the epoch store's shard
// names, which its policies protect, are there); it must not import
// controllers/fencedlease, the webhooks, the operator assembly (controllers/operator wires it),
// pkg/fence, or any test or hack package. controllers/fencedlease must not
// import it: the reconciler reaches policy mode through its TenureTable hook.
package policy

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// Names of the objects policy mode installs.
const (
	// FencingPolicyName is the ValidatingAdmissionPolicy that fences guarded
	// objects; GuardedBindingName binds it to every guarded object,
	// RequiredBindingName to the required kinds in namespaces labelled
	// kubefence.io/fencing=required.
	FencingPolicyName   = coordv1alpha1.FencingPolicyName
	GuardedBindingName  = "kubefence-fencing-guarded"
	RequiredBindingName = "kubefence-fencing-required"
	// TerminatingPolicyName judges guarded objects in the namespaces the
	// operator has marked as being deleted (TerminatingLabel), where the
	// guarded and required bindings no longer apply: only the clean-up
	// users' clean-up writes are accepted there, tenure table or not; its
	// binding has the same name.
	TerminatingPolicyName = "kubefence-fencing-terminating"
	// TerminatingLabel, set to "true" by the operator (NamespaceMarker) on
	// a namespace being deleted, moves its guarded objects from the fencing
	// policy to TerminatingPolicyName (docs/design.md, "A terminating
	// namespace").
	TerminatingLabel = "kubefence.io/terminating"
	// ClusterScopedPolicyName refuses the guard on cluster-scoped objects:
	// the label names a FencedLease in the object's namespace, and a
	// cluster-scoped object has none, so nothing could check its token
	// (docs/design.md, I5); its binding has the same name.
	ClusterScopedPolicyName = "kubefence-fencing-cluster-scoped"
	// TablePolicyName refuses writes to the tenure tables from anyone but
	// the controller (and deletes from the cluster's clean-up controllers);
	// its binding has the same name.
	TablePolicyName = "kubefence-tenures"
	// FieldManager is the server-side apply field manager of the policies.
	FieldManager = "kubefence-operator"
	// IncarnationAnnotation, on the fencing policy, holds the incarnation
	// its CEL trusts tenure tables of (Settings.Incarnation).
	IncarnationAnnotation = "kubefence.io/table-incarnation"
	// IncarnationKey is the tenure table's data key naming the incarnation
	// of the fencing policy it was written for. Lease names never start
	// with "_", so it names no lease.
	IncarnationKey = "_incarnation"
)

// Settings are what the generated policies depend on.
type Settings struct {
	// ExcludedNamespaces are never fenced (the operator's namespace and
	// kube-system, I7).
	ExcludedNamespaces []string
	// ControllerUsers may write the tenure tables.
	ControllerUsers []string
	// AdminGroups may act as operators on FencedLeases (settings, others'
	// requests, revocation, ownerReferences, finalizers, deleting a held
	// lease); empty: system:masters. Only LeasePolicy reads them.
	AdminGroups []string
	// CleanupUsers may delete guarded objects (and the tables) without a
	// lease, and update guarded objects' finalizers and ownerReferences.
	CleanupUsers []string
	// RequiredKinds are the resources whose unguarded writes are refused in
	// namespaces labelled kubefence.io/fencing=required.
	RequiredKinds []schema.GroupResource
	// Incarnation is this installation's mark on the tenure tables: the
	// fencing policy trusts a table only when its IncarnationKey holds it
	// (Apply keeps the installed policy's, or draws a new one when there is
	// none; docs/design.md, "Switching modes").
	Incarnation string
	// Owner, if set, is added to every policy and binding as their owner
	// (Owner.Ref: the ClusterRole an uninstall deletes).
	Owner *metav1.OwnerReference
}

// Validate reports settings the policies cannot be generated from.
func (s Settings) Validate() error {
	if len(s.ControllerUsers) == 0 {
		return fmt.Errorf("no controller users: nobody could write the tenure tables %q", coordv1alpha1.TenureTableName)
	}
	for _, u := range append(append([]string(nil), s.ControllerUsers...), s.CleanupUsers...) {
		if u == "" {
			return fmt.Errorf("an empty user name in the controller or clean-up users")
		}
	}
	for _, g := range s.AdminGroups {
		if g == "" {
			return fmt.Errorf("an empty group name in the lease admin groups")
		}
	}
	if s.Incarnation != "" && !incarnationPattern.MatchString(s.Incarnation) {
		return fmt.Errorf("incarnation %q: expected 1 to 64 letters and digits", s.Incarnation)
	}
	for _, k := range s.RequiredKinds {
		if k.Resource == "" || strings.ContainsAny(k.Resource+k.Group, "'\\ ") {
			return fmt.Errorf("required kind %q: expected <resource>.<group> (plural resource, e.g. widgets.example.kubefence.io, or configmaps for the core group)", k.String())
		}
	}
	return nil
}

var incarnationPattern = regexp.MustCompile(`^[a-zA-Z0-9]{1,64}$`)

// ParseGroupResource reads "<resource>.<group>" ("configmaps" for the core
// group), the spelling of --required-fencing-kind.
func ParseGroupResource(s string) (schema.GroupResource, error) {
	gr := schema.ParseGroupResource(s)
	if gr.Resource == "" || strings.Contains(gr.Resource, "/") || strings.ToLower(s) != s {
		return gr, fmt.Errorf("%q is not <resource>.<group>: expected a lower-case plural resource and its group, e.g. widgets.example.kubefence.io, or deployments.apps", s)
	}
	return gr, nil
}

// celList spells strings as a CEL list literal (the values are checked by
// Validate or are Kubernetes names, which cannot contain quotes).
func celList(values []string) string {
	q := make([]string, len(values))
	for i, v := range values {
		q[i] = strconv.Quote(v)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func kindKeys(kinds []schema.GroupResource) []string {
	keys := make([]string, 0, len(kinds))
	for _, k := range kinds {
		keys = append(keys, k.Group+"/"+k.Resource)
	}
	sort.Strings(keys)
	return keys
}

// notLeases keeps Leases and FencedLeases (and their subresources) out of
// every fencing policy (I7): resource rules the API server matches before
// any CEL runs (a matchCondition cost a CEL evaluation on every guarded
// write).
func notLeases(scope admissionregistrationv1.ScopeType) []admissionregistrationv1.NamedRuleWithOperations {
	return []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{"coordination.k8s.io", coordv1alpha1.GroupVersion.Group}, APIVersions: []string{"*"},
			Resources: []string{"*/*"}, Scope: ptr.To(scope)},
	}}}
}

// guardedObjects matches the objects that carry the guard label, in the
// namespaces that meet every one of namespaces.
func guardedObjects(namespaces ...metav1.LabelSelectorRequirement) *admissionregistrationv1.MatchResources {
	return &admissionregistrationv1.MatchResources{
		ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: guardLabel, Operator: metav1.LabelSelectorOpExists}}},
		NamespaceSelector: &metav1.LabelSelector{MatchExpressions: namespaces},
	}
}

func (s Settings) namespaceNotExcluded() metav1.LabelSelectorRequirement {
	return metav1.LabelSelectorRequirement{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn,
		Values: append([]string(nil), s.ExcludedNamespaces...)}
}

// notTerminating leaves the namespaces marked TerminatingLabel out of the
// fencing policy's bindings: their tenure table may be gone, and a binding
// with parameterNotFoundAction: Deny would then refuse even the clean-up
// users' deletes, before any CEL runs; TerminatingBinding judges them.
var notTerminating = metav1.LabelSelectorRequirement{Key: TerminatingLabel, Operator: metav1.LabelSelectorOpDoesNotExist}

// The fencing rule in CEL, the same rule as controllers/webhooks/fencing
// Decide (docs/design.md, "Policy mode"): the tenure table entry of a lease
// is "<token>" (no holder) or "<token> <attempt> <pod> <user>", where pod is "-"
// without Pod binding. Every refusal is one message: stale ones name the
// lease and the tokens and contain both StaleMarker and NotHolderMarker (a
// policy refusal is a 403, which fence.IsStale recognises by the latter).
const (
	guardLabel = coordv1alpha1.GuardLeaseLabel
	tokenAnn   = coordv1alpha1.FencingTokenAnnotation
)

func (s Settings) variables() []admissionregistrationv1.Variable {
	v := func(name, expr string) admissionregistrationv1.Variable {
		return admissionregistrationv1.Variable{Name: name, Expression: expr}
	}
	// A lease's entry is what follows "\n<lease> " in the table's one
	// string, up to the next line (Table, findLine): split is a byte
	// search, and the string is not copied when the API server converts
	// the parameter, so a decision costs the same however many leases the
	// table holds. Label values contain no line break or space.
	split := func(lease string) string {
		return fmt.Sprintf("variables.table.split('\\n' + %s + ' ', 2)", lease)
	}
	entry := func(split string) string {
		return fmt.Sprintf("size(%[1]s) == 2 ? %[1]s[1].split('\\n', 2)[0].split(' ', 4) : ['']", split)
	}
	canonical := func(t string) string {
		return fmt.Sprintf("(%[1]s.matches('^(0|[1-9][0-9]*)$') && (size(%[1]s) < 19 || (size(%[1]s) == 19 && %[1]s <= '9223372036854775807')))", t)
	}
	return []admissionregistrationv1.Variable{
		v("sub", "request.?subResource.orValue('')"),
		v("oldLease", fmt.Sprintf("oldObject == null ? '' : oldObject.metadata.?labels[?%q].orValue('')", guardLabel)),
		v("newLease", fmt.Sprintf("object == null || request.operation == 'DELETE' ? '' : object.metadata.?labels[?%q].orValue('')", guardLabel)),
		v("hasOldTok", fmt.Sprintf("oldObject != null && oldObject.metadata.?annotations[?%q].hasValue()", tokenAnn)),
		v("oldTok", fmt.Sprintf("oldObject == null ? '' : oldObject.metadata.?annotations[?%q].orValue('')", tokenAnn)),
		v("hasNewTok", fmt.Sprintf("object != null && request.operation != 'DELETE' && object.metadata.?annotations[?%q].hasValue()", tokenAnn)),
		v("newTok", fmt.Sprintf("object == null || request.operation == 'DELETE' ? '' : object.metadata.?annotations[?%q].orValue('')", tokenAnn)),
		v("oldTokOK", canonical("variables.oldTok")),
		v("newTokOK", canonical("variables.newTok")),
		v("guardedOld", "variables.oldLease != ''"),
		v("guardedNew", "variables.newLease != ''"),
		v("metadataWrite", "request.operation != 'DELETE' && (variables.sub == '' || (oldObject != null && object != null && (variables.oldLease != variables.newLease || variables.hasOldTok != variables.hasNewTok || variables.oldTok != variables.newTok)))"),
		podStatusKeepsGuardVariable(),
		s.cleanupVariable(),
		nodeFinishesVariable(),
		v("required", fmt.Sprintf("namespaceObject.metadata.?labels[?%q].orValue('') == 'required' && (request.resource.group + '/' + request.resource.resource) in %s",
			coordv1alpha1.FencingNamespaceLabel, celList(kindKeys(s.RequiredKinds)))),
		// A table written for another installation of the fencing policy
		// (before a switch to webhook mode and back, say) may name tenures
		// that have ended since: nothing it says is trusted.
		v("tableCurrent", fmt.Sprintf("params.?data[?%q].orValue('') == %q && %q in params.data && size(params.data) == 2", IncarnationKey, s.Incarnation, coordv1alpha1.TenureTableKey)),
		v("table", fmt.Sprintf("params.?data[?%q].orValue('')", coordv1alpha1.TenureTableKey)),
		v("oldScope", "request.namespace + '/' + variables.oldLease"),
		v("newScope", "request.namespace + '/' + variables.newLease"),
		v("oldSplit", split("variables.oldLease")),
		v("newSplit", split("variables.newLease")),
		v("oldEntry", entry("variables.oldSplit")),
		v("newEntry", entry("variables.newSplit")),
		v("podName", fmt.Sprintf("request.userInfo.?extra[?%q].orValue([])", coordv1alpha1.PodNameExtraKey)),
		v("what", "variables.sub != '' ? 'writes to /' + variables.sub : 'tokenless writes'"),
		// checkHolder(lease) of the webhook, for the old and the new lease.
		v("holderOld", holderCheck("variables.oldEntry", "variables.oldScope")),
		v("holderNew", holderCheck("variables.newEntry", "variables.newScope")),
		// checkToken(newLease): with and without the token the object accepted.
		v("tokenNew", tokenCheck(false)),
		v("tokenNewAccepted", tokenCheck(true)),
		v("verdict", `variables.cleanup ? '' :
(!variables.guardedOld && !variables.guardedNew) ? (variables.required ?
    'fencing is required for this kind in namespace ' + request.namespace + ': label the object `+guardLabel+`=<lease name> and annotate it `+tokenAnn+`=<token>' : '') :
(variables.required && variables.metadataWrite && variables.guardedOld && !variables.guardedNew) ?
    'fencing is required for this kind in namespace ' + request.namespace + ': the guard label `+guardLabel+` cannot be removed' :
!variables.tableCurrent ?
    'the tenure table `+coordv1alpha1.TenureTableName+` of namespace ' + request.namespace + ' was not written for the installed fencing policy (it is left from an earlier installation of policy mode, or the policy was reinstalled): no guarded write is accepted until the kubefence controller has rewritten it from the leases' :
(variables.guardedOld && (!variables.metadataWrite || !variables.guardedNew || variables.newLease != variables.oldLease)) ?
    ((variables.holderOld != '' || !variables.metadataWrite || !variables.guardedNew) ? variables.holderOld : variables.tokenNew) :
(variables.guardedOld && variables.hasOldTok && variables.hasNewTok && variables.oldTok == variables.newTok) ?
    ((variables.newTokOK && variables.newEntry[0] != '' && int(variables.newTok) < int(variables.newEntry[0])) ?
        '`+coordv1alpha1.StaleMarker+` ' + variables.newTok + ' for lease ' + variables.newScope + ': current token is ' + variables.newEntry[0] + ' (the writer `+coordv1alpha1.NotHolderMarker+` ' + variables.newScope + ')' :
        variables.holderNew) :
(variables.guardedOld && variables.hasOldTok && variables.oldTokOK) ? variables.tokenNewAccepted : variables.tokenNew`),
	}
}

// commonWrite accepts, in few steps, the writes of a guarded object a
// fenced client makes all day, which the verdict accepts too: a create with
// the lease's current token, and the holder's update of the object itself
// that keeps its guard, with the current token (the object's own token,
// if any, the same). Pod binding, subresources, deletes, a token that
// moves, and everything else take the verdict. It reads no variable: the
// API server resolves each reference to a variable through a regular
// expression (k8s.io/apiserver cel/lazy MapValue.Find), which cost more
// than the rest of a decision. A single-element list's all() binds a
// value, as cel.bind would (not in the API server's CEL environment).
// It cannot fail: it is the fencing policy's matchCondition, whose error
// refuses the write (failurePolicy Fail) with the error as its message.
// An entry's token is written by the controller, canonically
// (Entry.encode), so a token equal to it passes the verdict's checks. The
// barrier's probes are creates: one with the new token passes here only
// if the API server's copy of the table names it.
func (s Settings) commonWrite() string {
	return strings.NewReplacer("@LABEL", strconv.Quote(guardLabel), "@ANN", strconv.Quote(tokenAnn), "@INCARNATION", strconv.Quote(s.Incarnation),
		"@INCKEY", strconv.Quote(IncarnationKey), "@TABLE", strconv.Quote(coordv1alpha1.TenureTableKey)).Replace(
		`((request.operation == 'CREATE' || (request.operation == 'UPDATE' && request.?subResource.orValue('') == '')) &&
params.?data[?@INCKEY].orValue('') == @INCARNATION && size(params.data) == 2 &&
[object.metadata.?labels[?@LABEL].orValue('')].all(lease, lease != '' &&
 [object.metadata.?annotations[?@ANN].orValue('')].all(tok, tok != '' &&
  [params.data[?@TABLE].orValue('').split('\n' + lease + ' ', 2)].all(found, size(found) == 2 &&
   [found[1].split('\n', 2)[0].split(' ', 4)].all(e, size(e) == 4 && e[0] == tok &&
    (request.operation == 'CREATE' ||
     (request.userInfo.username == e[3] && e[2] == '-' &&
      oldObject.metadata.?labels[?@LABEL].orValue('') == lease &&
      oldObject.metadata.?annotations[?@ANN].orValue(tok) == tok)))))))`)
}

// The exemptions (the webhook's Decide and checkHolder) are self-contained
// variables, in this order: the fencing policy and TerminatingPolicy both
// judge with them.

// podStatusKeepsGuardVariable is the webhook's podStatusKeepsGuard: an update
// of a Pod's /status that changes neither the guard label nor the token
// annotation.
func podStatusKeepsGuardVariable() admissionregistrationv1.Variable {
	return admissionregistrationv1.Variable{Name: "podStatusKeepsGuard", Expression: fmt.Sprintf("request.resource.group == '' && request.resource.resource == 'pods' && "+
		"request.operation == 'UPDATE' && request.?subResource.orValue('') == 'status' && oldObject != null && object != null && "+
		"oldObject.metadata.?labels[?%[1]q].orValue('') == object.metadata.?labels[?%[1]q].orValue('') && "+
		"oldObject.metadata.?annotations[?%[2]q].hasValue() == object.metadata.?annotations[?%[2]q].hasValue() && "+
		"oldObject.metadata.?annotations[?%[2]q].orValue('') == object.metadata.?annotations[?%[2]q].orValue('')", guardLabel, tokenAnn)}
}

// nodeFinishesVariable is the webhook's nodeFinishes (the node rule): the
// kubelet of the node a pod is bound to writes its /status (guard and token
// unchanged) and finishes its deletion once started.
func nodeFinishesVariable() admissionregistrationv1.Variable {
	return admissionregistrationv1.Variable{Name: "nodeFinishes", Expression: fmt.Sprintf("request.resource.group == '' && request.resource.resource == 'pods' && oldObject != null && "+
		"oldObject.?spec.?nodeName.orValue('') != '' && request.userInfo.username == %q + oldObject.spec.nodeName && %q in request.userInfo.?groups.orValue([]) && "+
		"(variables.podStatusKeepsGuard || (request.operation == 'DELETE' && request.?subResource.orValue('') == '' && oldObject.metadata.?deletionTimestamp.hasValue()))",
		coordv1alpha1.NodeUserPrefix, coordv1alpha1.NodesGroup)}
}

// cleanupVariable is the clean-up exemption: a clean-up user's DELETE, its
// UPDATE that changes nothing but finalizers, ownerReferences and what the
// API server sets itself, and its Pod /status write that keeps guard and
// token (variables.podStatusKeepsGuard).
func (s Settings) cleanupVariable() admissionregistrationv1.Variable {
	ignored := "['finalizers', 'ownerReferences', 'resourceVersion', 'managedFields', 'generation']"
	return admissionregistrationv1.Variable{Name: "cleanup", Expression: fmt.Sprintf("request.userInfo.username in %s && (request.operation == 'DELETE' || variables.podStatusKeepsGuard || (request.operation == 'UPDATE' && "+
		"object.all(k, k == 'metadata' || (k in oldObject && object[k] == oldObject[k])) && oldObject.all(k, k in object) && "+
		"object.metadata.all(k, k in %[2]s || (k in oldObject.metadata && object.metadata[k] == oldObject.metadata[k])) && "+
		"oldObject.metadata.all(k, k in %[2]s || k in object.metadata)))", celList(s.CleanupUsers), ignored)}
}

// holderCheck is the webhook's checkHolder: the requester must be the
// lease's current holder and the object must not be ahead of the lease, or
// the write is a kubelet's that the node rule lets through.
func holderCheck(entry, scope string) string {
	return strings.NewReplacer("ENTRY", entry, "SCOPE", scope).Replace(`variables.nodeFinishes ? '' :
ENTRY[0] == '' ?
    'lease ' + SCOPE + ' has no entry in the tenure table ` + coordv1alpha1.TenureTableName + ` (it does not exist, or has never been granted): the ` + guardLabel + ` label must name a FencedLease in the object\'s namespace' :
(variables.hasOldTok && variables.oldTokOK && int(variables.oldTok) > int(ENTRY[0])) ?
    '` + coordv1alpha1.StaleMarker + `: the object already accepted token ' + variables.oldTok + ', above the current token ' + ENTRY[0] + ' of lease ' + SCOPE + ' (the writer ` + coordv1alpha1.NotHolderMarker + ` ' + SCOPE + ')' :
size(ENTRY) < 4 ?
    '` + coordv1alpha1.StaleMarker + `: the writer ` + coordv1alpha1.NotHolderMarker + ` ' + SCOPE + ': it has no holder (token ' + ENTRY[0] + ' was released or expired), so nobody may write this object without a token' :
(request.userInfo.username != ENTRY[3] || (ENTRY[2] != '-' && variables.podName != [ENTRY[2]])) ?
    request.userInfo.username + (size(variables.podName) == 1 ? ' (pod ' + variables.podName[0] + ')' : '') + ' ` + coordv1alpha1.NotHolderMarker + ` ' + SCOPE + ' (held with token ' + ENTRY[0] + '): ' + variables.what + ' and deletes of a guarded object, and removing or moving its guard, are accepted only from the current holder' :
''`)
}

// tokenCheck is the webhook's checkToken for the new lease.
func tokenCheck(accepted bool) string {
	acceptedCheck := ""
	if accepted {
		acceptedCheck = `(int(variables.newTok) < int(variables.oldTok)) ?
    '` + coordv1alpha1.StaleMarker + ` ' + variables.newTok + ' for lease ' + variables.newScope + ': the object already accepted token ' + variables.oldTok + ' (the writer ` + coordv1alpha1.NotHolderMarker + ` ' + variables.newScope + ')' :
`
	}
	return `!variables.hasNewTok ?
    'missing fencing token: objects guarded by lease ' + variables.newScope + ' need annotation ` + tokenAnn + `=<token of the current holder>' :
!variables.newTokOK ?
    'invalid fencing token for lease ' + variables.newScope + ': annotation ` + tokenAnn + `="' + variables.newTok + '" is not a non-negative decimal integer written canonically (no sign, no leading zeros, at most 9223372036854775807)' :
` + acceptedCheck + `variables.newEntry[0] == '' ?
    'lease ' + variables.newScope + ' has no entry in the tenure table ` + coordv1alpha1.TenureTableName + ` (it does not exist, or has never been granted): the ` + guardLabel + ` label must name a FencedLease in the object\'s namespace' :
(int(variables.newTok) < int(variables.newEntry[0])) ?
    '` + coordv1alpha1.StaleMarker + ` ' + variables.newTok + ' for lease ' + variables.newScope + ': current token is ' + variables.newEntry[0] + ' (the writer ` + coordv1alpha1.NotHolderMarker + ` ' + variables.newScope + ')' :
(int(variables.newTok) > int(variables.newEntry[0])) ?
    'fencing token ' + variables.newTok + ' for lease ' + variables.newScope + ' was never issued: current token is ' + variables.newEntry[0] :
size(variables.newEntry) < 4 ?
    '` + coordv1alpha1.StaleMarker + ` ' + variables.newTok + ' for lease ' + variables.newScope + ': the lease has no holder (token ' + variables.newEntry[0] + ' was released or expired; the writer ` + coordv1alpha1.NotHolderMarker + ` ' + variables.newScope + ')' :
''`
}

// FencingPolicy is the ValidatingAdmissionPolicy for guarded objects. It
// trusts the tenure tables marked with s.Incarnation only, and names it in
// its IncarnationAnnotation.
func (s Settings) FencingPolicy() *admissionregistrationv1.ValidatingAdmissionPolicy {
	p := newPolicy(FencingPolicyName, admissionregistrationv1.ValidatingAdmissionPolicySpec{
		ParamKind:        &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
		MatchConstraints: guardedWrites(),
		// A common write is accepted here, before the validation: the API
		// server evaluates a policy's validations and every
		// messageExpression, the write accepted or not (k8s.io/apiserver
		// validating validator.Validate), each in an activation of its own
		// with every variable declared.
		MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "not-a-common-write", Expression: "!" + s.commonWrite()}},
		Variables:       s.variables(),
		Validations: []admissionregistrationv1.Validation{{
			Expression:        "variables.verdict == ''",
			MessageExpression: "variables.verdict",
			Reason:            ptr.To(metav1.StatusReasonForbidden),
		}},
	})
	p.Annotations = map[string]string{IncarnationAnnotation: s.Incarnation}
	return p
}

// guardedWrites are the writes the fencing policies may judge: CREATE,
// UPDATE and DELETE of every namespaced kind and of the subresources whose
// object is the guarded object itself.
func guardedWrites() *admissionregistrationv1.MatchResources {
	return &admissionregistrationv1.MatchResources{
		MatchPolicy: ptr.To(admissionregistrationv1.Equivalent),
		ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
			Rule: admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"},
				Resources: []string{"*", "*/status", "pods/ephemeralcontainers", "pods/resize"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
		}}},
		ExcludeResourceRules: notLeases(admissionregistrationv1.NamespacedScope),
	}
}

// TerminatingPolicy judges guarded objects in the namespaces marked
// TerminatingLabel: it needs no tenure table (a terminating namespace's
// may be gone, and none can be created there), and accepts only the
// clean-up users' clean-up writes and the kubelets' writes of the node
// rule, which the fencing policy accepts whatever the tenure
// (variables.cleanup and variables.nodeFinishes, the same expressions: a
// pod the namespace controller deletes gracefully is gone only after its
// kubelet's final delete); every other write is refused, the holder's too.
// A namespace marked while it is not being deleted is refused with a
// message that says so.
func (s Settings) TerminatingPolicy() *admissionregistrationv1.ValidatingAdmissionPolicy {
	return newPolicy(TerminatingPolicyName, admissionregistrationv1.ValidatingAdmissionPolicySpec{
		MatchConstraints: guardedWrites(),
		Variables:        []admissionregistrationv1.Variable{podStatusKeepsGuardVariable(), s.cleanupVariable(), nodeFinishesVariable()},
		Validations: []admissionregistrationv1.Validation{{
			Expression: "variables.cleanup || variables.nodeFinishes",
			MessageExpression: fmt.Sprintf("namespaceObject.status.?phase.orValue('') == 'Terminating' ? "+
				"'namespace ' + request.namespace + ' is being deleted: a guarded object there accepts only deletes and finalizer or ownerReference updates from the clean-up controllers of the cluster, and a pod also the status writes and final delete of its node (this was ' + request.operation + ' by ' + request.userInfo.username + ')' : "+
				"'namespace ' + request.namespace + ' is labelled %[1]s but is not being deleted: no write to a guarded object is accepted until the label is removed (the kubefence operator sets it on namespaces being deleted)'", TerminatingLabel),
			Reason: ptr.To(metav1.StatusReasonForbidden),
		}},
	})
}

// TerminatingBinding binds TerminatingPolicy to every guarded object in the
// namespaces marked TerminatingLabel (outside the excluded ones).
func (s Settings) TerminatingBinding() *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	b := bindEverywhere(TerminatingPolicyName)
	b.Spec.MatchResources = guardedObjects(
		metav1.LabelSelectorRequirement{Key: TerminatingLabel, Operator: metav1.LabelSelectorOpExists}, s.namespaceNotExcluded())
	return b
}

// ClusterScopedPolicy refuses every create and update that leaves the guard
// label on a cluster-scoped object, the webhook's uncheckable rule
// (controllers/webhooks/fencing): deletes, and updates that remove the label,
// pass, so that an object guarded before the rule can be cleaned up. It needs
// no tenure table: there is no namespace to read one from.
func (s Settings) ClusterScopedPolicy() *admissionregistrationv1.ValidatingAdmissionPolicy {
	return newPolicy(ClusterScopedPolicyName, admissionregistrationv1.ValidatingAdmissionPolicySpec{
		MatchConstraints: &admissionregistrationv1.MatchResources{
			MatchPolicy: ptr.To(admissionregistrationv1.Equivalent),
			ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"},
					Resources: []string{"*", "*/status"}, Scope: ptr.To(admissionregistrationv1.ClusterScope)},
			}}},
			ExcludeResourceRules: notLeases(admissionregistrationv1.ClusterScope),
		},
		Validations: []admissionregistrationv1.Validation{{
			Expression: fmt.Sprintf("!object.metadata.?labels[?%q].hasValue()", guardLabel),
			Message: fmt.Sprintf("this object is cluster-scoped, so no FencedLease can check its fencing guard (the %s label names a lease in the object's own namespace, and it has none): remove the %s label and the %s annotation, or keep the object in a namespace and guard it there with a lease of that namespace",
				guardLabel, guardLabel, tokenAnn),
			Reason: ptr.To(metav1.StatusReasonForbidden),
		}},
	})
}

// ClusterScopedBinding binds ClusterScopedPolicy to the cluster-scoped
// objects that carry the guard label (the objectSelector keeps every other
// cluster-scoped write out), outside the excluded namespaces (a Namespace
// object is matched by its own labels).
func (s Settings) ClusterScopedBinding() *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	b := bindEverywhere(ClusterScopedPolicyName)
	b.Spec.MatchResources = guardedObjects(s.namespaceNotExcluded())
	return b
}

func (s Settings) binding(name string, match *admissionregistrationv1.MatchResources) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: FencingPolicyName,
			// The lease namespace's tenure table, by its fixed name, in the
			// object's own namespace (namespace unset); none: refused.
			ParamRef: &admissionregistrationv1.ParamRef{Name: coordv1alpha1.TenureTableName,
				ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction)},
			MatchResources:    match,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
}

// GuardedBinding binds the fencing policy to every guarded object outside
// the excluded namespaces and the terminating ones (TerminatingBinding).
func (s Settings) GuardedBinding() *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return s.binding(GuardedBindingName, guardedObjects(s.namespaceNotExcluded(), notTerminating))
}

// RequiredBinding binds the fencing policy to every object of the required
// kinds in namespaces labelled kubefence.io/fencing=required (but the
// terminating ones: nothing can be created there); nil without required
// kinds.
func (s Settings) RequiredBinding() *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	if len(s.RequiredKinds) == 0 {
		return nil
	}
	var rules []admissionregistrationv1.NamedRuleWithOperations
	for _, k := range s.RequiredKinds {
		rules = append(rules, admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
			Rule: admissionregistrationv1.Rule{APIGroups: []string{k.Group}, APIVersions: []string{"*"},
				Resources: []string{k.Resource, k.Resource + "/status"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
		}})
	}
	match := &admissionregistrationv1.MatchResources{
		ResourceRules: rules,
		NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: coordv1alpha1.FencingNamespaceLabel, Operator: metav1.LabelSelectorOpIn, Values: []string{"required"}},
			s.namespaceNotExcluded(), notTerminating}},
	}
	if slices.Contains(s.RequiredKinds, schema.GroupResource{Resource: "configmaps"}) {
		// The operator's own ConfigMaps in lease namespaces carry no guard.
		// Left out by name here (a binding cannot see the writer, and the
		// first table of a namespace is the parameter itself, which a
		// matchCondition would see too late); TablePolicy lets
		// only the controller write them.
		match.ExcludeResourceRules = []admissionregistrationv1.NamedRuleWithOperations{{
			ResourceNames: OperatorConfigMaps(),
			RuleWithOperations: admissionregistrationv1.RuleWithOperations{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"},
					Resources: []string{"configmaps"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
			}}}
	}
	return s.binding(RequiredBindingName, match)
}

// OperatorConfigMaps are the names of the ConfigMaps the operator writes in
// lease namespaces: the tenure table and the epoch store's shards.
func OperatorConfigMaps() []string {
	return append([]string{coordv1alpha1.TenureTableName}, coordv1alpha1.EpochShardNames()...)
}

// newPolicy is the fail-closed ValidatingAdmissionPolicy name with spec.
func newPolicy(name string, spec admissionregistrationv1.ValidatingAdmissionPolicySpec) *admissionregistrationv1.ValidatingAdmissionPolicy {
	spec.FailurePolicy = ptr.To(admissionregistrationv1.Fail)
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       spec,
	}
}

// TablePolicy refuses writes to the tenure tables and the epoch store's
// shards (OperatorConfigMaps) from anyone but the controller users; the
// clean-up users may delete them (with their namespace).
func (s Settings) TablePolicy() *admissionregistrationv1.ValidatingAdmissionPolicy {
	return newPolicy(TablePolicyName, admissionregistrationv1.ValidatingAdmissionPolicySpec{
		MatchConstraints: &admissionregistrationv1.MatchResources{
			ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				ResourceNames: OperatorConfigMaps(),
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"},
						Resources: []string{"configmaps"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
				}}},
		},
		Validations: []admissionregistrationv1.Validation{{
			Expression: fmt.Sprintf("request.userInfo.username in %s || (request.operation == 'DELETE' && request.userInfo.username in %s)",
				celList(s.ControllerUsers), celList(s.CleanupUsers)),
			MessageExpression: fmt.Sprintf("(request.name == %q ? 'the tenure table %s holds the current fencing token of every lease in namespace ' + request.namespace : "+
				"'the epoch store shard ' + request.name + ' holds the highest fencing tokens of deleted leases in namespace ' + request.namespace) + "+
				"' and is written only by the kubefence controller, not by ' + request.userInfo.username", coordv1alpha1.TenureTableName, coordv1alpha1.TenureTableName),
			Reason: ptr.To(metav1.StatusReasonForbidden),
		}},
	})
}

// TableBinding binds TablePolicy everywhere.
func (s Settings) TableBinding() *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return bindEverywhere(TablePolicyName)
}

// bindEverywhere is a binding of the policy called name, of the same name,
// to everything the policy matches, denying what it refuses.
func bindEverywhere(name string) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
}
