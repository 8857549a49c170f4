// Package fencing is the admission webhook that makes guarded objects refuse
// writes carrying a stale fencing token (invariants I4, I5, I7).
//
// It owns the rule (decision.go: Decide, a pure function), the live
// single-flight lease reader (leases.go) with its fair turns of the read
// budget (turns.go), the admission handler with its three paths
// (handler.go) and the clock-offset sampler (clockoffset.go). The rule's
// cases are one table, test/ruletable.FencingRows, which
// TestFencingRuleTable runs against this webhook and against the policy's
// CEL rendering (controllers/policy) in process, FuzzDecide compares the two
// on random writes, and test/enforcement replays on a real API server in
// both modes; the tests of this package's own parts (the clock's cut-off,
// the lease reader, the handler) are beside them, and test/tenure has the
// scenarios.
//
// It imports only the API (api/v1alpha1), the clock contract
// (pkg/fence/timing), controllers/metrics, client-go, apimachinery and
// controller-runtime. It must not import the reconciler
// (controllers/fencedlease), the FencedLease webhook, the assembly
// (controllers/operator), the rest of pkg/fence, or any test or hack package.
package fencing

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence/timing"
)

// Object is what the decision needs of one version of a guarded object.
type Object struct {
	// Lease is the value of the kubefence.io/lease label ("" when unguarded).
	Lease string
	// Token is the raw kubefence.io/fencing-token annotation; HasToken tells an
	// empty value from a missing one.
	Token    string
	HasToken bool
	// Owners are the object's ownerReferences as "Kind/name" (for warnings).
	Owners []string
	// NodeName is a Pod's spec.nodeName (the node it is bound to); Deleting
	// tells whether metadata.deletionTimestamp is set (its deletion has
	// started). Both serve the node rule (nodeFinishes).
	NodeName string
	Deleting bool
}

// LeaseState is the webhook's view of one FencedLease.
type LeaseState struct {
	Exists bool
	// Token is status.fencingToken: the current token while Holder is set, the
	// last one otherwise.
	Token int64
	// Holder is status.holderIdentity; HolderUser is the user of the holder's request.
	Holder, HolderUser string
	Binding            coordv1alpha1.IdentityBinding
	// ExpireTime is status.expireTime. Zero with a holder set means the status
	// is malformed: the tenure counts as expired (fail closed).
	ExpireTime time.Time
	// RenewStamp is the holder's request's renewTime: when it sent its latest
	// renewal, never later than the webhook's clock plus its skew when the
	// renewal was admitted (the FencedLease webhook refuses later ones), so
	// RenewStamp - Skew + LeaseDuration is a lower bound of the controller's
	// expiry for it (zero: not stamped).
	RenewStamp time.Time
	// LeaseDuration is the tenure's status.leaseDurationSeconds; it caps the
	// cut-off margin before ExpireTime (see Input.CommitLag).
	LeaseDuration time.Duration
	// TokenBase is status.tokenBase: every token up to it was issued by an
	// earlier incarnation of the lease (before a delete-then-recreate) or is
	// below the administrator's minFencingToken.
	TokenBase int64
}

// Requester is who sent the write.
type Requester struct {
	Username string
	// Groups are the requester's groups: a kubelet is user
	// system:node:<node> in group system:nodes (nodeFinishes).
	Groups []string
	// PodName comes from a pod-bound service-account token (may be empty).
	PodName string
	// Cleanup is true for the cluster's own clean-up controllers (the
	// namespace controller, the garbage collector; PodGC and taint eviction
	// where an administrator adds them): their DELETEs of guarded objects,
	// their UPDATEs that change nothing but finalizers and ownerReferences
	// (finishing foreground and orphan cascades), and their Pod /status
	// writes that keep guard and token (the phase or condition set before
	// deleting a pod) are accepted without a lease (see Handler.CleanupUsers).
	Cleanup bool
}

