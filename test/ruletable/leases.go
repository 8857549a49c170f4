package ruletable

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// LeaseBase is the stored FencedLease an UPDATE or DELETE of the lease
// table starts from. The cluster tier runs the rows in order on one lease
// per base (Free: a fresh one per row), and checks before each row that
// the lease still has the base's holder and queue.
type LeaseBase string

// The stored leases of the lease table, in namespace Plain.
const (
	// Queue is lease q: alice holds it (her request stamped), bob waits;
	// it carries the epoch finalizer.
	Queue LeaseBase = "q"
	// QueueMallory is Queue with mallory waiting behind bob.
	QueueMallory LeaseBase = "q, mallory queued"
	// PodQueue is lease pods, identityBinding Pod: pod a of user alice
	// holds it.
	PodQueue LeaseBase = "pods"
	// Free is a lease nobody holds or asks for, created by the controller
	// (a fresh one per row in the cluster tier).
	Free LeaseBase = "free"
	// Withdrawn is lease q whose status still names alice as the holder
	// after her request was withdrawn, bob waiting: the controller has not
	// ended her tenure yet.
	Withdrawn LeaseBase = "q, alice withdrawn"
	// NextHolder is lease q once bob, queued behind alice, holds it.
	NextHolder LeaseBase = "q, bob holds"
)

// LeaseWant is what a lease row expects of one mode: allowed, or refused
// with a message containing Msg (every refusal of the FencedLease rules is
// a 403 Forbidden of the mode's judge).
type LeaseWant struct {
	Allowed bool
	Msg     string
}

// LeaseRow is one row of the FencedLease rules' table.
type LeaseRow struct {
	Name string
	// Op is CREATE, UPDATE or DELETE; Sub the subresource.
	Op, Sub string
	// Lease names the lease a CREATE makes (In Excluded: in kube-system);
	// Base the stored lease of an UPDATE or DELETE.
	Lease string
	In    Where
	Base  LeaseBase
	// Stored, if set, changes the Free base before the row (the
	// controller's write).
	Stored func(l *coordv1alpha1.FencedLease)
	// Change makes the written lease: from the stored one on UPDATE, from
	// an empty lease (600 s) on CREATE; now is the writer's clock.
	Change func(l *coordv1alpha1.FencedLease, now time.Time)
	As     LeaseUser
	Want   LeaseWant
	// WebhookMsg and PolicyMsg are fragments of that mode's message only.
	WebhookMsg, PolicyMsg string
	// Webhook and Policy, if set, are what that mode answers instead of
	// Want, and Why says why the back ends legitimately differ there.
	Webhook, Policy *LeaseWant
	Why             string
	// AdminGroups are the operator's --lease-admin-group (default:
	// system:masters).
	AdminGroups []string
	// ByCRD: the CRD's own validation refuses the write (422) before any
	// admission; the unit tier, which has no CRD validation, does not run it.
	ByCRD bool
	// UnitOnly, if set, says why the cluster tier does not replay the row.
	UnitOnly string
}

// LeaseUser is who writes a FencedLease.
type LeaseUser string

// The writers of the lease table.
const (
	LeaseAlice   LeaseUser = "alice"
	LeaseBob     LeaseUser = "bob"
	LeaseMallory LeaseUser = "mallory"
	// LeaseOps is in system:masters, without being a controller user.
	LeaseOps LeaseUser = "ops"
	// LeaseRootAdmin is in system:masters and lease-admins.
	LeaseRootAdmin LeaseUser = "lease-admin"
	// LeaseGC is the garbage collector, a clean-up user.
	LeaseGC LeaseUser = "gc"
	// LeaseController is the kubefence controller's user.
	LeaseController LeaseUser = "controller"
	// LeasePodA and LeasePodB are alice from pods a and b.
	LeasePodA LeaseUser = "pod-a"
	LeasePodB LeaseUser = "pod-b"
	// LeaseWorker is service account worker (as its own holderIdentity).
	LeaseWorker LeaseUser = "worker"
)

