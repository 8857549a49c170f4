package fencedlease

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// fuzzController is the controller's username in FuzzValidateUpdate.
const fuzzController = "system:serviceaccount:kubefence-system:kubefence-controller"

// parseRequests reads a queue written as "identity:user:renewSequence,...",
// the fuzzer's compact form of spec.requests (a missing or malformed
// renewSequence is 0).
func parseRequests(s string) []coordv1alpha1.LeaseRequest {
	if s == "" {
		return nil
	}
	var reqs []coordv1alpha1.LeaseRequest
	for _, item := range strings.Split(s, ",") {
		parts := strings.SplitN(item, ":", 3)
		r := coordv1alpha1.LeaseRequest{HolderIdentity: parts[0]}
		if len(parts) > 1 {
			r.User = parts[1]
		}
		if len(parts) > 2 {
			r.RenewSequence, _ = strconv.ParseInt(parts[2], 10, 64)
		}
		reqs = append(reqs, r)
	}
	return reqs
}

// schemaValid tells whether the API server's schema validation, which runs
// before validating admission, would let this queue (and this transition)
// through: unique non-empty identities (listType=map), non-empty users, a user
// that never changes for an identity, and renewSequences that never go down.
func schemaValid(old, cur []coordv1alpha1.LeaseRequest) bool {
	for _, reqs := range [][]coordv1alpha1.LeaseRequest{old, cur} {
		seen := map[string]bool{}
		for _, r := range reqs {
			if r.HolderIdentity == "" || r.User == "" || r.RenewSequence < 0 || seen[r.HolderIdentity] {
				return false
			}
			seen[r.HolderIdentity] = true
		}
	}
	for _, o := range old {
		for _, n := range cur {
			if o.HolderIdentity == n.HolderIdentity && (o.User != n.User || n.RenewSequence < o.RenewSequence) {
				return false
			}
		}
	}
	return true
}

// owns is the rule, stated independently of the validator: a request belongs
// to the user that made it and, under identityBinding Pod, to the pod named by
// its holderIdentity.
func owns(binding coordv1alpha1.IdentityBinding, r coordv1alpha1.LeaseRequest, user authenticationv1.UserInfo) bool {
	if r.User != user.Username {
		return false
	}
	if binding == coordv1alpha1.IdentityBindingPod {
		pods := user.Extra[coordv1alpha1.PodNameExtraKey]
		return len(pods) == 1 && pods[0] == r.HolderIdentity
	}
	return true
}

// refusalTopics are the words at least one of which every refusal must name,
// so that the client learns what exactly it may not do.
var refusalTopics = []string{"spec.requests", "holderIdentity", "status", "subresource", "finalizer", "annotation"}

