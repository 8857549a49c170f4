package fence

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

var leaseResource = coordv1alpha1.GroupVersion.WithResource("fencedleases").GroupResource()

// Reasons a read of the FencedLease or a write of this client's request
// failed: the reason label of kubefence_client_lease_errors_total, and the
// reason in the log line and in Elector.Ready.
const (
	// ReasonNotFound: the FencedLease does not exist (or its CRD is not
	// installed).
	ReasonNotFound = "not-found"
	// ReasonForbidden: RBAC does not let this client get, watch, update,
	// patch (or, with CreateIfMissing, create) the FencedLease.
	ReasonForbidden = "forbidden"
	// ReasonUnreachable: no answer, or the API server could not call an
	// admission webhook (connection refused, timeout, no endpoints).
	ReasonUnreachable = "unreachable"
	// ReasonRefused: admission (a webhook or an admission policy) refused the
	// write.
	ReasonRefused = "refused"
	// ReasonOther: any other failure.
	ReasonOther = "other"
)

// LeaseErrorReasons are the values of ErrorReason, in a fixed order.
var LeaseErrorReasons = []string{ReasonNotFound, ReasonForbidden, ReasonUnreachable, ReasonRefused, ReasonOther}

// ErrorReason sorts the error of a read of the FencedLease, or of a write of
// this client's request, into one of LeaseErrorReasons; "" for nil, for an
// optimistic-concurrency conflict (the ordinary race between candidates) and
// for a cancelled context (the caller stopped).
func ErrorReason(err error) string {
	switch {
	case err == nil, apierrors.IsConflict(err), errors.Is(err, context.Canceled):
		return ""
	case apierrors.IsNotFound(err), meta.IsNoMatchError(err):
		return ReasonNotFound
	}
	msg := err.Error()
	switch {
	// Admission answers before RBAC's 403 is looked at: a webhook's denial
	// is often a 403 too.
	case strings.Contains(msg, "failed calling webhook"):
		return ReasonUnreachable
	case strings.Contains(msg, "denied the request"), strings.Contains(msg, "denied request"):
		return ReasonRefused
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return ReasonForbidden
	case apierrors.IsServiceUnavailable(err), apierrors.IsTimeout(err), apierrors.IsServerTimeout(err),
		apierrors.IsTooManyRequests(err), errors.Is(err, context.DeadlineExceeded):
		return ReasonUnreachable
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		// No answer from the API server: a transport error.
		return ReasonUnreachable
	}
	return ReasonOther
}

// problemLogEvery is how often a failure of one reason is logged again (with
// the number of failures since the last line). A new reason is logged at once.
const problemLogEvery = 30 * time.Second

// problems reports the failures of an Elector's lease reads and request
// writes: a log line the first time, on every change of reason and then at
// most every problemLogEvery; kubefence_client_lease_errors_total; and the
// state Elector.Ready reads. Safe for concurrent use (the lease view's
// goroutine and Run's).
type problems struct {
	key             types.NamespacedName
	clock           clock.Clock
	metrics         *Metrics
	createIfMissing bool

	mu         sync.Mutex
	log        logr.Logger
	seen       bool   // the lease was read once
	gone       bool   // the last read found no lease
	unqueued   error  // the last attempt to queue failed with it; nil once one succeeded
	reason     string // the latest failure's reason; "" once an operation succeeded
	err        error  // the latest failure
	logged     string // the reason of the last line logged
	loggedAt   time.Time
	suppressed int // failures since the last line logged
}

func newProblems(key types.NamespacedName, clk clock.Clock, m *Metrics, createIfMissing bool) *problems {
	return &problems{key: key, clock: clk, metrics: m, createIfMissing: createIfMissing, log: logr.Discard()}
}

// setLogger sets the logger of the lines (Run's).
func (p *problems) setLogger(log logr.Logger) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.log = log
}

