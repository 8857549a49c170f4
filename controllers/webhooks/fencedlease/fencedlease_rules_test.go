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
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// The FencedLease rules (I6) live in one table, test/ruletable.LeaseRows,
// run against this validator and the policy's CEL by TestLeaseRuleTable
// (ruletable_test.go) and on a real API server by test/enforcement. What
// only the Go back end has is tested here: the short-lease warning (webhook
// mode). test/operator/admission_test.go keeps the cases about patch types,
// server-side apply and RBAC.

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
