package fencedlease

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// The FencedLease validator's rules (I6), one table row each. The envtest
// suite (test/operator/admission_test.go) keeps the cases that need a real API
// server: patch types, server-side apply, RBAC.

const ruleController = "system:serviceaccount:kubefence-system:kubefence-controller-manager"

// rq is a request as "identity:user:renewSequence" would write it.
func rq(identity, user string, seq int64) coordv1alpha1.LeaseRequest {
	return coordv1alpha1.LeaseRequest{HolderIdentity: identity, User: user, RenewSequence: seq}
}

func ruleLease(binding coordv1alpha1.IdentityBinding, reqs ...coordv1alpha1.LeaseRequest) *coordv1alpha1.FencedLease {
	return &coordv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "jobs", Name: "job", Finalizers: []string{coordv1alpha1.EpochFinalizer}},
		Spec:       coordv1alpha1.FencedLeaseSpec{IdentityBinding: binding, LeaseDurationSeconds: 15, Requests: reqs},
	}
}

func asUser(name string, groups ...string) authenticationv1.UserInfo {
	return authenticationv1.UserInfo{Username: name, Groups: groups}
}

func asPod(sa, pod string) authenticationv1.UserInfo {
	return authenticationv1.UserInfo{Username: sa, Extra: map[string]authenticationv1.ExtraValue{coordv1alpha1.PodNameExtraKey: {pod}}}
}

func ruleContext(user authenticationv1.UserInfo, op admissionv1.Operation, sub string) context.Context {
	return admission.NewContextWithRequest(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: op, SubResource: sub, UserInfo: user,
	}})
}

// wantRefusal checks err against want ("" for allowed, else a part of the
// message of a 403 Forbidden).
func wantRefusal(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("refused: %v; want allowed", err)
	case want == "":
	case err == nil:
		t.Fatalf("allowed; want refused with %q", want)
	case !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want):
		t.Fatalf("refused with %v; want a 403 containing %q", err, want)
	}
}

func TestValidateCreateRules(t *testing.T) {
	sa := "system:serviceaccount:jobs:worker"
	for _, tc := range []struct {
		name  string
		lease *coordv1alpha1.FencedLease
		user  authenticationv1.UserInfo
		sub   string
		want  string
	}{
		{"empty lease", ruleLease(""), asUser("alice"), "", ""},
		{"own request", ruleLease("", rq("a", "alice", 0)), asUser("alice"), "", ""},
		{"request for another user", ruleLease("", rq("a", "bob", 0)), asUser("alice"), "", `names user "bob", but the request comes from "alice"`},
		{"ServiceAccount binding, identity is the username", ruleLease(coordv1alpha1.IdentityBindingServiceAccount, rq(sa, sa, 0)), asUser(sa), "", ""},
		{"ServiceAccount binding, other identity", ruleLease(coordv1alpha1.IdentityBindingServiceAccount, rq("a", sa, 0)), asUser(sa), "", "must equal the requester's username"},
		{"Pod binding, own pod", ruleLease(coordv1alpha1.IdentityBindingPod, rq("worker-1", sa, 0)), asPod(sa, "worker-1"), "", ""},
		{"Pod binding, another pod", ruleLease(coordv1alpha1.IdentityBindingPod, rq("worker-2", sa, 0)), asPod(sa, "worker-1"), "", `must equal the requester's pod name "worker-1"`},
		{"Pod binding, no pod-bound token", ruleLease(coordv1alpha1.IdentityBindingPod, rq("worker-1", sa, 0)), asUser(sa), "", "needs a requester authenticated with a pod-bound service-account token"},
		{"expired annotation from a client", func() *coordv1alpha1.FencedLease {
			l := ruleLease("")
			l.Annotations = map[string]string{coordv1alpha1.ExpiredAnnotation: "a/1"}
			return l
		}(), asUser("alice"), "", "is written only by the kubefence controller"},
		{"status from a client", ruleLease(""), asUser("alice"), "status", "status is written only by the kubefence controller"},
		{"the controller may do anything", ruleLease("", rq("a", "bob", 0)), asUser(ruleController), "status", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := &FencedLeaseValidator{ControllerUsers: []string{ruleController}}
			_, err := v.ValidateCreate(ruleContext(tc.user, admissionv1.Create, tc.sub), tc.lease)
			wantRefusal(t, err, tc.want)
		})
	}
}

