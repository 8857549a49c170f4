// Package protocol is the client side of the FencedLease request protocol
// (docs/protocol.md), in one place: who am I, the JSON patches a client
// sends to queue-side state, and which request of its identity is its own
// (OwnRequest). Every writer of the protocol uses it: the
// Elector in pkg/fence, the client-go lock in pkg/fence/resourcelock (and so
// the manager integration in pkg/fence/manager), and kubectl fence's operator
// actions. Request lookup by identity is part of the wire contract itself
// (api/v1alpha1.RequestIndex), which the controller uses too.
//
// Every patch is an RFC 6902 JSON patch whose test operations make it apply
// only to the lease as it was read, so a patch built from an old read fails
// (422 Invalid) rather than change a request that moved, changed or was
// removed. The FencedLease webhook then judges who may make the change (I6).
//
// Most programs need none of this: pkg/fence's Elector speaks the protocol.
// It is for clients that write FencedLeases themselves. It imports only the
// API (api/v1alpha1), apimachinery and controller-runtime's client, and must
// not import pkg/fence or any operator package.
package protocol

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

var identityPattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9._:-]*[a-z0-9])?$`)

// ValidateIdentity checks a holderIdentity against the CRD's rule.
func ValidateIdentity(id string) error {
	if len(id) == 0 || len(id) > 128 || !identityPattern.MatchString(id) {
		return fmt.Errorf("Identity %q is invalid: expected 1 to 128 lowercase letters, digits, '-', '.', '_' or ':', starting and ending with a letter or digit", id)
	}
	return nil
}

// ValidateClientConfig checks what every client of the protocol is configured
// with: an API client, the FencedLease's namespace and name, and its holder
// identity. It returns one error for each that is missing or invalid.
func ValidateClientConfig(cl client.Client, namespace, name, identity string) []error {
	var errs []error
	if cl == nil {
		errs = append(errs, errors.New("Client is required"))
	}
	if namespace == "" || name == "" {
		errs = append(errs, fmt.Errorf("Namespace and Name of the FencedLease are required (got %q/%q)", namespace, name))
	}
	if err := ValidateIdentity(identity); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// WhoAmI asks the API server for this client's username (SelfSubjectReview):
// the user a request records, so that nobody else can renew or withdraw it.
func WhoAmI(ctx context.Context, cl client.Client) (string, error) {
	review := &authenticationv1.SelfSubjectReview{}
	if err := cl.Create(ctx, review); err != nil {
		return "", fmt.Errorf("asking the API server who this client is: %w", err)
	}
	if review.Status.UserInfo.Username == "" {
		return "", errors.New("the API server returned an empty username")
	}
	return review.Status.UserInfo.Username, nil
}

// Op is one RFC 6902 operation.
type Op struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	From  string `json:"from,omitempty"`
	Value any    `json:"value,omitempty"`
}

// Patch is an RFC 6902 JSON patch; it is a controller-runtime client.Patch.
type Patch []Op

// Type is types.JSONPatchType.
func (Patch) Type() types.PatchType { return types.JSONPatchType }

// Data is the patch as JSON; it does not depend on obj.
func (p Patch) Data(client.Object) ([]byte, error) { return json.Marshal(p) }

func requestPath(i int) string { return fmt.Sprintf("/spec/requests/%d", i) }

// RenewPatch raises the renewSequence of identity's request and sets its
// renewTime to sent (when the renewal is sent, on this client's wall clock):
// one JSON patch that first tests the request is exactly as in lease, so it
// fails rather than renew a request that moved, changed or was removed.
// renewTime never moves back: a clock stepped backwards keeps the last one.
func RenewPatch(lease *coordv1alpha1.FencedLease, identity string, sent time.Time) (Patch, error) {
	idx := coordv1alpha1.RequestIndex(lease.Spec.Requests, identity)
	if idx < 0 {
		return nil, fmt.Errorf("%s has no request of %q to renew", client.ObjectKeyFromObject(lease), identity)
	}
	old := lease.Spec.Requests[idx]
	renewed := old
	renewed.RenewSequence++
	stamp := metav1.NewMicroTime(sent.Round(0).Truncate(time.Microsecond))
	if old.RenewTime != nil && stamp.Before(old.RenewTime) {
		stamp = *old.RenewTime
	}
	renewed.RenewTime = &stamp
	return Patch{
		{Op: "test", Path: requestPath(idx), Value: old},
		{Op: "replace", Path: requestPath(idx), Value: renewed},
	}, nil
}

// WithdrawPatch removes identity's own request (a release, when it holds the
// lease), testing first that the request is exactly as in lease. It returns
// nil when there is no such request.
func WithdrawPatch(lease *coordv1alpha1.FencedLease, identity string) Patch {
	idx := coordv1alpha1.RequestIndex(lease.Spec.Requests, identity)
	if idx < 0 {
		return nil
	}
	return Patch{
		{Op: "test", Path: requestPath(idx), Value: lease.Spec.Requests[idx]},
		{Op: "remove", Path: requestPath(idx)},
	}
}

// The operator actions (kubectl fence release and handover) change others'
// requests, so only a lease admin may send them. Their test operations pin
// the holder (status.holderIdentity: a JSON patch applies to the whole stored
// object, status included, before status changes are discarded) and each
// request touched to the index it was read at, made by the same user.
// renewSequence is deliberately not tested, so a holder renewing
// concurrently does not make the action fail.

// testRequest pins request i to its identity and user.
func testRequest(lease *coordv1alpha1.FencedLease, i int) Patch {
	r := lease.Spec.Requests[i]
	return Patch{
		{Op: "test", Path: requestPath(i) + "/holderIdentity", Value: r.HolderIdentity},
		{Op: "test", Path: requestPath(i) + "/user", Value: r.User},
	}
}

// testHolder pins the current holder.
func testHolder(lease *coordv1alpha1.FencedLease) Op {
	return Op{Op: "test", Path: "/status/holderIdentity", Value: lease.Status.HolderIdentity}
}

// queueNames lists the requests for messages: "[a, b]".
func queueNames(lease *coordv1alpha1.FencedLease) string {
	names := make([]string, len(lease.Spec.Requests))
	for i, r := range lease.Spec.Requests {
		names[i] = r.HolderIdentity
	}
	return "[" + strings.Join(names, ", ") + "]"
}

// ReleasePatch is an operator's release of identity's request: the holder's
// (the write revokes its tenure; the controller ends it as Released and
// grants the next request after the commit lag) or a waiting one (withdrawn
// from the queue).
func ReleasePatch(lease *coordv1alpha1.FencedLease, identity string) (Patch, error) {
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
	return append(ops, Op{Op: "remove", Path: requestPath(i)}), nil
}

// revokeOps mark the holder's tenure as revoked by an operator (annotation
// coordination.kubefence.io/revoked=<holder>/<token>), which the webhook
// requires in the write that removes the holder's request: the controller then
// waits for the revoked holder's admitted writes to commit before the next
// grant. The JSON pointer escapes "/" as "~1".
func revokeOps(lease *coordv1alpha1.FencedLease) Patch {
	mark := coordv1alpha1.ExpiredMark(lease.Status.HolderIdentity, lease.Status.FencingToken)
	if lease.Annotations == nil {
		return Patch{{Op: "add", Path: "/metadata/annotations", Value: map[string]string{coordv1alpha1.RevokedAnnotation: mark}}}
	}
	return Patch{{Op: "add", Path: "/metadata/annotations/" + strings.ReplaceAll(coordv1alpha1.RevokedAnnotation, "/", "~1"), Value: mark}}
}

// HandoverPatch is an operator's hand-over to to: it moves to's request to
// the front of the queue and removes the holder's, revoking its tenure, so
// that the controller ends the tenure as Released and grants to to.
func HandoverPatch(lease *coordv1alpha1.FencedLease, to string) (Patch, error) {
	h := lease.Status.HolderIdentity
	if h == "" {
		reason := "-"
		if c := meta.FindStatusCondition(lease.Status.Conditions, coordv1alpha1.ConditionHeld); c != nil && c.Reason != "" {
			reason = c.Reason
		}
		return nil, fmt.Errorf("fencedlease %s/%s has no holder to hand over from (status %s); the first request is granted next", lease.Namespace, lease.Name, reason)
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
	ops := append(Patch{testHolder(lease)}, testRequest(lease, hi)...)
	ops = append(ops, testRequest(lease, ti)...)
	ops = append(ops, revokeOps(lease)...)
	if ti != 0 {
		ops = append(ops, Op{Op: "move", From: requestPath(ti), Path: requestPath(0)})
		// Moving to's request to the front shifts the ones it passed by one.
		if hi < ti {
			hi++
		}
	}
	return append(ops, Op{Op: "remove", Path: requestPath(hi)}), nil
}