// DefaultCleanupUsers are the users whose DELETEs of guarded objects (and
// updates of only finalizers and ownerReferences) are accepted without holding
// the lease: kube-controller-manager's namespace controller and garbage
// collector, as they authenticate with --use-service-account-credentials (the
// kubeadm default). Without them a namespace holding guarded objects could
// never finish terminating, and cascades could not finish.
//
// system:kube-controller-manager is deliberately not a default: without
// --use-service-account-credentials every controller of kube-controller-manager
// (job, replicaset, ttl-after-finished...) runs as that user, and exempting it
// would exempt them all. Clusters that run that way add it with
// --fencing-cleanup-user and accept that (docs/operations.md).
//
// What an exemption leaves open: the garbage collector deletes a guarded
// object because its owner was deleted, and the owner's deletion is fenced
// only if the owner is guarded by the same lease. The webhook warns on every
// guarded write that sets ownerReferences (docs/design.md).
//
// PodGC (system:serviceaccount:kube-system:pod-garbage-collector) and taint
// eviction with node lifecycle (system:serviceaccount:kube-system:node-controller)
// are not defaults either: only clusters that guard Pods themselves, not
// through their owners, need them, and add them (docs/design.md, "Guarded
// Pods on real nodes").
var DefaultCleanupUsers = []string{
	"system:serviceaccount:kube-system:namespace-controller",
	"system:serviceaccount:kube-system:generic-garbage-collector",
}

// Input is one admission request, reduced to what the decision needs.
type Input struct {
	Operation   admissionv1.Operation
	SubResource string
	Namespace   string
	// Pod is true when the object is a core Pod (resource pods of group ""):
	// the only kind the node rule (nodeFinishes) applies to.
	Pod bool
	// Old is nil on CREATE; New is nil on DELETE. On /scale, /eviction and
	// /binding both stand for the parent object.
	Old, New *Object
	// CleanupOnly is true for an UPDATE that changes nothing of the object but
	// metadata.finalizers and metadata.ownerReferences (computed only for
	// Requester.Cleanup).
	CleanupOnly bool
	// Required is true for the required-fencing webhook: an unguarded write, or
	// removing the guard, is refused; guarded writes are left to the guarded
	// webhook (which sees them too), except /scale, which only this one sees.
	Required  bool
	Requester Requester
	// Lease returns the state of a lease, read from the API server after this
	// request arrived (a linearizable read: it reflects every grant and every
	// tenure end committed before the request reached the webhook). Never a
	// cache: a cache can show a tenure that has ended (docs/design.md).
	Lease func(name string) (LeaseState, error)
	// Now is the webhook's clock. A token stops being accepted at its
	// timing.CutOff, and a decision that admits it must answer by its
	// timing.AnswerBy. Skew covers the offset between this clock and the
	// controller's; CommitLag bounds how long an admitted write may take to
	// commit after the decision (the controller never grants the next tenure
	// before the tenure's expiry).
	Now       time.Time
	Skew      time.Duration
	CommitLag time.Duration
}

// Reason classifies a refusal (a bounded metric label); its values are
// declared in api/v1alpha1 (names.go).
type Reason = coordv1alpha1.RefusalReason

// Verdict is the webhook's answer.
type Verdict struct {
	Allowed bool
	// Code is the HTTP status of a refusal: 409 for stale tokens or a lease
	// without holder, 400 for malformed input, 403 for a missing guard or a
	// requester that is not the holder, 404 for an unknown lease, 500 when the
	// lease could not be read.
	Code    int32
	Reason  Reason
	Message string
	// Lease, Presented and Current describe the check, for logs and metrics.
	Lease              string
	Presented, Current int64
	// AnswerBy, when a live tenure admitted the write, is the latest instant
	// on the webhook's clock at which the answer may leave (the tenure's
	// AnswerBy; the earlier one when the write needed two leases): the
	// handler refuses a decision that ends later (it is slow). Zero when no
	// tenure admitted the write.
	AnswerBy time.Time
}

func allow(lease string, presented, current int64) Verdict {
	return Verdict{Allowed: true, Lease: lease, Presented: presented, Current: current}
}

func refuse(code int32, reason Reason, lease string, presented, current int64, format string, args ...any) Verdict {
	return Verdict{Code: code, Reason: reason, Lease: lease, Presented: presented, Current: current, Message: fmt.Sprintf(format, args...)}
}