// UnitUser is the user info of u in the unit tier.
func (u LeaseUser) UnitUser() User {
	switch u {
	case LeaseOps:
		return User{Name: "ops", Groups: []string{"system:masters"}}
	case LeaseRootAdmin:
		return User{Name: "lease-admin", Groups: []string{"system:masters", "lease-admins"}}
	case LeaseGC:
		return GC
	case LeaseController:
		return User{Name: UnitController}
	case LeasePodA:
		return User{Name: "alice", Pod: "a"}
	case LeasePodB:
		return User{Name: "alice", Pod: "b"}
	case LeaseWorker:
		return User{Name: worker}
	}
	return User{Name: string(u)}
}

// worker is a service account that requests under its own name.
const worker = "system:serviceaccount:jobs:worker"

// For is what mode m answers.
func (r LeaseRow) For(m string) LeaseWant {
	if m == Webhook && r.Webhook != nil {
		return *r.Webhook
	}
	if m == Policy && r.Policy != nil {
		return *r.Policy
	}
	return r.Want
}

// Check compares what mode m answered (the write's error) with the row;
// "" when they agree.
func (r LeaseRow) Check(m string, err error) string {
	want := r.For(m)
	v := VerdictOf(err)
	if v.Allowed != want.Allowed {
		return fmt.Sprintf("%s mode: %s, want %+v", m, v, want)
	}
	if v.Allowed {
		return ""
	}
	judge := "webhook vfencedlease-v1alpha1.kb.io"
	if m == Policy {
		judge = "policy " + coordv1alpha1.LeasePolicyName
	}
	code := int32(403)
	if r.ByCRD {
		judge, code = "crd", 422
	}
	for _, part := range []string{want.Msg, map[string]string{Webhook: r.WebhookMsg, Policy: r.PolicyMsg}[m]} {
		if !strings.Contains(v.Message, part) {
			return fmt.Sprintf("%s mode: message %q does not contain %q", m, v.Message, part)
		}
	}
	if v.Judge != judge || v.Code != code {
		return fmt.Sprintf("%s mode: %s, want a %d refusal by %s", m, v, code, judge)
	}
	return ""
}

// UnitBase is base b in the unit tier (nil for ""), after Stored.
func (r LeaseRow) UnitBase() *coordv1alpha1.FencedLease {
	ns := Plain.Unit()
	stamp := metav1.NewMicroTime(UnitNow.Add(-time.Second))
	var l *coordv1alpha1.FencedLease
	switch r.Base {
	case Queue, QueueMallory:
		l = HeldLease(ns, "q", "alice", "alice", 5)
		l.Spec.LeaseDurationSeconds, l.Status.LeaseDurationSeconds = 600, 600
		l.Spec.Requests[0].RenewTime = &stamp
		l.Spec.Requests = append(l.Spec.Requests, LeaseRequest("bob", "bob"))
		if r.Base == QueueMallory {
			l.Spec.Requests = append(l.Spec.Requests, LeaseRequest("mallory", "mallory"))
		}
	case Withdrawn:
		l = HeldLease(ns, "q", "alice", "alice", 5)
		l.Spec.LeaseDurationSeconds, l.Status.LeaseDurationSeconds = 600, 600
		l.Spec.Requests = []coordv1alpha1.LeaseRequest{LeaseRequest("bob", "bob")}
	case NextHolder:
		l = HeldLease(ns, "q", "bob", "bob", 6)
		l.Spec.LeaseDurationSeconds, l.Status.LeaseDurationSeconds = 600, 600
	case PodQueue:
		l = HeldLease(ns, "pods", "a", "alice", 1)
		l.Spec.LeaseDurationSeconds, l.Status.LeaseDurationSeconds = 600, 600
		l.Spec.IdentityBinding = coordv1alpha1.IdentityBindingPod
	case Free:
		l = &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "free"},
			Spec: coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: 600}}
	default:
		return nil
	}
	l.Finalizers = []string{coordv1alpha1.EpochFinalizer}
	if r.Stored != nil {
		r.Stored(l)
	}
	return l
}