// failed reports that op (read, watch, queue, acknowledge, renew, withdraw,
// create) failed with err. It returns the reason ("" when err is not a
// failure to report).
func (p *problems) failed(op string, err error) string {
	reason := ErrorReason(err)
	if reason == "" {
		return ""
	}
	p.metrics.leaseError(p.key.Namespace, p.key.Name, reason)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reason, p.err = reason, fmt.Errorf("%s: %w", op, err)
	if op == "queue" {
		p.unqueued = fmt.Errorf("%s: %w", reason, err)
	}
	now := p.clock.Now()
	if reason == p.logged && now.Sub(p.loggedAt) < problemLogEvery {
		p.suppressed++
		return reason
	}
	p.log.Error(err, "FencedLease "+op+" failed; retrying", "reason", reason,
		"failuresSinceLastLog", p.suppressed+1, "hint", p.hint(reason, op))
	p.logged, p.loggedAt, p.suppressed = reason, now, 0
	return reason
}

// seenLease records that the lease exists (a read, a watch event, the answer
// to a write); when it was missing or never seen, and failures were logged,
// it says so.
func (p *problems) seenLease() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.seen || p.gone {
		// Found (again): the next failure is news, logged at once.
		if p.logged != "" {
			p.log.Info("FencedLease found", "failuresSinceLastLog", p.suppressed)
		}
		p.logged, p.suppressed = "", 0
	}
	p.seen, p.gone, p.reason, p.err = true, false, "", nil
}

// queued records that this client's request was appended.
func (p *problems) queued() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unqueued = nil
}

// goneLease records that the lease does not exist (a read or a watch event).
func (p *problems) goneLease() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gone = true
}

// ready is Elector.Ready.
func (p *problems) ready() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case !p.seen && p.err != nil:
		return fmt.Errorf("fenced lease %s: lease never seen: %s: %w (%s)", p.key, p.reason, p.err, p.hint(p.reason, ""))
	case !p.seen:
		return fmt.Errorf("fenced lease %s: lease never seen: not read yet (Run has not started, or its first read is under way)", p.key)
	case p.gone:
		return fmt.Errorf("fenced lease %s: the lease no longer exists (%s)", p.key, p.hint(ReasonNotFound, "read"))
	case p.unqueued != nil:
		return fmt.Errorf("fenced lease %s: request not queued: %w (%s)", p.key, p.unqueued, p.hint(ErrorReason(p.unqueued), "queue"))
	}
	return nil
}

// hint says what to check for reason.
func (p *problems) hint(reason, op string) string {
	switch reason {
	case ReasonNotFound:
		if p.createIfMissing {
			return "creating it (CreateIfMissing)"
		}
		return fmt.Sprintf("create FencedLease %s (platform team), or set CreateIfMissing; is kubefence installed?", p.key)
	case ReasonForbidden:
		if op == "create" {
			return fmt.Sprintf("CreateIfMissing needs the verb create on fencedleases.coordination.kubefence.io in namespace %s", p.key.Namespace)
		}
		return fmt.Sprintf("bind ClusterRole kubefence-fencedlease-candidate-role to this client with a RoleBinding in namespace %s", p.key.Namespace)
	case ReasonUnreachable:
		return "the API server or the kubefence webhook does not answer: is the operator running? (kubectl fence check)"
	case ReasonRefused:
		return "admission refused this client's change of the lease: see the error"
	}
	return "see the error"
}

// backoff is a capped exponential back-off with jitter for the retries of a
// client that does not hold the lease: each wait is drawn from [d/2, d],
// d doubling from backoffBase up to backoffCap. A holder's renewals never use
// it: they keep RetryInterval, bounded by the deadline.
type backoff struct{ next time.Duration }

const (
	backoffBase = 200 * time.Millisecond
	backoffCap  = 5 * time.Second
)

// step returns the next wait.
func (b *backoff) step() time.Duration {
	d := b.next
	if d == 0 {
		d = backoffBase
	}
	b.next = min(2*d, backoffCap)
	return d/2 + rand.N(d/2+1)
}

// reset starts again from backoffBase.
func (b *backoff) reset() { b.next = 0 }