// Decide is the whole fencing rule for one write. It is pure: the lease
// lookup and the clock are inputs.
func Decide(in Input) Verdict {
	guardedOld := in.Old != nil && in.Old.Lease != ""
	guardedNew := in.New != nil && in.New.Lease != ""
	// A write to a subresource normally changes no metadata (custom resources
	// drop it on /status; /scale, /eviction and /binding carry none). Built-in
	// kinds keep it (pods/status keeps labels and annotations,
	// deployments/status keeps annotations): a subresource write that changes
	// the guard or the token is a metadata write and takes the token rules.
	metadataWrite := in.Operation != admissionv1.Delete && (in.SubResource == "" || guardChanged(in.Old, in.New))

	if in.Requester.Cleanup && (in.Operation == admissionv1.Delete || (in.Operation == admissionv1.Update && in.CleanupOnly) || podStatusKeepsGuard(in)) {
		// Namespace deletion and garbage collection, including the finalizer and
		// ownerReference updates that finish cascades, and the pod status
		// PodGC and taint eviction write before they delete a pod (phase
		// Failed, a DisruptionTarget condition): not a lease holder's write
		// (and, with mandatory fencing, possibly of an object never guarded).
		return allow("", 0, 0)
	}

	if in.Namespace == "" {
		return uncheckable(in, guardedNew)
	}

	if !guardedOld && !guardedNew {
		if in.Required {
			return refuse(403, coordv1alpha1.RefusalUnguarded, "", 0, 0,
				"fencing is required for this kind in namespace %s: label the object %s=<lease name> and annotate it %s=<token>",
				in.Namespace, coordv1alpha1.GuardLeaseLabel, coordv1alpha1.FencingTokenAnnotation)
		}
		return allow("", 0, 0)
	}

	if in.Required {
		if metadataWrite && guardedOld && !guardedNew {
			return refuse(403, coordv1alpha1.RefusalUnguarded, in.Namespace+"/"+in.Old.Lease, 0, 0,
				"fencing is required for this kind in namespace %s: the guard label %s cannot be removed", in.Namespace, coordv1alpha1.GuardLeaseLabel)
		}
		if in.SubResource != "scale" {
			// A guarded object's write reaches the guarded webhook too (its
			// objectSelector matches): check it once, there.
			return allow("", 0, 0)
		}
	}

	// Which lease governs the write: the old one, as long as the object was guarded
	// by it (removing the guard or re-pointing needs its current holder).
	if guardedOld && (!metadataWrite || !guardedNew || in.New.Lease != in.Old.Lease) {
		v := checkHolder(in, in.Old.Lease)
		if !v.Allowed || !metadataWrite || !guardedNew {
			return v
		}
		// Re-pointed at another lease: the new token must be current there
		// too, and the answer must leave in time for both tenures.
		w := checkToken(in, in.New.Lease, nil)
		if w.Allowed && v.AnswerBy.Before(w.AnswerBy) {
			w.AnswerBy = v.AnswerBy
		}
		return w
	}

	// An update that leaves the token as stored did not present one: a plain
	// client's read-modify-write or merge patch inherits the stored token. It is
	// accepted only from the current holder (as a tokenless write).
	if guardedOld && in.Old.HasToken && in.New.HasToken && in.Old.Token == in.New.Token {
		// The inherited token must still be the lease's current one: a holder
		// granted again must not write through a leftover of its old tenure (I4).
		if t, err := parseToken(in.New.Token); err == nil {
			scope := in.Namespace + "/" + in.New.Lease
			st, v := lookup(in, in.New.Lease, t)
			if !v.Allowed {
				return v
			}
			if t < st.Token {
				return refuse(409, coordv1alpha1.RefusalStale, scope, t, st.Token, "%s %d for lease %s: current token is %d", coordv1alpha1.StaleMarker, t, scope, st.Token)
			}
		}
		return checkHolder(in, in.New.Lease)
	}

	// A guarded create or update with a new token in the new object.
	var accepted *int64
	if guardedOld && in.Old.HasToken {
		if t, err := parseToken(in.Old.Token); err == nil {
			accepted = &t
		}
	}
	return checkToken(in, in.New.Lease, accepted)
}

