package v1alpha1

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The wire contract: every name that crosses a process boundary between the
// controller, the webhooks, the client helper and other clients is declared
// here, once. Changing one of them is a protocol change.

// Guarded objects name their lease and carry their token under kubefence.io/.
const (
	// GuardLeaseLabel on an object makes it guarded by the FencedLease of that
	// name in the object's namespace. The fencing webhook checks every write to it.
	GuardLeaseLabel = "kubefence.io/lease"
	// FencingTokenAnnotation carries the token of the write (decimal). The object
	// keeps the token of the last accepted write.
	FencingTokenAnnotation = "kubefence.io/fencing-token"
	// FencingNamespaceLabel set to "required" on a namespace makes fencing
	// mandatory there for the kinds listed in the required-fencing webhook.
	// Set to any value ("enabled" or "required"), it puts the namespace's pod
	// evictions in the eviction webhook's scope: guarded pods may live only in
	// such namespaces (docs/design.md, "Pod subresources").
	FencingNamespaceLabel = "kubefence.io/fencing"
)

// Names the controller writes on FencedLeases; the FencedLease webhook lets
// nobody else write them.
const (
	// EpochFinalizer keeps a FencedLease until its highest token is recorded in
	// the epoch store, so that the lease name's tokens keep rising after
	// delete-then-recreate.
	EpochFinalizer = "coordination.kubefence.io/epoch"
	// ExpiredAnnotation is written by the controller, in the same write that
	// removes an expired holder's request, as ExpiredMark(holderIdentity, token).
	// It lets any controller (this one after a crash, or a successor) tell an
	// expiry from a release when it finds the holder's request gone.
	ExpiredAnnotation = "coordination.kubefence.io/expired"

	// RevokedAnnotation is written by an operator action (kubectl fence
	// release or handover) in the same write that removes the holder's
	// request, as ExpiredMark(holderIdentity, token): the tenure was ended by
	// someone other than its holder, whose admitted writes may still commit,
	// so the controller waits its commit lag before it grants the next
	// tenure. The FencedLease webhook requires it whenever anyone but the
	// holder removes the holder's request.
	RevokedAnnotation = "coordination.kubefence.io/revoked"
)

// Heartbeats: a coordination.k8s.io/v1 Lease a request names in
// spec.requests[].heartbeat renews it (docs/design.md, "Heartbeats"). The
// admission policy HeartbeatPolicyName lets only the annotated user write a
// labelled Lease.
const (
	// HeartbeatLabel marks a Lease as a heartbeat (any value): the
	// controller watches only Leases carrying it, and the policy
	// kubefence-heartbeats judges every write to them.
	HeartbeatLabel = "kubefence.io/heartbeat"
	// HeartbeatUserAnnotation names the Kubernetes user that created the
	// heartbeat; only that user may update or delete it, and the
	// controller counts it only for requests of that user.
	HeartbeatUserAnnotation = "kubefence.io/heartbeat-user"
	// HeartbeatPolicyName is the ValidatingAdmissionPolicy (and its binding)
	// that judges writes to heartbeat Leases (config/heartbeat).
	HeartbeatPolicyName = "kubefence-heartbeats"
)

// ExpiredMark is the value of ExpiredAnnotation for the tenure of holder
// with token: "<holderIdentity>/<token>".
func ExpiredMark(holder string, token int64) string {
	return fmt.Sprintf("%s/%d", holder, token)
}

// PodNameExtraKey is the user-info extra that projected service-account tokens
// carry with the name of the pod they were issued to (identityBinding Pod).
const PodNameExtraKey = "authentication.kubernetes.io/pod-name"

// NodeUserPrefix and NodesGroup identify a kubelet: user
// system:node:<node name> in group system:nodes, the identity the Node
// authorizer and the NodeRestriction admission plugin act on. The fencing
// rule's node rule lets it write the /status of, and finish deleting, the
// guarded Pods bound to its node (docs/design.md, "Guarded Pods on real
// nodes").
const (
	NodeUserPrefix = "system:node:"
	NodesGroup     = "system:nodes"
)

// RequestIndex is the position of identity's request in requests, or -1.
func RequestIndex(requests []LeaseRequest, identity string) int {
	for i := range requests {
		if requests[i].HolderIdentity == identity {
			return i
		}
	}
	return -1
}

// HolderRequestIndex is the position in requests (a lease's spec.requests)
// of the request that carries the tenure st (its status) names, or -1 when
// none does: nobody holds the lease, or the tenure has ended in the API
// server whatever status still says, because the holder's request is gone
// (released, revoked, removed at expiry) or the request of that identity is
// not the one granted: made again by another user than st.HolderUser, or
// with a renewSequence below st.RenewSequence. The controller, the fencing
// webhook and the tenure table all judge a tenure by it. A status without
// holderUser (written before the field existed) leaves the user test out:
// any request of the holder's identity counts.
func HolderRequestIndex(requests []LeaseRequest, st *FencedLeaseStatus) int {
	if st.HolderIdentity == "" {
		return -1
	}
	i := RequestIndex(requests, st.HolderIdentity)
	if i < 0 {
		return -1
	}
	r := &requests[i]
	if (st.HolderUser != "" && r.User != st.HolderUser) || r.RenewSequence < st.RenewSequence {
		return -1
	}
	return i
}

// How a refusal of a stale write reaches a client.
//
// The fencing webhook refuses a write whose token (or whose writer's tenure)
// is no longer current with a metav1.Status whose details carry causes of type
// CauseTypeStaleFencingToken, one per field below, and whose message contains
// StaleMarker (409 Conflict) or NotHolderMarker (403 Forbidden, a tokenless
// write from someone who is not the holder). Clients read the causes; the
// markers are for refusals that cannot carry causes (a ValidatingAdmissionPolicy
// can set only the message), and the rest of the message is for people and may
// be reworded.
const (
	// CauseTypeStaleFencingToken is the type of the causes of a stale refusal.
	CauseTypeStaleFencingToken metav1.CauseType = "kubefence.io/StaleFencingToken"

	// CauseFieldLease: the cause's message is the lease, "<namespace>/<name>".
	CauseFieldLease = "lease"
	// CauseFieldPresentedToken: the cause's message is the token the write
	// presented (decimal; 0 for a tokenless write).
	CauseFieldPresentedToken = "presentedToken"
	// CauseFieldCurrentToken: the cause's message is the token the write was
	// checked against (decimal): the lease's current token, or the higher one
	// the object already accepted.
	CauseFieldCurrentToken = "currentToken"
	// CauseFieldReason: the cause's message says why the write is stale:
	// "stale", "expired", "no-holder" or "not-holder".
	CauseFieldReason = "reason"

	// StaleMarker is in the message of every 409 refusal of a stale token.
	StaleMarker = "stale fencing token"
	// NotHolderMarker is in the message of every 403 refusal of a tokenless
	// write from someone other than the lease's holder.
	NotHolderMarker = "is not the holder of lease"
)

// The ValidatingAdmissionPolicies of policy mode (--enforcement=policy), by
// name: their refusals read "ValidatingAdmissionPolicy '<name>' with binding
// '<binding>' denied request: ...", which kubectl fence check recognises.
const (
	// FencingPolicyName fences guarded objects inside the API server.
	FencingPolicyName = "kubefence-fencing"
	// LeasePolicyName judges FencedLease writes (I6) in place of the
	// FencedLease webhook; its binding has the same name.
	LeasePolicyName = "kubefence-fencedleases"
)
