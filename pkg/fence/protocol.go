package fence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// The client side of the request protocol (docs/design.md), in one place:
// who am I, where is my request, and the two JSON patches a client sends.

var identityPattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9._:-]*[a-z0-9])?$`)

// ValidateIdentity checks a holderIdentity against the CRD's rule.
func ValidateIdentity(id string) error {
	if len(id) == 0 || len(id) > 128 || !identityPattern.MatchString(id) {
		return fmt.Errorf("Identity %q is invalid: expected 1 to 128 lowercase letters, digits, '-', '.', '_' or ':', starting and ending with a letter or digit", id)
	}
	return nil
}

// WhoAmI asks the API server for this client's username (SelfSubjectReview).
func WhoAmI(ctx context.Context, cl client.Client) (string, error) {
	review := &authenticationv1.SelfSubjectReview{}
	if err := cl.Create(ctx, review); err != nil {
		return "", fmt.Errorf("asking the API server who this client is (set Config.User to skip): %w", err)
	}
	if review.Status.UserInfo.Username == "" {
		return "", errors.New("the API server returned an empty username; set Config.User")
	}
	return review.Status.UserInfo.Username, nil
}

// RequestIndex is the position of identity's request in the queue, or -1.
func RequestIndex(lease *coordv1alpha1.FencedLease, identity string) int {
	return coordv1alpha1.RequestIndex(lease.Spec.Requests, identity)
}

// RenewPatch raises the renewSequence of identity's request and sets its
// renewTime to sent (when the renewal is sent, on this client's wall clock):
// one JSON patch that first tests the request is exactly as in lease, so it
// fails rather than renew a request that moved, changed or was removed.
// renewTime never moves back: a clock stepped backwards keeps the last one.
func RenewPatch(lease *coordv1alpha1.FencedLease, identity string, sent time.Time) (client.Patch, error) {
	idx := RequestIndex(lease, identity)
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
	return jsonPatch([]map[string]any{
		{"op": "test", "path": fmt.Sprintf("/spec/requests/%d", idx), "value": old},
		{"op": "replace", "path": fmt.Sprintf("/spec/requests/%d", idx), "value": renewed},
	})
}

// WithdrawPatch removes identity's request (a release, when it holds the
// lease), testing first that the request is exactly as in lease. It returns
// nil when there is no such request.
func WithdrawPatch(lease *coordv1alpha1.FencedLease, identity string) (client.Patch, error) {
	idx := RequestIndex(lease, identity)
	if idx < 0 {
		return nil, nil
	}
	return jsonPatch([]map[string]any{
		{"op": "test", "path": fmt.Sprintf("/spec/requests/%d", idx), "value": lease.Spec.Requests[idx]},
		{"op": "remove", "path": fmt.Sprintf("/spec/requests/%d", idx)},
	})
}

func jsonPatch(ops []map[string]any) (client.Patch, error) {
	b, err := json.Marshal(ops)
	if err != nil {
		return nil, err
	}
	return client.RawPatch(types.JSONPatchType, b), nil
}