// uncheckable decides a write of a cluster-scoped object: the guard label
// names a FencedLease in the object's namespace and such an object has none,
// so no lease can check its token (docs/design.md, I5, "Cluster-scoped
// objects and other namespaces"). A create or update that leaves the guard on
// the object is refused; a delete, an update that removes the guard (so that
// an object guarded before this rule can be cleaned up) and unguarded writes
// pass, reading no lease. A guard naming a lease of another namespace cannot
// be written (a label value has no "/"): for a namespaced object the lease is
// always the one of that name in the object's own namespace.
func uncheckable(in Input, guardedNew bool) Verdict {
	if !guardedNew || in.Operation == admissionv1.Delete {
		return allow("", 0, 0)
	}
	return refuse(403, coordv1alpha1.RefusalUncheckable, "", 0, 0,
		"this object is cluster-scoped, so no FencedLease can check its fencing guard (the %s label names a lease in the object's own namespace, and it has none): remove the %s label and the %s annotation, or keep the object in a namespace and guard it there with a lease of that namespace",
		coordv1alpha1.GuardLeaseLabel, coordv1alpha1.GuardLeaseLabel, coordv1alpha1.FencingTokenAnnotation)
}

// checkToken checks the token presented in the new object against the token
// the object already accepted (atomic: oldObject is the version being replaced)
// and against the lease.
func checkToken(in Input, lease string, accepted *int64) Verdict {
	scope := in.Namespace + "/" + lease
	if !in.New.HasToken {
		return refuse(400, coordv1alpha1.RefusalMalformed, scope, 0, 0,
			"missing fencing token: objects guarded by lease %s need annotation %s=<token of the current holder>", scope, coordv1alpha1.FencingTokenAnnotation)
	}
	token, err := parseToken(in.New.Token)
	if err != nil {
		return refuse(400, coordv1alpha1.RefusalMalformed, scope, 0, 0, "invalid fencing token for lease %s: %v", scope, err)
	}
	if accepted != nil && token < *accepted {
		return refuse(409, coordv1alpha1.RefusalStale, scope, token, *accepted,
			"%s %d for lease %s: the object already accepted token %d", coordv1alpha1.StaleMarker, token, scope, *accepted)
	}
	st, v := lookup(in, lease, token)
	if !v.Allowed {
		return v
	}
	switch {
	case token < st.Token:
		return refuse(409, coordv1alpha1.RefusalStale, scope, token, st.Token, "%s %d for lease %s: current token is %d", coordv1alpha1.StaleMarker, token, scope, st.Token)
	case token > st.Token && token <= st.TokenBase:
		// Issued before the lease was deleted and created again, or below a
		// raised minFencingToken (nothing granted since): stale, not forged.
		return refuse(409, coordv1alpha1.RefusalStale, scope, token, st.Token,
			"%s %d for lease %s: tokens up to %d were issued before the lease was deleted and created again (or are below its minFencingToken), and it has issued none since (current token is %d)",
			coordv1alpha1.StaleMarker, token, scope, st.TokenBase, st.Token)
	case token > st.Token:
		return refuse(409, coordv1alpha1.RefusalNotIssued, scope, token, st.Token,
			"fencing token %d for lease %s was never issued: current token is %d", token, scope, st.Token)
	}
	return current(in, lease, st, token)
}

// checkHolder fences writes that carry no token of their own (DELETE,
// /status, /scale, removing the guard, re-pointing, updates that leave the
// stored token unchanged): the requester must be the lease's current holder,
// and the object must not have accepted a newer token; or the write is a
// kubelet's that the node rule lets through (nodeFinishes).
func checkHolder(in Input, lease string) Verdict {
	if nodeFinishes(in) {
		// The kubelet reporting the status of a pod bound to its node, or
		// finishing a deletion that has started: not a lease holder's write,
		// and nothing a node could not do to its pods anyway. It needs no
		// lease, not even one that exists (docs/design.md, "Guarded Pods on
		// real nodes").
		return allow("", 0, 0)
	}
	scope := in.Namespace + "/" + lease
	st, v := lookup(in, lease, 0)
	if !v.Allowed {
		return v
	}
	if in.Old != nil && in.Old.HasToken {
		if t, err := parseToken(in.Old.Token); err == nil && t > st.Token {
			// The lease is behind the object: it was deleted and created again,
			// or restored from an older backup, and has not caught up.
			return refuse(409, coordv1alpha1.RefusalStale, scope, 0, st.Token,
				"%s: the object already accepted token %d, above the current token %d of lease %s (was the lease deleted and created again, or restored from an older backup?); it takes a write with a token of at least %d",
				coordv1alpha1.StaleMarker, t, st.Token, scope, t)
		}
	}
	if st.Holder == "" {
		return refuse(409, coordv1alpha1.RefusalNoHolder, scope, 0, st.Token,
			"%s: lease %s has no holder (token %d was released or expired), so nobody may write this object without a token", coordv1alpha1.StaleMarker, scope, st.Token)
	}
	if !isHolder(in.Requester, st) {
		who := in.Requester.Username
		if in.Requester.PodName != "" {
			who += " (pod " + in.Requester.PodName + ")"
		}
		return refuse(403, coordv1alpha1.RefusalNotHolder, scope, 0, st.Token,
			"%s is not the holder of lease %s (held by %s with token %d): %s and deletes of a guarded object, and removing or moving its guard, are accepted only from the current holder",
			who, scope, st.Holder, st.Token, subresourceName(in))
	}
	return current(in, lease, st, st.Token)
}