func TestValidateUpdateRules(t *testing.T) {
	sa := "system:serviceaccount:jobs:worker"
	alice, bob := asUser("alice"), asUser("bob")
	base := func(reqs ...coordv1alpha1.LeaseRequest) *coordv1alpha1.FencedLease { return ruleLease("", reqs...) }
	pod := func(reqs ...coordv1alpha1.LeaseRequest) *coordv1alpha1.FencedLease {
		return ruleLease(coordv1alpha1.IdentityBindingPod, reqs...)
	}
	change := func(l *coordv1alpha1.FencedLease, f func(*coordv1alpha1.FencedLease)) *coordv1alpha1.FencedLease {
		l = l.DeepCopy()
		f(l)
		return l
	}
	// heldBy is l with status naming holder (token 7), as the controller wrote it.
	heldBy := func(holder string, l *coordv1alpha1.FencedLease) *coordv1alpha1.FencedLease {
		return change(l, func(l *coordv1alpha1.FencedLease) {
			l.Status.HolderIdentity, l.Status.HolderUser, l.Status.FencingToken = holder, "alice", 7
		})
	}
	const requeued = `(holderIdentity "a") queues the identity status.holderIdentity still names as the holder of token 7, whose request was withdrawn`
	for _, tc := range []struct {
		name     string
		old, cur *coordv1alpha1.FencedLease
		user     authenticationv1.UserInfo
		sub      string
		admins   []string
		want     string
	}{
		// The request queue.
		{"join at the end", base(rq("a", "alice", 3)), base(rq("a", "alice", 3), rq("b", "bob", 0)), bob, "", nil, ""},
		{"renew own", base(rq("a", "alice", 3)), base(rq("a", "alice", 4)), alice, "", nil, ""},
		{"withdraw own", base(rq("a", "alice", 3), rq("b", "bob", 0)), base(rq("b", "bob", 0)), alice, "", nil, ""},
		{"forged renewal", base(rq("a", "alice", 3), rq("b", "bob", 0)), base(rq("a", "alice", 4), rq("b", "bob", 0)), bob, "", nil,
			`cannot change the request of holderIdentity "a": it belongs to user "alice", not "bob"; only the holder can renew it`},
		{"stolen grant", base(rq("a", "alice", 3), rq("b", "bob", 0)), base(rq("b", "bob", 0)), bob, "", nil,
			`cannot remove the request of holderIdentity "a"`},
		{"queue jump", base(rq("a", "alice", 3), rq("b", "bob", 0)), base(rq("b", "bob", 0), rq("a", "alice", 3)), bob, "", nil,
			"the order of spec.requests changed from [a, b] to [b, a]"},
		{"insert ahead", base(rq("a", "alice", 3), rq("b", "bob", 0)), base(rq("a", "alice", 3), rq("c", "carol", 0), rq("b", "bob", 0)), asUser("carol"), "", nil,
			`spec.requests[2] (holderIdentity "b") was moved behind a new request`},
		{"request for someone else", base(rq("a", "alice", 3)), base(rq("a", "alice", 3), rq("c", "carol", 0)), bob, "", nil,
			`names user "carol", but the request comes from "bob"`},
		{"Pod binding, renew own pod's", pod(rq("worker-1", sa, 1), rq("worker-2", sa, 0)), pod(rq("worker-1", sa, 2), rq("worker-2", sa, 0)), asPod(sa, "worker-1"), "", nil, ""},
		{"Pod binding, sibling pod renews", pod(rq("worker-1", sa, 1), rq("worker-2", sa, 0)), pod(rq("worker-1", sa, 2), rq("worker-2", sa, 0)), asPod(sa, "worker-2"), "", nil,
			`it belongs to pod "worker-1"`},
		// The identity status names as holder, its request withdrawn: the
		// controller has not ended the tenure yet, and a request made under
		// it now would be taken for the tenure.
		{"the released holder queues again before status changed", heldBy("a", base(rq("b", "bob", 0))), base(rq("b", "bob", 0), rq("a", "alice", 0)), alice, "", nil, requeued},
		{"another user queues under the released holder's identity", heldBy("a", base(rq("b", "bob", 0))), base(rq("b", "bob", 0), rq("a", "mallory", 0)), asUser("mallory"), "", nil,
			`wait until status.holderIdentity no longer names "a", then request again`},
		{"an operator queues under the released holder's identity", heldBy("a", base(rq("b", "bob", 0))), base(rq("b", "bob", 0), rq("a", "mallory", 0)), asUser("root", "system:masters"), "", nil, requeued},
		{"the holder renews while status names it", heldBy("a", base(rq("a", "alice", 3))), base(rq("a", "alice", 4)), alice, "", nil, ""},
		{"another queues while status names the holder", heldBy("a", base(rq("a", "alice", 3))), base(rq("a", "alice", 3), rq("b", "bob", 0)), bob, "", nil, ""},
		{"the released holder queues again once status names the next holder", heldBy("b", base(rq("b", "bob", 0))), base(rq("b", "bob", 0), rq("a", "alice", 0)), alice, "", nil, ""},
		// What only the controller writes.
		{"status", base(rq("a", "alice", 0)), base(rq("a", "alice", 0)), alice, "status", nil, "status is written only by the kubefence controller"},
		{"another subresource", base(), base(), alice, "scale", nil, `subresource "scale" of a FencedLease cannot be written`},
		{"finalizer removed", base(rq("a", "alice", 0)), change(base(rq("a", "alice", 0)), func(l *coordv1alpha1.FencedLease) { l.Finalizers = nil }), alice, "", nil,
			"finalizer " + coordv1alpha1.EpochFinalizer + " is removed only by the kubefence controller"},
		{"expired annotation set", base(), change(base(), func(l *coordv1alpha1.FencedLease) {
			l.Annotations = map[string]string{coordv1alpha1.ExpiredAnnotation: "a/1"}
		}), alice, "", nil, "annotation " + coordv1alpha1.ExpiredAnnotation + " is written only by the kubefence controller"},
		{"expired annotation removed", change(base(), func(l *coordv1alpha1.FencedLease) {
			l.Annotations = map[string]string{coordv1alpha1.ExpiredAnnotation: "a/1"}
		}), base(), alice, "", nil, "is written only by the kubefence controller"},
		{"the controller", base(rq("a", "alice", 3)), change(base(), func(l *coordv1alpha1.FencedLease) {
			l.Finalizers = nil
			l.Annotations = map[string]string{coordv1alpha1.ExpiredAnnotation: "a/3"}
		}), asUser(ruleController), "", nil, ""},
		// Settings.
		{"settings from a client", base(), change(base(), func(l *coordv1alpha1.FencedLease) { l.Spec.LeaseDurationSeconds = 1 }), alice, "", nil,
			`only the kubefence controller and members of [system:masters] may change leaseDurationSeconds`},
		{"settings from system:masters", base(), change(base(), func(l *coordv1alpha1.FencedLease) { l.Spec.LockDelaySeconds = 30 }), asUser("root", "system:masters"), "", nil, ""},
		{"minFencingToken from a configured admin group", base(), change(base(), func(l *coordv1alpha1.FencedLease) { l.Spec.MinFencingToken = 1000 }),
			asUser("ops", "lease-admins"), "", []string{"lease-admins"}, ""},
		{"system:masters is not an admin once groups are configured", base(), change(base(), func(l *coordv1alpha1.FencedLease) { l.Spec.LeaseDurationSeconds = 60 }),
			asUser("root", "system:masters"), "", []string{"lease-admins"}, "members of [lease-admins]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := &FencedLeaseValidator{ControllerUsers: []string{ruleController}, AdminGroups: tc.admins}
			_, err := v.ValidateUpdate(ruleContext(tc.user, admissionv1.Update, tc.sub), tc.old, tc.cur)
			wantRefusal(t, err, tc.want)
		})
	}
}

