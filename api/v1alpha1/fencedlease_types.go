package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// IdentityBinding says how strictly a request's holderIdentity is tied to the
// Kubernetes user that wrote it.
// +kubebuilder:validation:Enum=None;ServiceAccount;Pod
type IdentityBinding string

const (
	// IdentityBindingNone ties each request to the requesting user (spec.requests[].user)
	// but lets that user choose any holderIdentity.
	IdentityBindingNone IdentityBinding = "None"
	// IdentityBindingServiceAccount requires holderIdentity to equal the requester's
	// username, e.g. "system:serviceaccount:jobs:worker".
	IdentityBindingServiceAccount IdentityBinding = "ServiceAccount"
	// IdentityBindingPod requires holderIdentity to equal the pod name carried by the
	// requester's projected service-account token (user info extra
	// "authentication.kubernetes.io/pod-name").
	IdentityBindingPod IdentityBinding = "Pod"
)

// FencedLeaseSpec holds what users and clients may ask for. Everything the
// controller decides lives in status.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.identityBinding) || (has(self.identityBinding) && self.identityBinding == oldSelf.identityBinding)",message="identityBinding is immutable"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.minFencingToken) || (has(self.minFencingToken) && self.minFencingToken >= oldSelf.minFencingToken)",message="minFencingToken may only increase"
type FencedLeaseSpec struct {
	// leaseDurationSeconds is how long a holder keeps the lease after the controller
	// observes its last renewal. A change takes effect at the next grant; the duration
	// of the current tenure is in status.leaseDurationSeconds.
	// +optional
	// +kubebuilder:default=15
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	LeaseDurationSeconds int32 `json:"leaseDurationSeconds,omitempty"`

	// lockDelaySeconds keeps the lease ungranted for this long after a holder lost it
	// involuntarily (expiry), so that writes it still has in flight drain before anyone
	// else starts (the Chubby and Consul lock-delay). A voluntary release skips it.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	LockDelaySeconds int32 `json:"lockDelaySeconds,omitempty"`

	// identityBinding ties each request's holderIdentity to the requester's user info.
	// None (the default) still ties every request to the user that wrote it. Immutable.
	// +optional
	// +kubebuilder:default=None
	IdentityBinding IdentityBinding `json:"identityBinding,omitempty"`

	// minFencingToken is a floor for the tokens of future grants: every later grant
	// gets a token greater than it. Operators raise it after restoring etcd from a
	// backup, so that tokens issued after the backup are never issued again. It may
	// only increase, up to 2^62 (tokens stay far from overflowing int64).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4611686018427387904
	MinFencingToken int64 `json:"minFencingToken,omitempty"`

	// requests is the queue of clients asking for the lease, in arrival order (the
	// API server's commit order: new requests are appended). The holder keeps its
	// request while it holds the lease and renews by raising its renewSequence;
	// removing its request releases the lease.
	// +optional
	// +listType=map
	// +listMapKey=holderIdentity
	// +kubebuilder:validation:MaxItems=64
	Requests []LeaseRequest `json:"requests,omitempty"`
}

// LeaseRequest is one client's request for the lease.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.renewSequence) || (has(self.renewSequence) && self.renewSequence >= oldSelf.renewSequence)",message="renewSequence may only increase",fieldPath=".renewSequence"
// +kubebuilder:validation:XValidation:rule="!has(self.heartbeat) || (has(oldSelf.heartbeat) && self.heartbeat == oldSelf.heartbeat)",message="heartbeat is set only when the request is appended: it may be removed later, never added or changed",fieldPath=".heartbeat"
type LeaseRequest struct {
	// holderIdentity names the requesting client, as it will appear in
	// status.holderIdentity once granted. Lowercase letters, digits, '-', '.', '_' and
	// ':' only, starting and ending with a letter or digit.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9._:-]*[a-z0-9])?$`
	HolderIdentity string `json:"holderIdentity"`

	// user is the Kubernetes username of the client that made this request. The
	// admission webhook requires it to equal the requester's username, and lets only
	// that user renew or withdraw the request. Immutable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="user is immutable"
	User string `json:"user"`

	// renewSequence is raised by the holder on every renewal; the controller counts
	// the lease duration from when it observes a higher value. It may only increase.
	// +optional
	// +kubebuilder:validation:Minimum=0
	RenewSequence int64 `json:"renewSequence,omitempty"`

	// renewTime is when the holder sent its latest renewal, on its own clock,
	// with microseconds. The FencedLease webhook refuses a renewTime later
	// than its own clock (plus the clock skew it allows) or earlier than the
	// request's previous one, so that it is never later than the renewal's
	// commit: the fencing webhook takes renewTime + the tenure's duration as a
	// lower bound of the controller's expiry, and the controller need not
	// acknowledge every renewal with a status write (one API write per
	// renewal). The controller's own expiry is still counted on its own clock
	// from when it observed the renewal. Requests without it (older clients)
	// are acknowledged in status as before.
	// +optional
	RenewTime *metav1.MicroTime `json:"renewTime,omitempty"`

	// heartbeat names a coordination.k8s.io/v1 Lease in this namespace that
	// renews the request once its grant is acknowledged: the holder updates
	// the Lease's spec.renewTime (one protobuf write) instead of patching
	// this request. The Lease must carry the label kubefence.io/heartbeat,
	// the annotation kubefence.io/heartbeat-user naming this request's user,
	// and spec.holderIdentity equal to this request's holderIdentity; one
	// Lease may serve every request of one identity in the namespace (a
	// session). Set only when the request is appended; it may be removed
	// later (the request then renews by patches again), never changed.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Heartbeat string `json:"heartbeat,omitempty"`
}