// Shape is what the cluster tier compares a stored lease with its base
// by: its holder and its queue.
func Shape(l *coordv1alpha1.FencedLease) string {
	ids := make([]string, len(l.Spec.Requests))
	for i, q := range l.Spec.Requests {
		ids[i] = q.HolderIdentity
	}
	return fmt.Sprintf("held by %q, queue [%s]", l.Status.HolderIdentity, strings.Join(ids, ", "))
}

// NewLease is the empty lease a CREATE row's Change starts from, in
// namespace ns.
func (r LeaseRow) NewLease(ns string) *coordv1alpha1.FencedLease {
	return &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: r.Lease},
		Spec: coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: 600}}
}

// LeaseRequest is a request of identity id by user.
func LeaseRequest(id, user string) coordv1alpha1.LeaseRequest {
	return coordv1alpha1.LeaseRequest{HolderIdentity: id, User: user}
}

// RequestOf is id's request in l; a detached one if there is none (an
// earlier row of the cluster tier went wrong), so that the row still
// reports its own outcome.
func RequestOf(l *coordv1alpha1.FencedLease, id string) *coordv1alpha1.LeaseRequest {
	if i := coordv1alpha1.RequestIndex(l.Spec.Requests, id); i >= 0 {
		return &l.Spec.Requests[i]
	}
	return &coordv1alpha1.LeaseRequest{HolderIdentity: id}
}

func micro(t time.Time) *metav1.MicroTime { m := metav1.NewMicroTime(t); return &m }

// renew is a renewal of id's request: renewSequence + 1, renewTime at(its
// previous one, now).
func renew(id string, at func(prev *metav1.MicroTime, now time.Time) *metav1.MicroTime) func(*coordv1alpha1.FencedLease, time.Time) {
	return func(l *coordv1alpha1.FencedLease, now time.Time) {
		q := RequestOf(l, id)
		q.RenewSequence++
		q.RenewTime = at(q.RenewTime, now)
	}
}

// stampNow stamps a renewal now, or just after the previous stamp if that
// is later (an earlier row of the cluster tier may have stamped ahead
// within the skew): a stamp that moves forward.
func stampNow(prev *metav1.MicroTime, now time.Time) *metav1.MicroTime {
	if prev != nil && !now.After(prev.Time) {
		return micro(prev.Add(time.Millisecond))
	}
	return micro(now)
}

func appendRequest(id, user string) func(*coordv1alpha1.FencedLease, time.Time) {
	return func(l *coordv1alpha1.FencedLease, _ time.Time) {
		l.Spec.Requests = append(l.Spec.Requests, LeaseRequest(id, user))
	}
}

func withBinding(b coordv1alpha1.IdentityBinding, reqs ...coordv1alpha1.LeaseRequest) func(*coordv1alpha1.FencedLease, time.Time) {
	return func(l *coordv1alpha1.FencedLease, _ time.Time) {
		l.Spec.IdentityBinding = b
		l.Spec.Requests = append(l.Spec.Requests, reqs...)
	}
}

func annotate(key, value string) func(*coordv1alpha1.FencedLease, time.Time) {
	return func(l *coordv1alpha1.FencedLease, _ time.Time) {
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[key] = value
	}
}

var anOwner = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: "0d5e1c4e-0000-4000-8000-000000000001"}}

func allowedLease() LeaseWant           { return LeaseWant{Allowed: true} }
func refusedLease(msg string) LeaseWant { return LeaseWant{Msg: msg} }

const (
	requeued            = "queues the identity status.holderIdentity still names as the holder of token 5, whose request was withdrawn"
	withdrawnOnACluster = "the controller ends such a tenure at once; test/enforcement runRequeuedHolder stops the reconciler to write it on a cluster"
)

const noLeaseClock = "CEL has no clock: the policy cannot bound a renewTime by the time of its admission; in policy mode the controller clamps a stamp ahead of its own clock (Timing.ClampStamps), which test/enforcement runFutureStamp proves on a cluster"

