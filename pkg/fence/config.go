package fence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence/protocol"
	"github.com/kubefence/kubefence/pkg/fence/timing"
)

// Config configures an Elector. Zero values take the documented defaults.
type Config struct {
	// Client talks to the API server; it must know the coordination.kubefence.io
	// scheme and support Watch (client.NewWithWatch). Required.
	Client client.WithWatch

	// Namespace and Name locate the FencedLease. Required. The lease must exist
	// (platform teams create it: its duration and lock-delay are theirs to
	// choose), unless CreateIfMissing.
	Namespace, Name string

	// Identity is this candidate's holderIdentity: lowercase letters, digits, '-',
	// '.', '_' and ':', at most 128 characters. Required. Typically the pod name.
	Identity string

	// User is this client's Kubernetes username, recorded in its request so that
	// nobody else can renew or withdraw it. Empty: asked from the API server
	// (SelfSubjectReview) when Run starts.
	User string

	// RenewInterval is how often the holder renews. Default: a third of the lease
	// duration. Every renewal is one API write.
	RenewInterval time.Duration

	// RetryInterval is how long the holder waits after a failed renewal before it
	// tries again. Default: RenewInterval / 4.
	RetryInterval time.Duration

	// SafetyMargin is subtracted from the lease duration when the holder computes
	// its own deadline, so that it stops that much before the controller can
	// expire it (on top of the controller's drift allowance), and before the
	// fencing webhook stops accepting its token. Default: a tenth of the lease
	// duration, or timing.MinMargin if that is more (short leases); a margin
	// below either is refused when a tenure starts (timing.Margin).
	SafetyMargin time.Duration

	// DisableReleaseOnCancel keeps the request when Run's context is cancelled.
	// By default (false) Run withdraws it then, which releases a held lease and
	// hands it to the next candidate at once. Run called again on the same
	// Elector continues with the kept request (and a tenure granted to it); a
	// new Elector, as in a restarted process, does not take it over: it waits
	// until the controller expired and removed it, and queues its own.
	DisableReleaseOnCancel bool

	// Callbacks are called on leadership changes. OnStartedLeading is required.
	Callbacks Callbacks

	// MaxCommitLag is how long the API server may take to commit a write it
	// admitted. With ClockSkew it sets the least SafetyMargin. The operator
	// publishes its own (--max-commit-lag) in each grant's status, and the
	// Elector counts with the larger of the two; 0: the published one, or
	// timing.DefaultCommitLag for a lease that publishes none. (A release no
	// longer waits it out: after a write without an answer it keeps the
	// request and lets the tenure expire, Writes.Quiesce.) Negative: refused.
	MaxCommitLag time.Duration

	// ClockSkew bounds the offset between this process's wall clock and the
	// fencing webhook's (the operator's --webhook-clock-skew). Published and
	// defaulted as MaxCommitLag (timing.DefaultSkew).
	ClockSkew time.Duration

	// Metrics, if set, records whether this Elector leads, its token, its
	// renewals and the stale refusals of its FencedClient (NewMetrics). Opt-in:
	// nil records nothing.
	Metrics *Metrics

	// Clock measures deadlines; it must be monotonic. Default: the real clock,
	// whose deadlines also hold on CLOCK_BOOTTIME (Linux), so that a machine
	// suspended past the deadline wakes up not leading.
	Clock clock.Clock

	// Heartbeat, if set, renews each tenure after its acknowledgement by
	// updating a coordination.k8s.io/v1 Lease (one protobuf write) instead
	// of patching the FencedLease: per lease (a Lease of this Elector's
	// own), or with Heartbeat.Session one Lease for every Elector of this
	// process and identity in the namespace. Needs create and update on
	// leases (the candidate role) and an operator that knows heartbeats.
	// Off by default (docs/protocol.md 3).
	Heartbeat *Heartbeat

	// CreateIfMissing creates the FencedLease, with the API's defaults (a
	// 15 s duration, no lock-delay), when a read finds none; it needs the verb
	// create on fencedleases in Namespace besides the candidate role. Off by
	// default: platform teams create leases and choose their settings.
	// Creating grants nothing; racing creators queue on the one lease.
	CreateIfMissing bool
}