// A lease the fencing webhook cannot fully protect (the assembly passes
// fencing.ShortLeaseWarning: shorter than 10 x (skew + commit lag)) is
// warned about when it is created with that duration or changed to it, and
// not on its renewals.
func TestShortLeaseIsWarnedAbout(t *testing.T) {
	v := &FencedLeaseValidator{ControllerUsers: []string{ruleController}, DurationWarning: func(l time.Duration) string {
		if l < 11*time.Second {
			return "short " + l.String()
		}
		return ""
	}}
	withDuration := func(seconds int32, reqs ...coordv1alpha1.LeaseRequest) *coordv1alpha1.FencedLease {
		l := ruleLease("", reqs...)
		l.Spec.LeaseDurationSeconds = seconds
		return l
	}
	admin := asUser("root", "system:masters")
	for _, tc := range []struct {
		name     string
		old, cur *coordv1alpha1.FencedLease // old nil: a create
		user     authenticationv1.UserInfo
		want     []string
	}{
		{"create 2 s", nil, withDuration(2, rq("a", "alice", 0)), asUser("alice"), []string{"short 2s"}},
		{"create 15 s", nil, withDuration(15, rq("a", "alice", 0)), asUser("alice"), nil},
		{"create 2 s, refused", nil, withDuration(2, rq("a", "bob", 0)), asUser("alice"), nil},
		{"renew a 2 s lease", withDuration(2, rq("a", "alice", 0)), withDuration(2, rq("a", "alice", 1)), asUser("alice"), nil},
		{"an admin shortens a lease to 2 s", withDuration(15), withDuration(2), admin, []string{"short 2s"}},
		{"an admin lengthens a lease to 15 s", withDuration(2), withDuration(15), admin, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got admission.Warnings
			if tc.old == nil {
				got, _ = v.ValidateCreate(ruleContext(tc.user, admissionv1.Create, ""), tc.cur)
			} else {
				var err error
				got, err = v.ValidateUpdate(ruleContext(tc.user, admissionv1.Update, ""), tc.old, tc.cur)
				wantRefusal(t, err, "")
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Fatalf("warnings %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSettingsChanged(t *testing.T) {
	l := ruleLease("")
	for _, tc := range []struct {
		name   string
		change func(*coordv1alpha1.FencedLease)
		want   bool
	}{
		{"nothing", func(*coordv1alpha1.FencedLease) {}, false},
		{"requests only", func(l *coordv1alpha1.FencedLease) {
			l.Spec.Requests = []coordv1alpha1.LeaseRequest{rq("a", "alice", 0)}
		}, false},
		{"leaseDurationSeconds", func(l *coordv1alpha1.FencedLease) { l.Spec.LeaseDurationSeconds++ }, true},
		{"lockDelaySeconds", func(l *coordv1alpha1.FencedLease) { l.Spec.LockDelaySeconds = 1 }, true},
		{"minFencingToken", func(l *coordv1alpha1.FencedLease) { l.Spec.MinFencingToken = 1 }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cur := l.DeepCopy()
			tc.change(cur)
			if got := settingsChanged(l, cur); got != tc.want {
				t.Fatalf("settingsChanged = %v, want %v", got, tc.want)
			}
		})
	}
}

// renewTime is a lower bound of the renewal's commit for the fencing webhook:
// never later than the validator's clock plus its skew, never moving back,
// never removed.
func TestRenewTimeRules(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.MicroTime { m := metav1.NewMicroTime(now.Add(d)); return &m }
	stamped := func(seq int64, rt *metav1.MicroTime) *coordv1alpha1.FencedLease {
		r := rq("a", "alice", seq)
		r.RenewTime = rt
		return ruleLease("", r)
	}
	for _, tc := range []struct {
		name     string
		old, cur *coordv1alpha1.FencedLease
		want     string
	}{
		{"first stamp, now", stamped(1, nil), stamped(2, at(0)), ""},
		{"stamp within the skew", stamped(1, at(-time.Second)), stamped(2, at(90*time.Millisecond)), ""},
		{"stamp in the future", stamped(1, at(-time.Second)), stamped(2, at(200*time.Millisecond)), "is later than the webhook's clock"},
		{"stamp moves back", stamped(1, at(-time.Second)), stamped(2, at(-2*time.Second)), "it may only move forward"},
		{"stamp removed", stamped(1, at(-time.Second)), stamped(2, nil), "cannot be removed once set"},
		{"unstamped renewal (an older client)", stamped(1, nil), stamped(2, nil), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := &FencedLeaseValidator{ControllerUsers: []string{ruleController}, Clock: clocktesting.NewFakePassiveClock(now), StampSkew: 100 * time.Millisecond}
			_, err := v.ValidateUpdate(ruleContext(asUser("alice"), admissionv1.Update, ""), tc.old, tc.cur)
			wantRefusal(t, err, tc.want)
		})
	}
}