func subresourceName(in Input) string {
	if in.SubResource != "" {
		return "writes to /" + in.SubResource
	}
	return "tokenless writes"
}

// current checks that the tenure of a token equal to the lease's is live: it
// has a holder, and the webhook's clock is before the tenure's cut-off.
func current(in Input, lease string, st LeaseState, token int64) Verdict {
	scope := in.Namespace + "/" + lease
	if st.Holder == "" {
		return refuse(409, coordv1alpha1.RefusalNoHolder, scope, token, st.Token,
			"%s %d for lease %s: the lease has no holder (token %d was released or expired)", coordv1alpha1.StaleMarker, token, scope, st.Token)
	}
	if st.ExpireTime.IsZero() {
		return refuse(409, coordv1alpha1.RefusalExpired, scope, token, st.Token,
			"%s %d for lease %s: the status names holder %s but no expireTime, so its tenure cannot be shown to be live (refusing, fail closed)", coordv1alpha1.StaleMarker, token, scope, st.Holder)
	}
	expire := timing.WebhookExpiry(st.ExpireTime, st.RenewStamp, st.LeaseDuration, in.Skew)
	if cut := timing.CutOff(expire, st.LeaseDuration, in.Skew, in.CommitLag); !in.Now.Before(cut) {
		return refuse(409, coordv1alpha1.RefusalExpired, scope, token, st.Token,
			"%s %d for lease %s: the tenure of %s expires at %s, and writes stop being accepted at %s (the commit-lag and clock-skew margin before it)",
			coordv1alpha1.StaleMarker, token, scope, st.Holder, expire.UTC().Format(time.RFC3339Nano), cut.UTC().Format(time.RFC3339Nano))
	}
	v := allow(scope, token, st.Token)
	v.AnswerBy = timing.AnswerBy(expire, st.LeaseDuration, in.Skew, in.CommitLag)
	return v
}

// ShortLeaseWarning is the warning for a lease of duration leaseDuration
// shorter than timing.FullMarginLease(skew, commitLag), "" for others: its
// cut-off margin is L/10, so the time an admitted write may take to commit
// before the next grant shrinks from commitLag to timing.CommitBudget.
func ShortLeaseWarning(leaseDuration, skew, commitLag time.Duration) string {
	full := timing.FullMarginLease(skew, commitLag)
	if leaseDuration <= 0 || leaseDuration >= full {
		return ""
	}
	budget := timing.CommitBudget(leaseDuration, skew, commitLag)
	left := budget.String()
	if budget == 0 {
		left = "nothing (L/10 is not more than the skew)"
	}
	return fmt.Sprintf("kubefence: lease duration %v is shorter than 10 x (webhook clock skew %v + max commit lag %v) = %v, so its commit-lag bound shrinks to L/10 = %v, clock skew included: the fencing webhook stops accepting the holder's token only %v before its expiry, which leaves %s, not %v, for a write admitted just before then to commit; a write that takes longer from admission to commit may commit after the next holder's grant. Set leaseDurationSeconds to at least %d for the full bound (docs/design.md)",
		leaseDuration, skew, commitLag, full, leaseDuration/10, leaseDuration/10, left, commitLag, (full+time.Second-1)/time.Second)
}

