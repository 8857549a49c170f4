package fencedlease

import (
	"fmt"
	"time"

	"github.com/kubefence/kubefence/pkg/fence/timing"
)

// Timing holds the controller's settings of the clock contract
// (pkg/fence/timing). A holder is expired at
//
//	(time this controller first observed its latest renewal) + L + Allowance(L)
//
// where L is the tenure's lease duration (timing.ControllerExpiry). The
// allowance covers clock-rate drift between the holder and the controller:
// the holder's own deadline is counted from when it sent the renewal, which
// is never later than when the controller observed it, so the delivery delay
// needs no term of its own (see docs/design.md, I3).
type Timing struct {
	// DriftRatio is the largest relative clock-rate difference tolerated between a
	// holder and the controller, as a fraction of the lease duration.
	DriftRatio float64
	// MinDrift is the smallest allowance, whatever the lease duration.
	MinDrift time.Duration
	// CommitLag bounds how long the API server may take to commit a write after
	// the fencing webhook admitted it (--max-commit-lag; must be > 0). After a
	// tenure an operator revoked, and before the first grant of a lease name's
	// new incarnation, the controller waits this long before it grants (the
	// fencing webhook's cut-off before an expiry covers the same lag; see
	// docs/design.md).
	CommitLag time.Duration
	// Skew is the fencing webhook's clock-skew bound (--webhook-clock-skew).
	// The controller does not count with it: it publishes it, with
	// CommitLag, in the status of every grant
	// (status.clockSkewMilliseconds, status.maxCommitLagMilliseconds), from
	// which clients compute their deadline (timing.Margin).
	Skew time.Duration
	// ClampStamps (policy mode) trusts a request's renewTime only up to this
	// controller's first observation of that renewal: no admission check
	// bounds renewTime by a clock there, and nothing but this controller
	// counts a tenure from it, so a future-dated stamp must not extend one
	// (docs/design.md, "I6 as a policy").
	ClampStamps bool
}

// DefaultTiming is the clock contract's defaults: a drift allowance of 0.5%
// of the lease duration and at least 10 ms, a commit lag of 1 s and a skew
// of 100 ms.
func DefaultTiming() Timing {
	return Timing{DriftRatio: timing.DefaultDriftRatio, MinDrift: timing.DefaultMinDrift, CommitLag: timing.DefaultCommitLag, Skew: timing.DefaultSkew}
}

// Validate reports a setting that would break the expiry arithmetic.
func (t Timing) Validate() error {
	if t.DriftRatio < 0 || t.DriftRatio >= 1 {
		return fmt.Errorf("drift ratio %v is out of range: expected 0 <= ratio < 1", t.DriftRatio)
	}
	if t.MinDrift < 0 {
		return fmt.Errorf("minimum drift allowance %v is negative: expected >= 0", t.MinDrift)
	}
	if t.CommitLag <= 0 {
		// Zero is not "no lag": it would silently switch off every protection
		// that counts on the lag (the fencing webhook's slow-decision refusal,
		// the waits after a revocation, before a recreated lease's first grant
		// and after policy mode's barrier).
		return fmt.Errorf("--max-commit-lag must be > 0: it bounds admission-to-commit, and 0 or less would switch off every margin and wait that counts on it; got %v", t.CommitLag)
	}
	return nil
}

// Allowance is the drift allowance added to a lease of duration l
// (timing.Allowance).
func (t Timing) Allowance(l time.Duration) time.Duration {
	return timing.Allowance(l, t.DriftRatio, t.MinDrift)
}

// Expiry is when a holder silent since from is expired, for a lease of
// duration l (timing.ControllerExpiry).
func (t Timing) Expiry(from time.Time, l time.Duration) time.Time {
	return timing.ControllerExpiry(from, l, t.Allowance(l))
}

// milliseconds is d in whole milliseconds, rounded up (a published bound
// never shrinks).
func milliseconds(d time.Duration) int64 {
	return int64((max(d, 0) + time.Millisecond - 1) / time.Millisecond)
}
