package ruletable

import (
	"fmt"
	"strings"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/policy"
	"github.com/kubefence/kubefence/controllers/webhooks/fencing"
)

// LeaseState is the state of lease job (and other) a fencing row is judged
// in. Each back end learns it its own way: the webhook reads the
// FencedLeases live and applies its clock; the policy reads the tenure
// table the controller writes from them.
type LeaseState string

// The lease states of the fencing table.
const (
	// Held: bob holds job with Current (alice held it with Stale before),
	// and other with Other.
	Held LeaseState = "held"
	// Released: bob released job; nobody holds it, its last token Current.
	Released LeaseState = "released"
	// Expired: the status still names bob, but his tenure is past its
	// expiry on the webhook's clock; the controller has not ended it yet.
	Expired LeaseState = "expired"
	// NoExpireTime: the status names bob without an expireTime (a status
	// the controller never writes).
	NoExpireTime LeaseState = "no-expire-time"
	// Recreated: job was deleted (its highest token Current) and created
	// again; nothing granted since.
	Recreated LeaseState = "recreated"
	// PodBound: job has identityBinding Pod and is held by pod worker-1 of
	// bob's service account, with Current.
	PodBound LeaseState = "pod-bound"
	// NoLeases: the namespace has no FencedLease at all, and never had.
	NoLeases LeaseState = "no-leases"
	// LeftoverTable: as Held, but the namespace's tenure table was written
	// for another installation of the fencing policy.
	LeftoverTable LeaseState = "leftover-table"
	// DeletedLease: job was deleted (its highest token Current recorded in
	// the tenure table) and not created again.
	DeletedLease LeaseState = "deleted"
)

// Path is how the cluster tier sends an UPDATE: each path is one write
// with the row's verdict. The unit tier sees only the resulting object.
type Path string

// The write paths of an UPDATE.
const (
	Put            Path = "update"
	JSONPatch      Path = "JSON patch"
	MergePatch     Path = "merge patch"
	Apply          Path = "server-side apply"
	StrategicMerge Path = "strategic-merge patch"
)

// Write is one write of the fencing table.
type Write struct {
	// Op is CREATE, UPDATE or DELETE; Sub the subresource ("", "status",
	// "scale").
	Op, Sub string
	Kind    Kind
	In      Where
	// Old is the stored object (nil on CREATE, but the evicted pod of an
	// eviction); New what the write asks for (nil on DELETE and eviction;
	// on /scale the parent, unchanged).
	Old, New *Object
	As       User
	// Via are the cluster tier's paths of an UPDATE (default: Put).
	Via []Path
}

// FencingRow is one row of the fencing rule's table.
type FencingRow struct {
	Name  string
	Lease LeaseState
	Write Write
	// Want is what both modes answer.
	Want Want
	// Webhook and Policy, if set, are what that mode answers instead, and
	// Why says why the back ends legitimately differ there.
	Webhook, Policy *Want
	Why             string
	// WebhookMsg and PolicyMsg are fragments of that mode's message only
	// (the messages differ; the verdicts do not).
	WebhookMsg, PolicyMsg string
	// Presented, if set, is the presentedToken the webhook's typed causes
	// name ("0" for a write without a token of its own); the lease's token
	// is the currentToken.
	Presented Token
	// UnitOnly, if set, says why the cluster tier does not replay the row.
	UnitOnly string
}

// For is what mode m answers.
func (r FencingRow) For(m string) Want {
	if m == Webhook && r.Webhook != nil {
		return *r.Webhook
	}
	if m == Policy && r.Policy != nil {
		return *r.Policy
	}
	return r.Want
}

// Unit is the namespace the unit tier writes in.
func (w Where) Unit() string {
	switch w {
	case Required:
		return "required"
	case Excluded:
		return "kubefence-system"
	case Terminating:
		return "terminating"
	case MarkedLive:
		return "marked"
	case ClusterScoped:
		return ""
	}
	return "jobs"
}