// FuzzValidateUpdate: for any pair of queues, requester and metadata change,
// ValidateUpdate does not panic; every refusal is a 403 naming what was
// refused; and a client (not the controller) is never allowed to remove or
// change another user's request, to reorder the queue, to insert ahead of
// queued requests, to add a request for someone else, to drop the epoch
// finalizer, or to touch the expired annotation.
func FuzzValidateUpdate(f *testing.F) {
	for _, s := range []struct {
		old, cur, user, pod string
		binding, meta       uint8
		sub                 string
	}{
		{"", "a:alice:0", "alice", "", 0, 0, ""},                                                   // join
		{"a:alice:0", "a:alice:1", "alice", "", 0, 0, ""},                                          // renew
		{"a:alice:3,b:bob:0", "a:alice:4,b:bob:0", "bob", "", 0, 0, ""},                            // forged renewal
		{"a:alice:3,b:bob:0", "b:bob:0", "bob", "", 0, 0, ""},                                      // stolen grant
		{"a:alice:3,b:bob:0", "a:alice:3", "bob", "", 0, 0, ""},                                    // withdraw own
		{"a:alice:3,b:bob:0", "b:bob:0,a:alice:3", "bob", "", 0, 0, ""},                            // queue jump
		{"a:alice:3,b:bob:0", "a:alice:3,c:carol:0,b:bob:0", "carol", "", 0, 0, ""},                // insert ahead
		{"a:alice:3", "a:alice:3,c:alice:0", "bob", "", 0, 0, ""},                                  // request for someone else
		{"worker-1:sa:1,worker-2:sa:0", "worker-1:sa:2,worker-2:sa:0", "sa", "worker-2", 2, 0, ""}, // sibling pod
		{"sa:sa:0", "sa:sa:1", "sa", "", 1, 0, ""},                                                 // ServiceAccount binding
		{"a:alice:0", "a:alice:0", "alice", "", 0, 1, ""},                                          // finalizer removed
		{"a:alice:0", "a:alice:0", "alice", "", 0, 2, ""},                                          // expired annotation set
		{"a:alice:0", "a:alice:9", "alice", "", 0, 0, "status"},                                    // status write
		{"a:alice:0", "", fuzzController, "", 0, 3, ""},                                            // the controller
		{"b:bob:0", "b:bob:0,a:mallory:0", "mallory", "", 0, 4, ""},                                // the released holder's identity queued again
	} {
		f.Add(s.old, s.cur, s.user, s.pod, s.binding, s.meta, s.sub)
	}
	v := &FencedLeaseValidator{ControllerUsers: []string{fuzzController}}
	f.Fuzz(func(t *testing.T, oldQueue, newQueue, username, pod string, binding, meta uint8, sub string) {
		bindings := []coordv1alpha1.IdentityBinding{"", coordv1alpha1.IdentityBindingServiceAccount, coordv1alpha1.IdentityBindingPod, coordv1alpha1.IdentityBindingNone}
		b := bindings[int(binding)%len(bindings)]
		oldLease := &coordv1alpha1.FencedLease{
			ObjectMeta: metav1.ObjectMeta{Namespace: "jobs", Name: "job", Finalizers: []string{coordv1alpha1.EpochFinalizer}},
			Spec:       coordv1alpha1.FencedLeaseSpec{IdentityBinding: b, Requests: parseRequests(oldQueue)},
		}
		lease := oldLease.DeepCopy()
		lease.Spec.Requests = parseRequests(newQueue)
		if meta&1 != 0 {
			lease.Finalizers = nil
		}
		if meta&2 != 0 {
			lease.Annotations = map[string]string{coordv1alpha1.ExpiredAnnotation: "a/1"}
		}
		// meta&4: status names as holder the identity of the last request
		// of the new queue (the controller's status, unchanged by the write).
		holder := ""
		if n := len(lease.Spec.Requests); meta&4 != 0 && n > 0 {
			holder = lease.Spec.Requests[n-1].HolderIdentity
			oldLease.Status.HolderIdentity, oldLease.Status.FencingToken = holder, 1
			lease.Status = oldLease.Status
		}
		user := authenticationv1.UserInfo{Username: username}
		if pod != "" {
			user.Extra = map[string]authenticationv1.ExtraValue{coordv1alpha1.PodNameExtraKey: {pod}}
		}
		ctx := admission.NewContextWithRequest(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			Operation: admissionv1.Update, SubResource: sub, UserInfo: user,
		}})

		_, err := v.ValidateUpdate(ctx, oldLease, lease)

		if err != nil {
			var st apierrors.APIStatus
			if !errors.As(err, &st) || st.Status().Code != http.StatusForbidden || st.Status().Reason != metav1.StatusReasonForbidden {
				t.Fatalf("refusal is not a 403 Forbidden status: %v", err)
			}
			_, why, _ := strings.Cut(st.Status().Message, "is forbidden: ")
			if strings.TrimSpace(why) == "" || !slices.ContainsFunc(refusalTopics, func(w string) bool { return strings.Contains(why, w) }) {
				t.Fatalf("refusal does not say what was refused: %q", st.Status().Message)
			}
		}
		if username == fuzzController || !schemaValid(oldLease.Spec.Requests, lease.Spec.Requests) {
			return
		}
		refused := func(format string, args ...any) {
			t.Helper()
			if err == nil {
				t.Fatalf("allowed for %q (binding %q, pod %q): "+format, append([]any{username, b, pod}, args...)...)
			}
		}
		if sub != "" {
			refused("a client wrote subresource %q", sub)
		}
		if meta&1 != 0 {
			refused("a client removed the epoch finalizer")
		}
		if meta&2 != 0 {
			refused("a client set the expired annotation")
		}
		newByID := map[string]coordv1alpha1.LeaseRequest{}
		for _, r := range lease.Spec.Requests {
			newByID[r.HolderIdentity] = r
		}
		oldIDs := map[string]bool{}
		var keptInOldOrder []string
		for _, o := range oldLease.Spec.Requests {
			oldIDs[o.HolderIdentity] = true
			n, kept := newByID[o.HolderIdentity]
			if kept {
				keptInOldOrder = append(keptInOldOrder, o.HolderIdentity)
			}
			if !owns(b, o, user) && (!kept || n != o) {
				refused("another user's request %+v became %+v (kept %v)", o, n, kept)
			}
		}
		var keptInNewOrder []string
		added := false
		for _, n := range lease.Spec.Requests {
			if !oldIDs[n.HolderIdentity] {
				added = true
				if n.User != username {
					refused("a request for user %q was added", n.User)
				}
				if b == coordv1alpha1.IdentityBindingServiceAccount && n.HolderIdentity != username {
					refused("a request for holderIdentity %q was added under ServiceAccount binding", n.HolderIdentity)
				}
				if b == coordv1alpha1.IdentityBindingPod && (pod == "" || n.HolderIdentity != pod) {
					refused("a request for holderIdentity %q was added from pod %q under Pod binding", n.HolderIdentity, pod)
				}
				continue
			}
			if added {
				refused("queued request %q now stands behind a new request", n.HolderIdentity)
			}
			keptInNewOrder = append(keptInNewOrder, n.HolderIdentity)
		}
		if !slices.Equal(keptInOldOrder, keptInNewOrder) {
			refused("the queue was reordered from %v to %v", keptInOldOrder, keptInNewOrder)
		}
		if holder != "" && !oldIDs[holder] {
			refused("a request was added under %q, which status still names as the holder, after its request was withdrawn", holder)
		}
	})
}