// Condition types and reasons of a FencedLease.
const (
	// ConditionHeld is True while a holder has the lease.
	ConditionHeld = "Held"

	// ReasonGranted: the lease was free and the first request was granted.
	ReasonGranted = "Granted"
	// ReasonHandedOver: the previous holder released and the next request was granted.
	ReasonHandedOver = "HandedOver"
	// ReasonTakenOver: the previous holder expired and the next request was granted.
	ReasonTakenOver = "TakenOver"
	// ReasonExpired: the holder stopped renewing and nobody else was waiting.
	ReasonExpired = "Expired"
	// ReasonReleased: the holder released and nobody else was waiting.
	ReasonReleased = "Released"
	// ReasonLockDelay: the holder expired and the lease is quarantined until
	// status.lockDelayUntil.
	ReasonLockDelay = "LockDelay"
	// ReasonUnclaimed: nobody has asked for the lease yet.
	ReasonUnclaimed = "Unclaimed"
	// ReasonSuperseded marks a previous holder whose expired lease went to a new holder.
	ReasonSuperseded = "Superseded"
)

// EndReason says how a tenure ended.
// +kubebuilder:validation:Enum=Released;Expired;Superseded
type EndReason string

const (
	// EndReasonReleased: the holder withdrew its request.
	EndReasonReleased EndReason = "Released"
	// EndReasonExpired: the holder stopped renewing; nobody has the lease yet.
	EndReasonExpired EndReason = "Expired"
	// EndReasonSuperseded: the holder stopped renewing and the lease went to someone else.
	EndReasonSuperseded EndReason = "Superseded"
)

// PreviousHolder describes the tenure that ended last.
type PreviousHolder struct {
	// holderIdentity of the previous holder.
	// +required
	// +kubebuilder:validation:MaxLength=128
	HolderIdentity string `json:"holderIdentity"`
	// fencingToken the previous holder held.
	// +required
	// +kubebuilder:validation:Minimum=0
	FencingToken int64 `json:"fencingToken"`
	// endTime is when the controller ended the tenure, on its own clock.
	// +required
	EndTime metav1.MicroTime `json:"endTime"`
	// reason the tenure ended.
	// +required
	Reason EndReason `json:"reason"`
}

// WaitingRequest is a request the controller has seen and not granted yet.
type WaitingRequest struct {
	// holderIdentity of the waiting client.
	// +required
	// +kubebuilder:validation:MaxLength=128
	HolderIdentity string `json:"holderIdentity"`
	// since is when the controller first saw the request, on its own clock.
	// +required
	Since metav1.MicroTime `json:"since"`
}