// Check compares what mode m answered (the write's error) with the row,
// in namespace ns with tokens tk; "" when they agree.
func (r FencingRow) Check(m string, err error, tk Tokens, ns string) string {
	want := r.For(m)
	v := VerdictOf(err)
	if v.Allowed != want.Allowed || (!v.Allowed && v.Reason != want.Reason) {
		return fmt.Sprintf("%s mode: %s, want %s", m, v, want)
	}
	if v.Allowed {
		return ""
	}
	judge := "webhook "
	if m == Policy && r.Write.Sub != "scale" && r.Write.Sub != "eviction" {
		judge = "policy " + policy.FencingPolicyName
	}
	msg := tk.Render(ns, want.Msg)
	switch {
	case !strings.HasPrefix(v.Judge, judge):
		return fmt.Sprintf("%s mode: %s, want a refusal by %s", m, v, judge)
	case !strings.Contains(v.Message, msg):
		return fmt.Sprintf("%s mode: message %q does not contain %q", m, v.Message, msg)
	case m == Webhook && !strings.Contains(v.Message, tk.Render(ns, r.WebhookMsg)):
		return fmt.Sprintf("%s mode: message %q does not contain %q", m, v.Message, tk.Render(ns, r.WebhookMsg))
	case m == Policy && !strings.Contains(v.Message, tk.Render(ns, r.PolicyMsg)):
		return fmt.Sprintf("%s mode: message %q does not contain %q", m, v.Message, tk.Render(ns, r.PolicyMsg))
	case v.Stale != StaleClass(v.Reason):
		return fmt.Sprintf("%s mode: fence.IsStale = %v for a refusal of class %s: %s", m, v.Stale, v.Reason, v.Message)
	}
	if judge == "webhook " {
		if c := WebhookCode(v.Reason); v.Code != c {
			return fmt.Sprintf("%s mode: HTTP %d, want %d for class %s: %s", m, v.Code, c, v.Reason, v.Message)
		}
		if StaleClass(v.Reason) && v.Causes["lease"] != ns+"/"+r.leaseOf() {
			return fmt.Sprintf("%s mode: typed causes %v, want lease %s/%s", m, v.Causes, ns, r.leaseOf())
		}
		if r.Presented != NoToken {
			p, _ := r.Presented.Value(tk)
			if v.Causes["presentedToken"] != p || v.Causes["currentToken"] != fmt.Sprint(tk.Current) {
				return fmt.Sprintf("%s mode: typed causes %v, want presentedToken %s and currentToken %d", m, v.Causes, p, tk.Current)
			}
		}
	} else if c := policyCode(v.Reason); v.Code != c {
		return fmt.Sprintf("%s mode: HTTP %d, want %d from the policy: %s", m, v.Code, c, v.Message)
	}
	return ""
}

// leaseOf is the lease a refusal of the row is about: the old one's, as
// long as the object was guarded.
func (r FencingRow) leaseOf() string {
	if r.Write.Old != nil && r.Write.Old.Lease != "" {
		return r.Write.Old.Lease
	}
	if r.Write.New != nil {
		return r.Write.New.Lease
	}
	return ""
}

// tokenless is the presentedToken of a write that presents none.
const tokenless Token = "0"

// refused is a refusal; differs wraps a mode's own verdict.
func refused(r fencing.Reason, msg string) Want { return Refused(r, msg) }
func differs(w Want) *Want                      { return &w }

var (
	stale       = coordv1alpha1.RefusalStale
	noHolder    = coordv1alpha1.RefusalNoHolder
	expired     = coordv1alpha1.RefusalExpired
	notIssued   = coordv1alpha1.RefusalNotIssued
	malformed   = coordv1alpha1.RefusalMalformed
	noLease     = coordv1alpha1.RefusalNoLease
	notHolder   = coordv1alpha1.RefusalNotHolder
	unguarded   = coordv1alpha1.RefusalUnguarded
	uncheckable = coordv1alpha1.RefusalUncheckable
)

func create(k Kind, in Where, o *Object, as User) Write {
	return Write{Op: "CREATE", Kind: k, In: in, New: o, As: as}
}

func update(k Kind, old, new *Object, as User, via ...Path) Write {
	return Write{Op: "UPDATE", Kind: k, In: Plain, Old: old, New: new, As: as, Via: via}
}

func status(k Kind, old, new *Object, as User) Write {
	return Write{Op: "UPDATE", Sub: "status", Kind: k, In: Plain, Old: old, New: new, As: as}
}

func scale(o *Object, as User) Write {
	return Write{Op: "UPDATE", Sub: "scale", Kind: Widget, In: Plain, Old: o, New: o, As: as}
}

// podOn is bob's pod guarded with Current, bound to node, its deletion
// started if deleting.
func podOn(node string, deleting bool) *Object {
	o := Guarded(Current)
	o.NodeName, o.Deleting = node, deleting
	return o
}

func evict(o *Object, as User) Write {
	return Write{Op: "CREATE", Sub: "eviction", Kind: Pod, In: Plain, Old: o, As: as}
}

func debug(o *Object, as User) Write {
	return Write{Op: "UPDATE", Sub: "ephemeralcontainers", Kind: Pod, In: Plain, Old: o, New: o.WithPhase("debug"), As: as}
}

func remove(o *Object, as User) Write {
	return Write{Op: "DELETE", Kind: Widget, In: Plain, Old: o, As: as}
}

func (w Write) in(where Where) Write { w.In = where; return w }

func (w Write) of(k Kind) Write { w.Kind = k; return w }

// allPatches are every way of sending an UPDATE of a custom resource.
var allPatches = []Path{Put, JSONPatch, MergePatch, Apply}

