package main

import (
	"fmt"
	"strings"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// The operator actions change spec.requests with one JSON patch each. Test
// operations make the patch apply only to the lease as it was read: the
// holder is still the holder (status.holderIdentity: the patch applies to the
// whole stored object, status included, before status changes are discarded),
// and each request touched is still at the index it was read at, made by the
// same user. renewSequence is deliberately not tested, so a holder renewing
// concurrently does not make the action fail.

// patchOp is one RFC 6902 operation.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	From  string `json:"from,omitempty"`
	Value any    `json:"value,omitempty"`
}

func requestPath(i int) string { return fmt.Sprintf("/spec/requests/%d", i) }

// testRequest pins request i to its identity and user.
func testRequest(lease *coordv1alpha1.FencedLease, i int) []patchOp {
	r := lease.Spec.Requests[i]
	return []patchOp{
		{Op: "test", Path: requestPath(i) + "/holderIdentity", Value: r.HolderIdentity},
		{Op: "test", Path: requestPath(i) + "/user", Value: r.User},
	}
}

// testHolder pins the current holder.
func testHolder(lease *coordv1alpha1.FencedLease) patchOp {
	return patchOp{Op: "test", Path: "/status/holderIdentity", Value: lease.Status.HolderIdentity}
}

// queueNames lists the requests for error messages: "[a, b]".
func queueNames(lease *coordv1alpha1.FencedLease) string {
	names := make([]string, len(lease.Spec.Requests))
	for i, r := range lease.Spec.Requests {
		names[i] = r.HolderIdentity
	}
	return "[" + strings.Join(names, ", ") + "]"
}

// releasePatch removes identity's request: the holder's (the controller then
// ends the tenure as Released and grants the next request, without lock-delay)
// or a waiting one (withdrawn from the queue).
func releasePatch(lease *coordv1alpha1.FencedLease, identity string) ([]patchOp, error) {
	i := coordv1alpha1.RequestIndex(lease.Spec.Requests, identity)
	if i < 0 {
		if identity == lease.Status.HolderIdentity {
			return nil, fmt.Errorf("the request of holder %q is already gone: the release is pending and the controller has not processed it yet", identity)
		}
		return nil, fmt.Errorf("%q has no request on fencedlease %s/%s (requests: %s)", identity, lease.Namespace, lease.Name, queueNames(lease))
	}
	ops := testRequest(lease, i)
	if identity == lease.Status.HolderIdentity {
		ops = append(ops, testHolder(lease))
		ops = append(ops, revokeOps(lease)...)
	}
	return append(ops, patchOp{Op: "remove", Path: requestPath(i)}), nil
}

// revokeOps mark the holder's tenure as revoked by an operator (annotation
// coordination.kubefence.io/revoked=<holder>/<token>), which the webhook
// requires in the write that removes the holder's request: the controller then
// waits for the revoked holder's admitted writes to commit before the next
// grant. The JSON pointer escapes "/" as "~1".
func revokeOps(lease *coordv1alpha1.FencedLease) []patchOp {
	mark := coordv1alpha1.ExpiredMark(lease.Status.HolderIdentity, lease.Status.FencingToken)
	if lease.Annotations == nil {
		return []patchOp{{Op: "add", Path: "/metadata/annotations", Value: map[string]string{coordv1alpha1.RevokedAnnotation: mark}}}
	}
	return []patchOp{{Op: "add", Path: "/metadata/annotations/" + strings.ReplaceAll(coordv1alpha1.RevokedAnnotation, "/", "~1"), Value: mark}}
}

// handoverPatch moves to's request to the front of the queue and removes the
// holder's, so that the controller ends the tenure as Released and grants to
// next.
func handoverPatch(lease *coordv1alpha1.FencedLease, to string) ([]patchOp, error) {
	h := lease.Status.HolderIdentity
	if h == "" {
		return nil, fmt.Errorf("fencedlease %s/%s has no holder to hand over from (status %s); the first request is granted next", lease.Namespace, lease.Name, heldReason(lease))
	}
	if to == h {
		return nil, fmt.Errorf("%q already holds fencedlease %s/%s", to, lease.Namespace, lease.Name)
	}
	hi := coordv1alpha1.RequestIndex(lease.Spec.Requests, h)
	if hi < 0 {
		return nil, fmt.Errorf("the request of holder %q is already gone: the release is pending and the controller has not processed it yet", h)
	}
	ti := coordv1alpha1.RequestIndex(lease.Spec.Requests, to)
	if ti < 0 {
		return nil, fmt.Errorf("%q is not waiting for fencedlease %s/%s: the lease can only be handed to a client that has requested it (requests: %s)",
			to, lease.Namespace, lease.Name, queueNames(lease))
	}
	ops := append([]patchOp{testHolder(lease)}, testRequest(lease, hi)...)
	ops = append(ops, testRequest(lease, ti)...)
	ops = append(ops, revokeOps(lease)...)
	if ti != 0 {
		ops = append(ops, patchOp{Op: "move", From: requestPath(ti), Path: requestPath(0)})
		// Moving to's request to the front shifts the ones it passed by one.
		if hi < ti {
			hi++
		}
	}
	return append(ops, patchOp{Op: "remove", Path: requestPath(hi)}), nil
}