// FencedLeaseStatus holds what only the controller decides. Clients cannot
// write it: RBAC and the admission webhook refuse them.
type FencedLeaseStatus struct {
	// holderIdentity is the current holder; empty when nobody holds the lease.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	HolderIdentity string `json:"holderIdentity,omitempty"`

	// holderUser is the user of the request granted the current tenure
	// (spec.requests[].user), recorded at the grant and cleared with
	// holderIdentity. A request of holderIdentity made by another user is not
	// the granted one: the tenure has ended (its holder's request was
	// withdrawn and the identity queued again). Empty in a status written
	// before this field existed; then any request of holderIdentity counts.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	HolderUser string `json:"holderUser,omitempty"`

	// fencingToken is the token of the current (or, when nobody holds the lease, the
	// last) grant. Every grant gets a token greater than every token this lease name
	// has issued, and renewals never change it. Guarded writes carry it.
	// +optional
	// +kubebuilder:validation:Minimum=0
	FencingToken int64 `json:"fencingToken,omitempty"`

	// tokenBase is the epoch carried forward from earlier incarnations of this lease
	// name (delete-then-recreate) and from spec.minFencingToken. A grant's token is
	// tokenBase plus the object's metadata.generation at the grant.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TokenBase int64 `json:"tokenBase,omitempty"`

	// leaseDurationSeconds of the current tenure, fixed at the grant.
	// +optional
	// +kubebuilder:validation:Minimum=0
	LeaseDurationSeconds int32 `json:"leaseDurationSeconds,omitempty"`

	// maxCommitLagMilliseconds is the operator's --max-commit-lag (rounded up
	// to a whole millisecond), recorded at the grant: the fencing webhook's
	// cut-off before the tenure's expiry counts with it, and so does the
	// holder's deadline (docs/protocol.md). Absent in a status written by a
	// release before it existed: clients then count with their own value
	// (by default 1000).
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxCommitLagMilliseconds int64 `json:"maxCommitLagMilliseconds,omitempty"`

	// clockSkewMilliseconds is the operator's --webhook-clock-skew (rounded up
	// to a whole millisecond), recorded at the grant, as maxCommitLagMilliseconds.
	// Absent with a skew of 0 or in a status written by a release before it
	// existed: clients then count with their own value (by default 100).
	// +optional
	// +kubebuilder:validation:Minimum=0
	ClockSkewMilliseconds int64 `json:"clockSkewMilliseconds,omitempty"`

	// acquireTime is when the current holder was granted the lease (controller clock).
	// +optional
	AcquireTime *metav1.MicroTime `json:"acquireTime,omitempty"`

	// renewTime is when the controller last observed a renewal (or the grant).
	// +optional
	RenewTime *metav1.MicroTime `json:"renewTime,omitempty"`

	// expireTime is when the controller will expire the current holder unless it
	// renews: renewTime plus the lease duration plus the drift allowance.
	// +optional
	ExpireTime *metav1.MicroTime `json:"expireTime,omitempty"`

	// renewSequence is the holder's renewSequence the controller last acknowledged.
	// +optional
	// +kubebuilder:validation:Minimum=0
	RenewSequence int64 `json:"renewSequence,omitempty"`

	// leaseTransitions counts grants to a holder different from the previous one.
	// +optional
	// +kubebuilder:validation:Minimum=0
	LeaseTransitions int32 `json:"leaseTransitions,omitempty"`

	// lockDelayUntil is set after an involuntary expiry when spec.lockDelaySeconds is
	// non-zero: nobody is granted the lease before it.
	// +optional
	LockDelayUntil *metav1.MicroTime `json:"lockDelayUntil,omitempty"`

	// waiting lists the requests not yet granted, in the order they will be granted.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Waiting []WaitingRequest `json:"waiting,omitempty"`

	// previousHolder describes the tenure that ended last.
	// +optional
	PreviousHolder *PreviousHolder `json:"previousHolder,omitempty"`

	// observedGeneration is the metadata.generation the controller last acted on.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Held, with reasons Granted, HandedOver, TakenOver, Expired,
	// Released, LockDelay and Unclaimed.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// FencedLease is a lease whose every grant carries a fencing token. The
// controller grants, renews and expires it on its own clock; guarded resources
// refuse writes carrying a token older than the one they have accepted.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=flease,categories=kubefence
// +kubebuilder:printcolumn:name="Holder",type=string,JSONPath=`.status.holderIdentity`
// +kubebuilder:printcolumn:name="Token",type=integer,JSONPath=`.status.fencingToken`
// +kubebuilder:printcolumn:name="Acquired",type=date,JSONPath=`.status.acquireTime`
// +kubebuilder:printcolumn:name="Transitions",type=integer,JSONPath=`.status.leaseTransitions`
// +kubebuilder:printcolumn:name="Status",type=string,priority=1,JSONPath=`.status.conditions[?(@.type=="Held")].reason`
// +kubebuilder:printcolumn:name="Duration",type=integer,priority=1,JSONPath=`.spec.leaseDurationSeconds`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type FencedLease struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec holds what users and clients ask for.
	// +optional
	// +kubebuilder:default={}
	Spec FencedLeaseSpec `json:"spec,omitempty"`

	// status holds what the controller decided.
	// +optional
	Status FencedLeaseStatus `json:"status,omitempty"`
}

// FencedLeaseList is a list of FencedLeases.
// +kubebuilder:object:root=true
type FencedLeaseList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items is the list of FencedLeases.
	Items []FencedLease `json:"items"`
}