const (
	nodeOnACluster = "test/enforcement runNodeRows plays the kubelet on a cluster, in order (the holder's graceful DELETE first)"
	uncheckableMsg = "this object is cluster-scoped, so no FencedLease can check its fencing guard"
	guardedBefore  = "a guarded cluster-scoped object can no longer be created: it stands for one guarded before the rule"
	terminating    = "in a namespace being deleted the tenure table may be gone (the namespace controller deletes it in any order) and none can be created, so policy mode's operator marks the namespace (policy.NamespaceMarker) and a policy of its own accepts only the clean-up users' clean-up writes there (docs/design.md, \"A terminating namespace\"); the webhook reads the leases, which stay until their epoch finalizer is done"
	noClock        = "CEL has no clock: the tenure table names bob until the controller, on its own clock, ends the tenure (and a grant after an expiry waits the commit lag after the API servers enforce the new entry), while the webhook refuses his token from its cut-off before the expiry"
)

// FencingRows is the fencing rule's table. Every row runs in both modes
// in process (the unit tier) and, unless UnitOnly, on a real API server
// (test/enforcement).
func FencingRows() []FencingRow {
	cascade := Guarded(Current)
	cascade.Finalizers = []string{"example.kubefence.io/cascade"}
	repointed := &Object{Lease: "other", Token: Other, Writer: "bob"}
	return []FencingRow{
		// Creates.
		{Name: "an unguarded create", Lease: Held, Write: create(Widget, Plain, Unguarded(), Alice), Want: Allowed},
		{Name: "create with the current token", Lease: Held, Write: create(Widget, Plain, Guarded(Current), Bob), Want: Allowed},
		{Name: "create with a stale token", Lease: Held, Write: create(Widget, Plain, Guarded(Stale).By("alice"), Alice),
			Want: refused(stale, "stale fencing token {stale} for lease {ns}/job: current token is {current}"), Presented: Stale},
		{Name: "create without a token", Lease: Held, Write: create(Widget, Plain, Guarded(NoToken), Bob),
			Want: refused(malformed, "missing fencing token")},
		{Name: "create with an empty token", Lease: Held, Write: create(Widget, Plain, Guarded(Empty), Bob),
			Want: refused(malformed, "invalid fencing token for lease {ns}/job"), WebhookMsg: "is empty"},
		{Name: "create with a non-numeric token", Lease: Held, Write: create(Widget, Plain, Guarded("abc"), Bob),
			Want: refused(malformed, `"abc" is not a`), WebhookMsg: `"abc" is not a decimal integer`},
		{Name: "create with a negative token", Lease: Held, Write: create(Widget, Plain, Guarded("-1"), Bob),
			Want: refused(malformed, `"-1" is`), WebhookMsg: "is negative"},
		{Name: "create with a token with a leading zero", Lease: Held, Write: create(Widget, Plain, Guarded("0042"), Bob),
			Want: refused(malformed, `"0042" is not`), WebhookMsg: "not written canonically"},
		{Name: "create with the token -0", Lease: Held, Write: create(Widget, Plain, Guarded("-0"), Bob),
			Want: refused(malformed, `"-0" is`), WebhookMsg: "not written canonically"},
		{Name: "create with an overflowing token", Lease: Held, Write: create(Widget, Plain, Guarded("9223372036854775808"), Bob),
			Want: refused(malformed, `"9223372036854775808"`), WebhookMsg: "overflows int64"},
		{Name: "create naming an unknown lease", Lease: Held, Write: create(Widget, Plain, &Object{Lease: "nope", Token: "1", Writer: "bob"}, Bob),
			Want: refused(noLease, "{ns}/nope"), WebhookMsg: "does not exist", PolicyMsg: "has no entry in the tenure table"},
		{Name: "create with a token never issued", Lease: Held, Write: create(Widget, Plain, Guarded(Unissued), Bob),
			Want: refused(notIssued, "fencing token {unissued} for lease {ns}/job was never issued: current token is {current}")},
		{Name: "strategic-merge patch of a guarded ConfigMap with a stale token",
			Lease: Held, Write: update(ConfigMap, Guarded(Current), Guarded(Stale).By("alice"), Alice, StrategicMerge),
			Want: refused(stale, "stale fencing token {stale}")},
		{Name: "strategic-merge patch of a guarded ConfigMap with the current token",
			Lease: Held, Write: update(ConfigMap, Guarded(Current), Guarded(Current).By("bob-2"), Bob, StrategicMerge), Want: Allowed},
		{Name: "a coordination.k8s.io Lease with the guard label and a garbage token (I7)",
			Lease: Held, Write: create(CoordinationLease, Plain, &Object{Lease: "job", Token: "garbage", Writer: "x"}, Alice), Want: Allowed},
		{Name: "a guarded object with a garbage token in the operator's namespace (I7)",
			Lease: Held, Write: create(Widget, Excluded, &Object{Lease: "job", Token: "garbage", Writer: "operator"}, Alice), Want: Allowed},

		// Updates: a token written, or the stored one inherited.
		{Name: "update with a stale token", Lease: Held, Write: update(Widget, Guarded(Current), Guarded(Stale).By("alice"), Alice, allPatches...),
			Want: refused(stale, "stale fencing token {stale} for lease {ns}/job"), WebhookMsg: "the object already accepted token {current}"},
		{Name: "update inheriting the stored token by the holder", Lease: Held,
			Write: update(Widget, Guarded(Current), Guarded(Current).By("bob-2"), Bob, allPatches...), Want: Allowed},
		{Name: "update inheriting the stored token by a non-holder", Lease: Held,
			Write: update(Widget, Guarded(Current), Guarded(Current).By("alice"), Alice),
			Want:  refused(notHolder, "alice is not the holder of lease {ns}/job"), Presented: tokenless},
		{Name: "update inheriting an old token, by the holder granted again", Lease: Held,
			Write: update(Widget, Guarded(Stale).By("alice"), Guarded(Stale).By("bob"), Bob),
			Want:  refused(stale, "stale fencing token {stale} for lease {ns}/job: current token is {current}")},
		{Name: "update re-spelling the token +{current}", Lease: Held, Write: update(Widget, Guarded(Current), Guarded("+"+Current).By("alice"), Alice),
			Want: refused(malformed, `"+{current}"`), WebhookMsg: "not written canonically"},
		{Name: "update re-spelling the token 0{current}", Lease: Held, Write: update(Widget, Guarded(Current), Guarded("0"+Current).By("alice"), Alice),
			Want: refused(malformed, `"0{current}"`), WebhookMsg: "not written canonically"},
		{Name: "removing the guard by a non-holder", Lease: Held, Write: update(Widget, Guarded(Current), Unguarded().By("alice"), Alice),
			Want: refused(notHolder, "alice is not the holder of lease {ns}/job")},
		{Name: "removing the guard by the holder", Lease: Held, Write: update(Widget, Guarded(Current), Unguarded().By("bob-2"), Bob), Want: Allowed},
		{Name: "re-pointing it at another lease by a non-holder", Lease: Held, Write: update(Widget, Guarded(Current), repointed.By("alice"), Alice),
			Want: refused(notHolder, "alice is not the holder of lease {ns}/job")},
		{Name: "re-pointing it at another lease by the holder of both", Lease: Held, Write: update(Widget, Guarded(Current), repointed, Bob), Want: Allowed},
		{Name: "the garbage collector finishing a cascade (finalizers only)", Lease: Held, Write: update(Widget, Guarded(Current), cascade, GC), Want: Allowed},
		{Name: "the garbage collector changing the spec", Lease: Held, Write: update(Widget, Guarded(Current), Guarded(Current).By("gc"), GC),
			Want: refused(notHolder, "is not the holder of lease {ns}/job")},
		{Name: "the namespace controller updating it with the current token", Lease: Held,
			Write: update(Widget, Guarded(Current), Guarded(Current).By("namespace-controller"), NamespaceController),
			Want:  refused(notHolder, "is not the holder of lease {ns}/job")},

		// Deletes.
		{Name: "delete by the holder", Lease: Held, Write: remove(Guarded(Current), Bob), Want: Allowed},
		{Name: "delete by a non-holder", Lease: Held, Write: remove(Guarded(Current), Alice),
			Want: refused(notHolder, "alice is not the holder of lease {ns}/job"), WebhookMsg: "(held by bob with token {current})", Presented: tokenless},
		{Name: "the namespace controller deleting it", Lease: Held, Write: remove(Guarded(Current), NamespaceController), Want: Allowed},
		{Name: "kube-controller-manager's own user deleting it", Lease: Held, Write: remove(Guarded(Current), KubeControllerManager),
			Want: refused(notHolder, "is not the holder of lease {ns}/job")},

		// Subresources.
		{Name: "/status by the holder", Lease: Held, Write: status(Widget, Guarded(Current), Guarded(Current).WithPhase("running"), Bob), Want: Allowed},
		{Name: "/status by a non-holder", Lease: Held, Write: status(Widget, Guarded(Current), Guarded(Current).WithPhase("alice"), Alice),
			Want: refused(notHolder, "alice is not the holder of lease {ns}/job"), WebhookMsg: "writes to /status", PolicyMsg: "writes to /status"},
		{Name: "/status by a non-holder, of an object with an old token", Lease: Held,
			Write: status(Widget, Guarded(Stale).By("alice"), Guarded(Stale).By("alice").WithPhase("alice"), Alice),
			Want:  refused(notHolder, "alice is not the holder of lease {ns}/job")},
		{Name: "/scale by the holder", Lease: Held, Write: scale(Guarded(Current), Bob), Want: Allowed},
		{Name: "/scale by a non-holder", Lease: Held, Write: scale(Guarded(Current), Alice),
			Want: refused(notHolder, "alice is not the holder of lease {ns}/job"), WebhookMsg: "writes to /scale"},
		{Name: "deployments/status by the holder, token unchanged", Lease: Held,
			Write: status(Deployment, Guarded(Current), Guarded(Current).WithPhase("7"), Bob), Want: Allowed},
		{Name: "deployments/status rewriting the token to a stale one, by the holder", Lease: Held,
			Write: status(Deployment, Guarded(Current), Guarded(Stale), Bob),
			Want:  refused(stale, "stale fencing token {stale} for lease {ns}/job"), WebhookMsg: "the object already accepted token {current}"},
		{Name: "deployments/status rewriting the token to one never issued, by the holder", Lease: Held,
			Write: status(Deployment, Guarded(Current), Guarded(Unissued), Bob), Want: refused(notIssued, "was never issued")},
		{Name: "pods/status removing the guard, by a non-holder", Lease: Held,
			Write: status(Pod, Guarded(Current), Unguarded(), Alice), Want: refused(notHolder, "alice is not the holder of lease {ns}/job")},
		{Name: "pods/status removing the guard, by the holder", Lease: Held, Write: status(Pod, Guarded(Current), Unguarded(), Bob), Want: Allowed},

		{Name: "/eviction of a guarded pod by a non-holder", Lease: Held, Write: evict(Guarded(Current), Alice),
			Want: refused(notHolder, "alice is not the holder of lease {ns}/job"), WebhookMsg: "writes to /eviction"},
		{Name: "/eviction of a guarded pod by the holder", Lease: Held, Write: evict(Guarded(Current), Bob), Want: Allowed},
		{Name: "pods/ephemeralcontainers of a guarded pod by a non-holder", Lease: Held, Write: debug(Guarded(Current), Alice),
			Want: refused(notHolder, "alice is not the holder of lease {ns}/job"), WebhookMsg: "writes to /ephemeralcontainers", PolicyMsg: "writes to /ephemeralcontainers"},
		{Name: "pods/ephemeralcontainers of a guarded pod by the holder", Lease: Held, Write: debug(Guarded(Current), Bob), Want: Allowed},

		// Mandatory fencing of the listed kinds in a namespace labelled for it.
		{Name: "required: an unguarded create", Lease: Held, Write: create(Widget, Required, Unguarded(), Bob),
			Want: refused(unguarded, "fencing is required for this kind")},
		{Name: "required: the holder removing the guard", Lease: Held, Write: update(Widget, Guarded(Current), Unguarded(), Bob).in(Required),
			Want: refused(unguarded, "cannot be removed")},
		{Name: "required: another kind unguarded", Lease: Held, Write: create(ConfigMap, Required, Unguarded(), Bob), Want: Allowed},
		{Name: "required: the holder's guarded create", Lease: Held, Write: create(Widget, Required, Guarded(Current), Bob), Want: Allowed},
		{Name: "required: a stale create", Lease: Held, Write: create(Widget, Required, Guarded(Stale).By("alice"), Alice),
			Want: refused(stale, "stale fencing token {stale} for lease {ns}/job: current token is {current}")},
		{Name: "required: the namespace controller deleting an unguarded object", Lease: Held,
			Write: remove(Unguarded(), NamespaceController).in(Required), Want: Allowed},
		{Name: "required: others deleting an unguarded object", Lease: Held, Write: remove(Unguarded(), Bob).in(Required),
			Want: refused(unguarded, "fencing is required for this kind")},
		{Name: "required: /scale by a non-holder", Lease: Held, Write: scale(Guarded(Current), Alice).in(Required),
			Want: refused(notHolder, "alice is not the holder of lease {ns}/job"), WebhookMsg: "writes to /scale"},
		{Name: "required: /scale by the holder", Lease: Held, Write: scale(Guarded(Current), Bob).in(Required), Want: Allowed},
		{Name: "required: /status by a non-holder", Lease: Held, Write: status(Widget, Guarded(Current), Guarded(Current).WithPhase("alice"), Alice).in(Required),
			Want: refused(notHolder, "alice is not the holder of lease {ns}/job"), WebhookMsg: "writes to /status", PolicyMsg: "writes to /status"},
		{Name: "required: /eviction of a guarded pod by a non-holder", Lease: Held, Write: evict(Guarded(Current), Alice).in(Required),
			Want: refused(notHolder, "alice is not the holder of lease {ns}/job")},
		{Name: "required: pods/ephemeralcontainers of a guarded pod by a non-holder", Lease: Held, Write: debug(Guarded(Current), Alice).in(Required),
			Want: refused(notHolder, "alice is not the holder of lease {ns}/job")},

		// A namespace being deleted.
		{Name: "terminating: the holder's update", Lease: Held, Write: update(Widget, Guarded(Current), Guarded(Current).By("bob-2"), Bob).in(Terminating),
			Want: Allowed, Policy: differs(Refused(ReasonTerminating, "namespace {ns} is being deleted")), Why: terminating,
			UnitOnly: "test/enforcement runNamespaceDeletion deletes a namespace on a cluster, playing the namespace controller"},
		{Name: "terminating: a non-holder's delete", Lease: Held, Write: remove(Guarded(Current), Alice).in(Terminating),
			Want: refused(notHolder, "alice is not the holder of lease {ns}/job"), Policy: differs(Refused(ReasonTerminating, "namespace {ns} is being deleted")), Why: terminating,
			UnitOnly: "test/enforcement runNamespaceDeletion"},
		{Name: "terminating: the namespace controller changing the spec", Lease: Held,
			Write: update(Widget, Guarded(Current), Guarded(Current).By("namespace-controller"), NamespaceController).in(Terminating),
			Want:  refused(notHolder, "is not the holder of lease {ns}/job"), Policy: differs(Refused(ReasonTerminating, "namespace {ns} is being deleted")), Why: terminating,
			UnitOnly: "test/enforcement runNamespaceDeletion"},
		{Name: "terminating: the namespace controller deleting it", Lease: Held, Write: remove(Guarded(Current), NamespaceController).in(Terminating), Want: Allowed,
			UnitOnly: "test/enforcement runNamespaceDeletion"},
		{Name: "terminating: the garbage collector finishing a cascade", Lease: Held, Write: update(Widget, Guarded(Current), cascade, GC).in(Terminating), Want: Allowed,
			UnitOnly: "test/enforcement runNamespaceDeletion"},
		{Name: "a live namespace marked terminating by hand: the holder's update", Lease: Held,
			Write: update(Widget, Guarded(Current), Guarded(Current).By("bob-2"), Bob).in(MarkedLive),
			Want:  Allowed, Policy: differs(Refused(ReasonTerminating, "is labelled "+policy.TerminatingLabel+" but is not being deleted")),
			Why:      "the mark moves the namespace's guarded objects to the terminating policy, which admits no more than the fencing policy would; the webhook ignores it",
			UnitOnly: "test/enforcement runMarkedLiveNamespace"},

		// Cluster-scoped objects: no FencedLease can check a guard there.
		{Name: "cluster-scoped: create guarded, with a token", Lease: NoLeases,
			Write: create(ClusterWidget, ClusterScoped, &Object{Lease: "job", Token: "1", Writer: "bob"}, Bob),
			Want:  refused(uncheckable, uncheckableMsg), WebhookMsg: "remove the kubefence.io/lease label", PolicyMsg: "remove the kubefence.io/lease label"},
		{Name: "cluster-scoped: create guarded, without a token", Lease: NoLeases,
			Write: create(ClusterWidget, ClusterScoped, &Object{Lease: "job", Writer: "bob"}, Bob), Want: refused(uncheckable, uncheckableMsg)},
		{Name: "cluster-scoped: a guarded Namespace", Lease: NoLeases,
			Write: create(Namespace, ClusterScoped, &Object{Lease: "job", Token: "1"}, Controller), Want: refused(uncheckable, uncheckableMsg)},
		{Name: "cluster-scoped: an unguarded create", Lease: NoLeases, Write: create(ClusterWidget, ClusterScoped, Unguarded(), Bob), Want: Allowed},
		{Name: "cluster-scoped: update adding the guard", Lease: NoLeases,
			Write: update(ClusterWidget, Unguarded(), Guarded("1"), Bob).in(ClusterScoped), Want: refused(uncheckable, uncheckableMsg)},
		{Name: "cluster-scoped: update adding the guard label alone", Lease: NoLeases,
			Write: update(ClusterWidget, Unguarded(), Guarded(NoToken), Bob).in(ClusterScoped), Want: refused(uncheckable, uncheckableMsg)},
		{Name: "cluster-scoped: update adding a token annotation alone (it guards nothing)", Lease: NoLeases,
			Write: update(ClusterWidget, Unguarded(), Unguarded().WithToken("1"), Bob).in(ClusterScoped), Want: Allowed},
		{Name: "cluster-scoped: delete an unguarded object", Lease: NoLeases, Write: remove(Unguarded(), Bob).of(ClusterWidget).in(ClusterScoped), Want: Allowed},
		{Name: "cluster-scoped: update keeping the guard", Lease: NoLeases,
			Write: update(ClusterWidget, Guarded("1"), Guarded("1").By("bob-2"), Bob).in(ClusterScoped), Want: refused(uncheckable, uncheckableMsg), UnitOnly: guardedBefore},
		{Name: "cluster-scoped: status update keeping the guard", Lease: NoLeases,
			Write: status(ClusterWidget, Guarded("1"), Guarded("1").WithPhase("x"), Bob).in(ClusterScoped), Want: refused(uncheckable, uncheckableMsg), UnitOnly: guardedBefore},
		{Name: "cluster-scoped: update removing the guard", Lease: NoLeases,
			Write: update(ClusterWidget, Guarded("1"), Unguarded(), Bob).in(ClusterScoped), Want: Allowed, UnitOnly: guardedBefore},
		{Name: "cluster-scoped: delete a guarded object", Lease: NoLeases,
			Write: remove(Guarded("1"), Mallory).of(ClusterWidget).in(ClusterScoped), Want: Allowed, UnitOnly: guardedBefore},

		// The node rule: the kubelet of the node a guarded Pod is bound to
		// reports its status and finishes its deletion without the lease.
		{Name: "node rule: pods/status by the pod's node, guard and token unchanged", Lease: Held,
			Write: status(Pod, podOn("n1", false), podOn("n1", false), Node("n1")), Want: Allowed, UnitOnly: nodeOnACluster},
		{Name: "node rule: pods/status by another node", Lease: Held, Write: status(Pod, podOn("n2", false), podOn("n2", false), Node("n1")),
			Want: refused(notHolder, "system:node:n1 is not the holder of lease {ns}/job"), UnitOnly: nodeOnACluster},
		{Name: "node rule: pods/status by the pod's node after the lease was released", Lease: Released,
			Write: status(Pod, podOn("n1", false), podOn("n1", false), Node("n1")), Want: Allowed, UnitOnly: nodeOnACluster},
		{Name: "node rule: pods/status by the pod's node that lowers the token takes the token rules", Lease: Held,
			Write: status(Pod, podOn("n1", false), podOn("n1", false).WithToken(Stale), Node("n1")),
			Want:  refused(stale, "the object already accepted token {current}"), UnitOnly: nodeOnACluster},
		{Name: "node rule: pods/status by the pod's node that removes the guard", Lease: Held,
			Write: status(Pod, podOn("n1", false), &Object{NodeName: "n1"}, Node("n1")),
			Want:  refused(notHolder, "system:node:n1 is not the holder of lease {ns}/job"), UnitOnly: nodeOnACluster},
		{Name: "node rule: pods/status by a user named system:node:n1 outside group system:nodes", Lease: Held,
			Write: status(Pod, podOn("n1", false), podOn("n1", false), User{Name: coordv1alpha1.NodeUserPrefix + "n1"}),
			Want:  refused(notHolder, "system:node:n1 is not the holder of lease {ns}/job"), UnitOnly: nodeOnACluster},
		{Name: "node rule: a Widget's /status by a node (not a pod)", Lease: Held,
			Write: status(Widget, Guarded(Current), Guarded(Current).WithPhase("n1"), Node("n1")),
			Want:  refused(notHolder, "system:node:n1 is not the holder of lease {ns}/job"), UnitOnly: nodeOnACluster},
		{Name: "node rule: a pod's spec by the pod's node (not /status)", Lease: Held,
			Write: update(Pod, podOn("n1", false), podOn("n1", false).By("n1"), Node("n1")),
			Want:  refused(notHolder, "system:node:n1 is not the holder of lease {ns}/job"), UnitOnly: nodeOnACluster},
		{Name: "node rule: DELETE by the pod's node of a terminating pod", Lease: Held, Write: remove(podOn("n1", true), Node("n1")).of(Pod),
			Want: Allowed, UnitOnly: nodeOnACluster},
		{Name: "node rule: DELETE by the pod's node before its deletion started", Lease: Held, Write: remove(podOn("n1", false), Node("n1")).of(Pod),
			Want: refused(notHolder, "system:node:n1 is not the holder of lease {ns}/job"), UnitOnly: nodeOnACluster},
		{Name: "node rule: DELETE by another node of a terminating pod", Lease: Held, Write: remove(podOn("n2", true), Node("n1")).of(Pod),
			Want: refused(notHolder, "system:node:n1 is not the holder of lease {ns}/job"), UnitOnly: nodeOnACluster},
		{Name: "node rule: DELETE by the pod's node of a terminating pod, the tenure past its expiry", Lease: Expired,
			Write: remove(podOn("n1", true), Node("n1")).of(Pod), Want: Allowed, UnitOnly: nodeOnACluster},
		{Name: "node rule: DELETE by the pod's node of a terminating pod, the lease deleted", Lease: DeletedLease,
			Write: remove(podOn("n1", true), Node("n1")).of(Pod), Want: Allowed, UnitOnly: nodeOnACluster},
		{Name: "a clean-up user's pods/status, guard and token unchanged (PodGC's mark before its delete)", Lease: Released,
			Write: status(Pod, podOn("gone", false), podOn("gone", false), GC), Want: Allowed, UnitOnly: nodeOnACluster},
		{Name: "a clean-up user's pods/status that lowers the token takes the token rules", Lease: Held,
			Write: status(Pod, podOn("gone", false), podOn("gone", false).WithToken(Stale), GC),
			Want:  refused(stale, "the object already accepted token {current}"), UnitOnly: nodeOnACluster},
		{Name: "a clean-up user's /status of a Widget", Lease: Held, Write: status(Widget, Guarded(Current), Guarded(Current).WithPhase("gc"), GC),
			Want: refused(notHolder, "is not the holder of lease {ns}/job")},

		// After a release.
		{Name: "released: update inheriting the token", Lease: Released, Write: update(Widget, Guarded(Current), Guarded(Current).By("bob-2"), Bob),
			Want: refused(noHolder, "has no holder")},
		{Name: "released: create with its last token", Lease: Released, Write: create(Widget, Plain, Guarded(Current), Bob),
			Want: refused(noHolder, "has no holder")},
		{Name: "released: delete", Lease: Released, Write: remove(Guarded(Current), Bob), Want: refused(noHolder, "has no holder")},
		{Name: "released: the garbage collector deleting it", Lease: Released, Write: remove(Guarded(Current), GC), Want: Allowed},
		{Name: "released: the garbage collector finishing a cascade", Lease: Released, Write: update(Widget, Guarded(Current), cascade, GC), Want: Allowed},

		// A lease deleted and created again.
		{Name: "recreated: a token of the earlier incarnation", Lease: Recreated,
			Write: update(Widget, Guarded(Stale).By("alice"), Guarded(Current), Bob),
			Want:  refused(stale, "stale fencing token {current} for lease {ns}/job"), WebhookMsg: "were issued before the lease was deleted and created again",
			Policy: differs(refused(notIssued, "fencing token {current} for lease {ns}/job was never issued: current token is 0")),
			Why:    "the tenure table keeps no tokenBase: the controller writes the new incarnation's entry (token 0, no holder) from its status, so the policy cannot tell a token of the earlier incarnation from one never issued; both refuse it"},
		{Name: "recreated: a token beyond every incarnation", Lease: Recreated, Write: create(Widget, Plain, Guarded(Unissued), Bob),
			Want: refused(notIssued, "was never issued")},
		{Name: "recreated: a tokenless write to an object ahead of the lease", Lease: Recreated, Write: remove(Guarded(Current), Bob),
			Want: refused(stale, "the object already accepted token {current}, above the current token 0 of lease {ns}/job")},

		// Pod binding.
		{Name: "pod binding: the holder's pod deletes", Lease: PodBound, Write: remove(Guarded(Current), BobFromPod("worker-1")), Want: Allowed},
		{Name: "pod binding: a sibling pod of the same service account deletes", Lease: PodBound, Write: remove(Guarded(Current), BobFromPod("worker-2")),
			Want: refused(notHolder, "bob (pod worker-2) is not the holder of lease {ns}/job")},

		// Where the back ends learn the tenure differently.
		{Name: "a tenure past its expiry, not yet ended by the controller", Lease: Expired,
			Write: update(Widget, Guarded(Current), Guarded(Current).By("bob-2"), Bob),
			Want:  refused(expired, "writes stop being accepted at"), Policy: differs(Allowed), Why: noClock,
			UnitOnly: "the controller ends a tenure at its expiry; test/enforcement runExpiry and test/tenure cover the end on a cluster"},
		{Name: "a status naming a holder without expireTime", Lease: NoExpireTime,
			Write: update(Widget, Guarded(Current), Guarded(Current).By("bob-2"), Bob),
			Want:  refused(expired, "no expireTime"), Policy: differs(Allowed),
			Why:      "the webhook fails closed on a status it cannot show live; the policy reads the table entry the controller wrote at the grant, which names bob (the controller never writes a holder without expireTime)",
			UnitOnly: "the controller never writes such a status"},
		{Name: "a guarded create where no lease was ever granted", Lease: NoLeases, Write: create(Widget, Plain, Guarded("1"), Bob),
			Want: refused(noLease, "{ns}/job"), Policy: differs(Refused(ReasonNoTable, "no params found")),
			Why: "the namespace has no tenure table, and the binding's paramRef refuses a write whose table is missing (parameterNotFoundAction Deny) before the policy can name the lease"},
		{Name: "a tenure table left by another installation", Lease: LeftoverTable, Write: create(Widget, Plain, Guarded(Current), Bob),
			Want: Allowed, Policy: differs(Refused(ReasonTable, "was not written for the installed fencing policy")),
			Why:      "the policy trusts only the tables its own installation marked (docs/design.md, \"Switching modes\"); the webhook reads the leases",
			UnitOnly: "test/enforcement TestPolicyModeRoundTripDistrustsLeftoverTables"},
	}
}