// Callbacks are called by Run. Only OnStartedLeading runs in a goroutine of
// its own; the other two run on Run's goroutine, so they must return quickly:
// while one runs, the Elector neither renews nor notices a change.
type Callbacks struct {
	// OnStartedLeading runs in its own goroutine when this identity is granted
	// the lease. ctx is cancelled when leadership ends, and always before the
	// controller could expire the lease. token is the fencing token of the grant.
	OnStartedLeading func(ctx context.Context, token int64)
	// OnStoppedLeading runs on Run's goroutine once leadership ended (always,
	// if OnStartedLeading ran), after the leadership context was cancelled and
	// before the request is withdrawn (when it is). It does not wait for
	// OnStartedLeading to return.
	OnStoppedLeading func(token int64)
	// OnNewHolder runs on Run's goroutine when the lease's holder or token
	// changes; identity is empty when nobody holds the lease. Optional.
	OnNewHolder func(identity string, token int64)
}

func (c *Config) validate() error {
	errs := protocol.ValidateClientConfig(c.Client, c.Namespace, c.Name, c.Identity)
	if c.Callbacks.OnStartedLeading == nil {
		errs = append(errs, errors.New("Callbacks.OnStartedLeading is required"))
	}
	if hb := c.Heartbeat; hb != nil && hb.Session != nil {
		if s := hb.Session; s.Client == nil || s.Name == "" || s.Namespace != c.Namespace || s.Identity != c.Identity {
			errs = append(errs, fmt.Errorf("Heartbeat.Session must have a Client and a Name and be in the lease's namespace %q under its Identity %q; got namespace %q, identity %q, name %q",
				c.Namespace, c.Identity, s.Namespace, s.Identity, s.Name))
		}
	}
	for name, d := range map[string]time.Duration{"RenewInterval": c.RenewInterval, "RetryInterval": c.RetryInterval, "SafetyMargin": c.SafetyMargin, "MaxCommitLag": c.MaxCommitLag, "ClockSkew": c.ClockSkew} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s is %v: expected a positive duration, or 0 for the default", name, d))
		}
	}
	return errors.Join(errs...)
}

// published returns c with the skew and commit lag a tenure counts with
// (timing.Bound): for each, the larger of what the operator published in
// the lease's status st (nil: none) and what c configures, and the default
// when neither is set.
func (c Config) published(st *coordv1alpha1.FencedLeaseStatus) Config {
	var lag, skew int64
	if st != nil {
		lag, skew = st.MaxCommitLagMilliseconds, st.ClockSkewMilliseconds
	}
	c.MaxCommitLag = timing.Bound(c.MaxCommitLag, lag, timing.DefaultCommitLag)
	c.ClockSkew = timing.Bound(c.ClockSkew, skew, timing.DefaultSkew)
	return c
}

// timings returns the renewal timings for a lease of duration l, checking
// that they leave the holder time to renew and keep its deadline before the
// fencing webhook's cut-off (timing.Margin), with c's skew and commit lag
// (published).
func (c *Config) timings(l time.Duration) (renew, retry, margin time.Duration, err error) {
	renew, retry = c.RenewInterval, c.RetryInterval
	if renew == 0 {
		renew = l / 3
	}
	if retry == 0 {
		retry = renew / 4
	}
	p := c.published(nil)
	if margin, err = timing.Margin(l, c.SafetyMargin, p.ClockSkew, p.MaxCommitLag); err != nil {
		return 0, 0, 0, err
	}
	if renew+margin >= l {
		return 0, 0, 0, fmt.Errorf("RenewInterval %v plus SafetyMargin %v must be shorter than the lease duration %v", renew, margin, l)
	}
	return renew, retry, margin, nil
}

// Deadline is the local deadline of a tenure of lease duration l whose latest
// successful renewal (the acknowledging one first) was sent at sent, on the
// holder's monotonic clock: sent + l - SafetyMargin (timing.Deadline), with
// c's skew and commit lag (the Elector counts with the lease's published
// ones too). The Elector's Token is valid before it and its leadership
// context is cancelled at it; the controller cannot expire the tenure before
// sent + l, nor the fencing webhook refuse its token (I3).
func (c *Config) Deadline(sent time.Time, l time.Duration) (time.Time, error) {
	_, _, margin, err := c.timings(l)
	if err != nil {
		return time.Time{}, err
	}
	return timing.Deadline(sent, l, margin), nil
}
