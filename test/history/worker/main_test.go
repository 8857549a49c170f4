package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kubefence/kubefence/pkg/fence"
	"github.com/kubefence/kubefence/test/history/checker"
)

func status(code int32, reason metav1.StatusReason, msg string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: reason, Message: msg}}
}

// Only answers that certainly precede the write may be definite outcomes.
func TestClassify(t *testing.T) {
	gr := schema.GroupResource{Group: "example.kubefence.io", Resource: "widgets"}
	for _, tc := range []struct {
		name string
		err  error
		want checker.Outcome
	}{
		{"stale token", &fence.StaleError{Lease: "ns/job", Err: status(409, metav1.StatusReasonConflict,
			`admission webhook "guarded.fencing.kubefence.io" denied the request: stale fencing token 3 for lease ns/job: current token is 4`)}, checker.Stale},
		{"not the holder", status(403, metav1.StatusReasonForbidden,
			`admission webhook "guarded.fencing.kubefence.io" denied the request: w1 is not the holder of lease ns/job`), checker.Stale},
		{"resourceVersion moved", apierrors.NewConflict(gr, "w", errors.New("the object has been modified")), checker.Conflict},
		{"created meanwhile", apierrors.NewAlreadyExists(gr, "w"), checker.Conflict},
		{"webhook down", status(500, metav1.StatusReasonInternalError,
			`Internal error occurred: failed calling webhook "guarded.fencing.kubefence.io": connection refused`), checker.Error},
		{"other admission refusal", status(409, metav1.StatusReasonConflict,
			`admission webhook "guarded.fencing.kubefence.io" denied the request: fencing token 9 for lease ns/job was never issued`), checker.Error},
		{"lease gone", status(404, metav1.StatusReasonNotFound,
			`admission webhook "guarded.fencing.kubefence.io" denied the request: lease ns/job does not exist`), checker.Error},
		{"server error", status(500, metav1.StatusReasonInternalError, "etcdserver: request timed out"), checker.Timeout},
		{"server timeout", apierrors.NewTimeoutError("request did not complete within 60s", 0), checker.Timeout},
		{"request timeout", status(http.StatusRequestTimeout, metav1.StatusReasonTimeout, "timeout"), checker.Timeout},
		{"no answer", fmt.Errorf("Put https://127.0.0.1/x: %w", context.DeadlineExceeded), checker.Timeout},
		{"connection reset", errors.New("read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer"), checker.Timeout},
	} {
		if got, _ := classify(tc.err); got != tc.want {
			t.Errorf("%s: classify(%v) = %s, want %s", tc.name, tc.err, got, tc.want)
		}
	}
}