// isHolder tells whether the requester is the lease's current holder: the user
// that made the holder's request and, with identityBinding Pod, the holder's
// pod. Without Pod binding, replicas sharing one service account cannot be told
// apart on tokenless paths (docs/design.md).
func isHolder(r Requester, st LeaseState) bool {
	if r.Username == "" || r.Username != st.HolderUser {
		return false
	}
	if st.Binding == coordv1alpha1.IdentityBindingPod {
		return r.PodName == st.Holder
	}
	return true
}

// node is the node the requester authenticates as, "" for anyone else.
func (r Requester) node() string {
	n, ok := strings.CutPrefix(r.Username, coordv1alpha1.NodeUserPrefix)
	if !ok || n == "" || !slices.Contains(r.Groups, coordv1alpha1.NodesGroup) {
		return ""
	}
	return n
}

// nodeFinishes is the node rule: the kubelet of the node a guarded Pod is
// bound to (the stored pod's spec.nodeName) may, without holding the lease,
//   - write the pod's /status when the write changes neither the guard label
//     nor the token annotation (pods/status keeps metadata; a write that
//     changes them takes the token rules), and
//   - DELETE the pod once its deletion has started (deletionTimestamp set on
//     the stored pod: the first DELETE, or eviction, was fenced), which is
//     the kubelet's final delete with grace period 0.
//
// Nothing else, and no other kind: no create, no spec, no delete that starts
// a deletion, no pod bound to another node.
func nodeFinishes(in Input) bool {
	n := in.Requester.node()
	if n == "" || !in.Pod || in.Old == nil || in.Old.NodeName != n {
		return false
	}
	return podStatusKeepsGuard(in) || (in.Operation == admissionv1.Delete && in.SubResource == "" && in.Old.Deleting)
}

// podStatusKeepsGuard tells whether the write is an update of a Pod's
// /status that changes neither the guard label nor the token annotation.
func podStatusKeepsGuard(in Input) bool {
	return in.Pod && in.Operation == admissionv1.Update && in.SubResource == "status" &&
		in.Old != nil && in.New != nil && !guardChanged(in.Old, in.New)
}

// guardChanged tells whether a write changes the guard label or the token
// annotation of an object that exists before and after it.
func guardChanged(oldObj, newObj *Object) bool {
	if oldObj == nil || newObj == nil {
		return false
	}
	return oldObj.Lease != newObj.Lease || oldObj.HasToken != newObj.HasToken || oldObj.Token != newObj.Token
}

func lookup(in Input, lease string, token int64) (LeaseState, Verdict) {
	scope := in.Namespace + "/" + lease
	st, err := in.Lease(lease)
	if err != nil {
		return st, refuse(500, coordv1alpha1.RefusalLeaseError, scope, token, 0, "cannot read lease %s to check the fencing token (refusing, fail closed): %v", scope, err)
	}
	if !st.Exists {
		return st, refuse(404, coordv1alpha1.RefusalNoLease, scope, token, 0,
			"lease %s does not exist: the %s label must name a FencedLease in the object's namespace", scope, coordv1alpha1.GuardLeaseLabel)
	}
	return st, allow(scope, token, st.Token)
}

// parseToken reads a token: a decimal integer in [0, 2^63-1] in its one
// canonical spelling ("0", or digits without a leading zero; no sign, no
// spaces), so that a token cannot be re-spelled to look like a new one.
func parseToken(s string) (int64, error) {
	if s == "" {
		return 0, fmt.Errorf("annotation %s is empty: expected a non-negative decimal integer", coordv1alpha1.FencingTokenAnnotation)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			return 0, fmt.Errorf("annotation %s=%q overflows int64: expected at most %d", coordv1alpha1.FencingTokenAnnotation, s, int64(math.MaxInt64))
		}
		return 0, fmt.Errorf("annotation %s=%q is not a decimal integer", coordv1alpha1.FencingTokenAnnotation, s)
	}
	if n < 0 {
		return 0, fmt.Errorf("annotation %s=%q is negative: expected a non-negative decimal integer", coordv1alpha1.FencingTokenAnnotation, s)
	}
	if canonical := strconv.FormatInt(n, 10); canonical != s {
		return 0, fmt.Errorf("annotation %s=%q is not written canonically: expected %q (no sign, no leading zeros)", coordv1alpha1.FencingTokenAnnotation, s, canonical)
	}
	return n, nil
}