// LeaseRows is the FencedLease rules' table (I6). The cluster tier runs
// the rows in this order (see LeaseBase).
func LeaseRows() []LeaseRow {
	expired := coordv1alpha1.ExpiredAnnotation
	revoked := coordv1alpha1.RevokedAnnotation
	epoch := coordv1alpha1.EpochFinalizer
	settings := "may change leaseDurationSeconds, lockDelaySeconds or minFencingToken"
	return []LeaseRow{
		// Create.
		{Name: "a client creates an empty lease", Op: "CREATE", Lease: "c0", As: LeaseAlice, Change: func(*coordv1alpha1.FencedLease, time.Time) {}, Want: allowedLease()},
		{Name: "a client creates a lease with its own request", Op: "CREATE", Lease: "c1", As: LeaseAlice, Change: appendRequest("alice", "alice"), Want: allowedLease()},
		{Name: "a client creates a lease with another's request", Op: "CREATE", Lease: "c2", As: LeaseMallory, Change: appendRequest("bob", "bob"),
			Want: refusedLease("a client can request the lease only for itself"), WebhookMsg: `names user "bob", but the request comes from "mallory"`,
			PolicyMsg: "names user bob, but the request comes from mallory"},
		{Name: "a client creates a lease in an excluded namespace", Op: "CREATE", Lease: "c3", In: Excluded, As: LeaseAlice,
			Change: func(*coordv1alpha1.FencedLease, time.Time) {}, Want: refusedLease("FencedLeases cannot be created in namespace kube-system")},
		{Name: "a client creates a lease with ownerReferences", Op: "CREATE", Lease: "c4", As: LeaseAlice,
			Change: func(l *coordv1alpha1.FencedLease, _ time.Time) { l.OwnerReferences = anOwner },
			Want:   refusedLease("may set ownerReferences on a FencedLease")},
		{Name: "a client creates a lease marked expired", Op: "CREATE", Lease: "c5", As: LeaseAlice, Change: annotate(expired, "x/1"),
			Want: refusedLease("annotation " + expired + " is written only by the kubefence controller")},
		{Name: "ServiceAccount binding: a holderIdentity other than the username", Op: "CREATE", Lease: "c6", As: LeaseAlice,
			Change: withBinding(coordv1alpha1.IdentityBindingServiceAccount, LeaseRequest("someone", "alice")),
			Want:   refusedLease("identityBinding ServiceAccount"), WebhookMsg: `must equal the requester's username "alice"`},
		{Name: "ServiceAccount binding: holderIdentity is the username", Op: "CREATE", Lease: "c7", As: LeaseWorker,
			Change: withBinding(coordv1alpha1.IdentityBindingServiceAccount, LeaseRequest(worker, worker)), Want: allowedLease()},
		{Name: "Pod binding: a requester without a pod-bound token", Op: "CREATE", Lease: "c8", As: LeaseAlice,
			Change: withBinding(coordv1alpha1.IdentityBindingPod, LeaseRequest("alice", "alice")),
			Want:   refusedLease("identityBinding Pod"), WebhookMsg: "needs a requester authenticated with a pod-bound service-account token"},
		{Name: "Pod binding: another pod's identity", Op: "CREATE", Lease: "c9", As: LeasePodA,
			Change: withBinding(coordv1alpha1.IdentityBindingPod, LeaseRequest("b", "alice")),
			Want:   refusedLease("identityBinding Pod"), WebhookMsg: `must equal the requester's pod name "a"`},
		{Name: "the controller creates a lease with anyone's request", Op: "CREATE", Lease: "c10", As: LeaseController,
			Change: appendRequest("bob", "bob"), Want: allowedLease()},
		{Name: "a client creates a lease through status", Op: "CREATE", Sub: "status", Lease: "c11", As: LeaseAlice,
			Change: func(*coordv1alpha1.FencedLease, time.Time) {}, Want: refusedLease("status is written only by the kubefence controller"),
			UnitOnly: "an API server never creates through a subresource; the validator's branch is tested in process only"},
		{Name: "Pod binding: its own pod's identity", Op: "CREATE", Lease: "pods", As: LeasePodA,
			Change: withBinding(coordv1alpha1.IdentityBindingPod, LeaseRequest("a", "alice")), Want: allowedLease()},

		// Pod binding: lease pods, pod a of alice holds it.
		{Name: "Pod binding: the same user from another pod withdraws pod a's request", Op: "UPDATE", Base: PodQueue, As: LeasePodB,
			Change: func(l *coordv1alpha1.FencedLease, _ time.Time) { l.Spec.Requests = nil },
			Want:   refusedLease("only the requester can withdraw or release it"), WebhookMsg: `it belongs to pod "a"`},
		{Name: "Pod binding: the same user from another pod renews pod a's request", Op: "UPDATE", Base: PodQueue, As: LeasePodB,
			Change: func(l *coordv1alpha1.FencedLease, _ time.Time) { RequestOf(l, "a").RenewSequence++ },
			Want:   refusedLease("only the holder can renew it"), WebhookMsg: `it belongs to pod "a"`},
		{Name: "Pod binding: pod a renews its own request", Op: "UPDATE", Base: PodQueue, As: LeasePodA,
			Change: renew("a", stampNow), Want: allowedLease()},
		{Name: "Pod binding: pod b queues behind pod a", Op: "UPDATE", Base: PodQueue, As: LeasePodB, Change: appendRequest("b", "alice"), Want: allowedLease()},

		// Update: lease q, alice holds, bob waits.
		{Name: "the holder renews (renewSequence + 1, renewTime now)", Op: "UPDATE", Base: Queue, As: LeaseAlice, Change: renew("alice", stampNow), Want: allowedLease()},
		{Name: "a waiting client renews without a renewTime (an older client)", Op: "UPDATE", Base: Queue, As: LeaseBob,
			Change: func(l *coordv1alpha1.FencedLease, _ time.Time) { RequestOf(l, "bob").RenewSequence++ }, Want: allowedLease()},
		{Name: "a waiting client stamps its first renewal", Op: "UPDATE", Base: Queue, As: LeaseBob, Change: renew("bob", stampNow), Want: allowedLease()},
		{Name: "the holder stamps a renewal within the clock skew ahead", Op: "UPDATE", Base: Queue, As: LeaseAlice,
			Change: renew("alice", func(_ *metav1.MicroTime, now time.Time) *metav1.MicroTime {
				return micro(now.Add(90 * time.Millisecond))
			}), Want: allowedLease()},
		{Name: "the holder stamps a renewal in the future", Op: "UPDATE", Base: Queue, As: LeaseAlice,
			Change: renew("alice", func(_ *metav1.MicroTime, now time.Time) *metav1.MicroTime { return micro(now.Add(time.Hour)) }),
			Want:   allowedLease(), Webhook: &LeaseWant{Msg: "is later than the webhook's clock"}, Why: noLeaseClock,
			UnitOnly: "in policy mode an accepted stamp an hour ahead would hold q for the clamp's duration; test/enforcement runFutureStamp writes it on a lease of its own"},
		{Name: "the holder moves its renewTime back", Op: "UPDATE", Base: Queue, As: LeaseAlice,
			Change: renew("alice", func(prev *metav1.MicroTime, now time.Time) *metav1.MicroTime {
				if prev == nil {
					prev = micro(now)
				}
				return micro(prev.Add(-time.Second))
			}),
			Want: refusedLease("may only move forward")},
		{Name: "the holder removes its renewTime", Op: "UPDATE", Base: Queue, As: LeaseAlice,
			Change: renew("alice", func(*metav1.MicroTime, time.Time) *metav1.MicroTime { return nil }), Want: refusedLease("cannot be removed once set")},
		{Name: "the holder lowers its renewSequence", Op: "UPDATE", Base: Queue, As: LeaseAlice,
			Change: func(l *coordv1alpha1.FencedLease, _ time.Time) { RequestOf(l, "alice").RenewSequence-- },
			Want:   refusedLease("renewSequence may only increase"), ByCRD: true},
		{Name: "a waiting client renews the holder's request (a forged renewal)", Op: "UPDATE", Base: Queue, As: LeaseBob, Change: renew("alice", stampNow),
			Want: refusedLease("only the holder can renew it"), WebhookMsg: `cannot change the request of holderIdentity "alice": it belongs to user "alice", not "bob"`},
		{Name: "a waiting client withdraws the holder's request (a stolen grant)", Op: "UPDATE", Base: Queue, As: LeaseBob,
			Change: func(l *coordv1alpha1.FencedLease, _ time.Time) { l.Spec.Requests = l.Spec.Requests[1:] },
			Want:   refusedLease("only the requester can withdraw or release it"), WebhookMsg: `cannot remove the request of holderIdentity "alice"`},
		{Name: "a waiting client moves itself to the front", Op: "UPDATE", Base: Queue, As: LeaseBob,
			Change: func(l *coordv1alpha1.FencedLease, _ time.Time) {
				l.Spec.Requests[0], l.Spec.Requests[1] = l.Spec.Requests[1], l.Spec.Requests[0]
			},
			Want: refusedLease("the order of spec.requests changed from [alice, bob] to [bob, alice]")},
		{Name: "a client queues for another user", Op: "UPDATE", Base: Queue, As: LeaseMallory, Change: appendRequest("carol", "carol"),
			Want: refusedLease("a client can request the lease only for itself"), WebhookMsg: `names user "carol", but the request comes from "mallory"`},
		{Name: "a client inserts its request before a waiting one", Op: "UPDATE", Base: Queue, As: LeaseMallory,
			Change: func(l *coordv1alpha1.FencedLease, _ time.Time) {
				l.Spec.Requests = append([]coordv1alpha1.LeaseRequest{l.Spec.Requests[0], LeaseRequest("mallory", "mallory")}, l.Spec.Requests[1:]...)
			},
			Want: refusedLease("new requests are appended at the end of the queue"), WebhookMsg: `(holderIdentity "bob") was moved behind a new request`},
		{Name: "a client shortens the lease", Op: "UPDATE", Base: Queue, As: LeaseBob,
			Change: func(l *coordv1alpha1.FencedLease, _ time.Time) { l.Spec.LeaseDurationSeconds = 1 }, Want: refusedLease(settings)},
		{Name: "a client raises minFencingToken", Op: "UPDATE", Base: Queue, As: LeaseBob,
			Change: func(l *coordv1alpha1.FencedLease, _ time.Time) { l.Spec.MinFencingToken = 1 << 40 }, Want: refusedLease(settings)},
		{Name: "a client revokes the holder's tenure", Op: "UPDATE", Base: Queue, As: LeaseBob,
			Change: func(l *coordv1alpha1.FencedLease, now time.Time) {
				annotate(revoked, fmt.Sprintf("alice/%d", l.Status.FencingToken))(l, now)
			},
			Want: refusedLease("annotation " + revoked + " is written only by operators")},
		{Name: "a client marks the holder expired", Op: "UPDATE", Base: Queue, As: LeaseBob,
			Change: func(l *coordv1alpha1.FencedLease, now time.Time) {
				annotate(expired, fmt.Sprintf("alice/%d", l.Status.FencingToken))(l, now)
			},
			Want: refusedLease("annotation " + expired + " is written only by the kubefence controller")},
		{Name: "a client removes the epoch finalizer", Op: "UPDATE", Base: Queue, As: LeaseBob,
			Change: func(l *coordv1alpha1.FencedLease, _ time.Time) { l.Finalizers = nil },
			Want:   refusedLease("finalizer " + epoch + " is removed only by the kubefence controller")},
		{Name: "an operator removes the epoch finalizer", Op: "UPDATE", Base: Queue, As: LeaseOps,
			Change: func(l *coordv1alpha1.FencedLease, _ time.Time) { l.Finalizers = nil },
			Want:   refusedLease("finalizer " + epoch + " is removed only by the kubefence controller")},
		{Name: "a client adds a finalizer", Op: "UPDATE", Base: Queue, As: LeaseBob,
			Change: func(l *coordv1alpha1.FencedLease, _ time.Time) {
				l.Finalizers = append(l.Finalizers, "example.com/forever")
			},
			Want: refusedLease("may change the finalizers of a FencedLease")},
		{Name: "a client adds an owner", Op: "UPDATE", Base: Queue, As: LeaseBob,
			Change: func(l *coordv1alpha1.FencedLease, _ time.Time) { l.OwnerReferences = anOwner },
			Want:   refusedLease("may change the ownerReferences of a FencedLease")},
		{Name: "the clean-up controller changes the spec", Op: "UPDATE", Base: Queue, As: LeaseGC,
			Change: func(l *coordv1alpha1.FencedLease, _ time.Time) { l.Spec.Requests = l.Spec.Requests[1:] },
			Want:   refusedLease("may change only the ownerReferences and finalizers of a FencedLease")},
		{Name: "a client grants itself the lease through status (a stolen grant)", Op: "UPDATE", Sub: "status", Base: Queue, As: LeaseBob,
			Change: func(l *coordv1alpha1.FencedLease, _ time.Time) {
				l.Status.HolderIdentity = "bob"
				l.Status.FencingToken++
			},
			Want: refusedLease("status is written only by the kubefence controller")},
		{Name: "a client writes another subresource", Op: "UPDATE", Sub: "scale", Base: Queue, As: LeaseBob,
			Change: func(*coordv1alpha1.FencedLease, time.Time) {}, Want: refusedLease("of a FencedLease cannot be written"),
			Webhook:  &LeaseWant{Allowed: true},
			Why:      "the FencedLease webhook is configured for fencedleases and fencedleases/status only (config/webhook/manifests.yaml), the policy for every subresource; the CRD serves no other, so no such write reaches admission on a cluster",
			UnitOnly: "the CRD serves no subresource but status"},
		{Name: "a client deletes the held lease", Op: "DELETE", Base: Queue, As: LeaseBob, Want: refusedLease("is held by alice")},
		{Name: "an operator removes the holder's request without revoking", Op: "UPDATE", Base: Queue, As: LeaseOps,
			Change: func(l *coordv1alpha1.FencedLease, _ time.Time) { l.Spec.Requests = l.Spec.Requests[1:] }, Want: refusedLease("revokes its tenure")},
		{Name: "an operator changes the lease duration", Op: "UPDATE", Base: Queue, As: LeaseOps,
			Change: func(l *coordv1alpha1.FencedLease, _ time.Time) { l.Spec.LeaseDurationSeconds = 599 }, Want: allowedLease()},
		{Name: "a client queues at the end", Op: "UPDATE", Base: Queue, As: LeaseMallory, Change: appendRequest("mallory", "mallory"), Want: allowedLease()},
		{Name: "a client withdraws its own request", Op: "UPDATE", Base: QueueMallory, As: LeaseMallory,
			Change: func(l *coordv1alpha1.FencedLease, _ time.Time) {
				l.Spec.Requests = l.Spec.Requests[:coordv1alpha1.RequestIndex(l.Spec.Requests, "mallory")]
			},
			Want: allowedLease()},
		{Name: "the holder releases (withdraws its own request)", Op: "UPDATE", Base: Queue, As: LeaseAlice,
			Change: func(l *coordv1alpha1.FencedLease, _ time.Time) { l.Spec.Requests = l.Spec.Requests[1:] }, Want: allowedLease(),
			UnitOnly: "it ends alice's tenure of q, which the rows after it need; every release in test/enforcement and test/tenure is one"},
		{Name: "an operator revokes the holder's tenure", Op: "UPDATE", Base: Queue, As: LeaseOps,
			Change: func(l *coordv1alpha1.FencedLease, now time.Time) {
				l.Spec.Requests = l.Spec.Requests[1:]
				annotate(revoked, fmt.Sprintf("alice/%d", l.Status.FencingToken))(l, now)
			},
			Want: allowedLease()},
		{Name: "the released holder queues again once status names the next holder", Op: "UPDATE", Base: NextHolder, As: LeaseAlice,
			Change: appendRequest("alice", "alice"), Want: allowedLease()},

		// A holder's request withdrawn before the controller ended its
		// tenure: a request under that identity would be taken for it.
		{Name: "the released holder queues again before status changed", Op: "UPDATE", Base: Withdrawn, As: LeaseAlice,
			Change: appendRequest("alice", "alice"), Want: refusedLease(requeued), WebhookMsg: `(holderIdentity "alice") ` + requeued,
			PolicyMsg: "(holderIdentity alice) " + requeued, UnitOnly: withdrawnOnACluster},
		{Name: "another user queues under the released holder's identity", Op: "UPDATE", Base: Withdrawn, As: LeaseMallory,
			Change: appendRequest("alice", "mallory"), Want: refusedLease("wait until status.holderIdentity no longer names"),
			WebhookMsg: `no longer names "alice", then request again`, UnitOnly: withdrawnOnACluster},
		{Name: "an operator queues under the released holder's identity", Op: "UPDATE", Base: Withdrawn, As: LeaseOps,
			Change: appendRequest("alice", "mallory"), Want: refusedLease(requeued), UnitOnly: withdrawnOnACluster},

		// Fresh leases nobody holds.
		{Name: "a client deletes a lease nobody holds", Op: "DELETE", Base: Free, As: LeaseAlice, Want: allowedLease()},
		{Name: "a client removes the expired annotation", Op: "UPDATE", Base: Free, As: LeaseBob, Stored: func(l *coordv1alpha1.FencedLease) {
			l.Annotations = map[string]string{expired: "carol/1"}
		}, Change: func(l *coordv1alpha1.FencedLease, _ time.Time) { delete(l.Annotations, expired) },
			Want: refusedLease("annotation " + expired + " is written only by the kubefence controller")},
		{Name: "the controller removes the finalizer and marks an expiry", Op: "UPDATE", Base: Free, As: LeaseController,
			Change: func(l *coordv1alpha1.FencedLease, now time.Time) {
				l.Finalizers = nil
				annotate(expired, "a/3")(l, now)
			}, Want: allowedLease()},
		{Name: "the clean-up controller adds a finalizer", Op: "UPDATE", Base: Free, As: LeaseGC,
			Change: func(l *coordv1alpha1.FencedLease, _ time.Time) {
				l.Finalizers = append(l.Finalizers, "example.com/cascade")
			}, Want: allowedLease()},
		{Name: "system:masters changes lockDelaySeconds", Op: "UPDATE", Base: Free, As: LeaseOps,
			Change: func(l *coordv1alpha1.FencedLease, _ time.Time) { l.Spec.LockDelaySeconds = 30 }, Want: allowedLease()},
		{Name: "a configured admin group raises minFencingToken", Op: "UPDATE", Base: Free, As: LeaseRootAdmin, AdminGroups: []string{"lease-admins"},
			Change: func(l *coordv1alpha1.FencedLease, _ time.Time) { l.Spec.MinFencingToken = 1000 }, Want: allowedLease(),
			UnitOnly: "the cluster tier's operator keeps the default admin group"},
		{Name: "system:masters is not an admin once groups are configured", Op: "UPDATE", Base: Free, As: LeaseOps, AdminGroups: []string{"lease-admins"},
			Change: func(l *coordv1alpha1.FencedLease, _ time.Time) { l.Spec.LeaseDurationSeconds = 60 },
			Want:   refusedLease("members of"), WebhookMsg: "members of [lease-admins] " + settings, PolicyMsg: "members of lease-admins " + settings,
			UnitOnly: "the cluster tier's operator keeps the default admin group"},
	}
}
