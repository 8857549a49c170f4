// Package timing is the I3 clock contract in one place: when a tenure ends on
// each of the three clocks that judge it, and the defaults those instants
// count with. The client helper (pkg/fence, pkg/fence/resourcelock), the
// controller (controllers/fencedlease) and the fencing webhook
// (controllers/webhooks/fencing) all compute from here, so that for a lease
// of duration L, the fencing webhook's clock skew bound S and commit lag C:
//
//	client deadline   sent + L - margin               (its monotonic clock)
//	webhook cut-off   E - min(S + C, L/10)            (its clock; answers by E - S - B/2)
//	controller expiry observed + L + allowance        (its clock)
//
// come in this order for every setting that Margin accepts and every clock
// offset within ±S of the fencing webhook's (TestClockOrder), where E is the
// webhook's lower bound of the controller's expiry (WebhookExpiry) and B the
// commit budget (CommitBudget). The package is pure: it imports nothing but
// the standard library, so that clients and the operator share it without
// sharing anything else (docs/design.md, I3).
package timing

import (
	"fmt"
	"time"
)

// Defaults of the operator's timing flags. The operator publishes the skew
// and commit lag it runs with in the status of every grant
// (status.clockSkewMilliseconds, status.maxCommitLagMilliseconds); a client
// counts with these defaults only when a lease does not carry them.
const (
	// DefaultSkew (--webhook-clock-skew) bounds the offset between the
	// fencing webhook's clock and the controller's, and between the
	// webhook's and a client's (the FencedLease webhook refuses a renewTime
	// later than its clock plus the skew).
	DefaultSkew = 100 * time.Millisecond
	// DefaultCommitLag (--max-commit-lag) bounds the time from the fencing
	// webhook's decision to the commit of the write it admitted (the
	// answer's way back, the API server's other admission, the etcd
	// transaction).
	DefaultCommitLag = time.Second
	// DefaultDriftRatio (--drift-ratio) is the largest relative clock-rate
	// difference the controller's allowance covers: 0.5% of the lease
	// duration (5000 ppm, fifty times a generous bound for an undisciplined
	// quartz clock).
	DefaultDriftRatio = 0.005
	// DefaultMinDrift (--min-drift) is the smallest allowance.
	DefaultMinDrift = 10 * time.Millisecond
)

// Allowance is the controller's drift allowance for a lease of duration l:
// l * driftRatio, at least minDrift.
func Allowance(l time.Duration, driftRatio float64, minDrift time.Duration) time.Duration {
	return max(time.Duration(float64(l)*driftRatio), minDrift)
}

// ControllerExpiry is when the controller expires a holder silent since
// from (its first observation of the latest renewal, or the grant), on the
// controller's clock: from + l + allowance.
func ControllerExpiry(from time.Time, l, allowance time.Duration) time.Time {
	return from.Add(l + allowance)
}

// WebhookExpiry is the fencing webhook's lower bound of the controller's
// expiry of a tenure, on the webhook's clock: the acknowledged
// status.expireTime, or the holder's latest renewTime stamp minus skew plus
// the lease duration, whichever is later (a zero stamp or duration: the
// expireTime alone). The controller never expires before either (it takes
// the same maximum, with its allowance on top), and a renewTime is never
// later than the renewal's admission plus skew.
func WebhookExpiry(expireTime, renewStamp time.Time, l, skew time.Duration) time.Time {
	expire := expireTime
	if !renewStamp.IsZero() && l > 0 {
		if e := renewStamp.Add(l - skew); e.After(expire) {
			expire = e
		}
	}
	return expire
}

// CutOffMargin is how long before the webhook's expiry E a tenure's token
// stops being accepted: min(skew + commitLag, l/10). The cap keeps the
// client's least margin (MinMargin) at l/10 + 2 skew for short leases; so
// for leases shorter than FullMarginLease the commit-lag bound shrinks
// (CommitBudget).
func CutOffMargin(l, skew, commitLag time.Duration) time.Duration {
	margin := skew + commitLag
	if l > 0 && l/10 < margin {
		margin = l / 10
	}
	return margin
}

// CutOff is the instant from which the fencing webhook refuses the token of
// a tenure whose expiry is expire (WebhookExpiry): expire - CutOffMargin.
// The controller never grants the next tenure before expire, so a write
// admitted before the cut-off commits before that grant as long as it
// commits within CommitBudget of its admission.
func CutOff(expire time.Time, l, skew, commitLag time.Duration) time.Time {
	return expire.Add(-CutOffMargin(l, skew, commitLag))
}

// FullMarginLease is the shortest lease whose cut-off margin is the whole
// skew + commitLag: 10 (skew + commitLag), 11 s by default. A shorter lease's
// margin is L/10, and its commit-lag budget less than commitLag.
func FullMarginLease(skew, commitLag time.Duration) time.Duration {
	return 10 * (skew + commitLag)
}

// CommitBudget is the commit-lag budget B of a tenure: how long a write whose
// fencing decision started just before the cut-off may take from then to its
// commit and still commit before the controller may expire the tenure. It is
// the cut-off margin less the clock offset: commitLag for leases of
// FullMarginLease and longer, l/10 - skew for shorter ones, and none once
// l/10 <= skew.
func CommitBudget(l, skew, commitLag time.Duration) time.Duration {
	return max(CutOffMargin(l, skew, commitLag)-skew, 0)
}

// AnswerBy is the latest instant, on the webhook's clock, at which the
// webhook may answer a write admitted in a tenure whose expiry is expire:
//
//	expire - skew - CommitBudget/2
//
// expire - skew is the earliest the controller's clock may show expire, seen
// on the webhook's clock. The webhook keeps half of the commit-lag budget
// (its lease read and decision) and leaves the other half (the answer's way
// back, the API server's other admission, the commit) to the stated
// assumption. For leases of FullMarginLease and longer a decision that
// started before the cut-off and took at most commitLag/2 always answers by
// then; for shorter ones a decision that started near the cut-off must be
// quicker than that (docs/design.md, "The webhook keeps its half").
func AnswerBy(expire time.Time, l, skew, commitLag time.Duration) time.Time {
	return expire.Add(-skew - CommitBudget(l, skew, commitLag)/2)
}

// MinMargin is the smallest client safety margin that keeps the client's
// deadline before the webhook's last admission of its token, the earlier of
// CutOff and AnswerBy: that admission ends max(CutOffMargin, skew + B/2)
// before the webhook's expiry, which counts from the holder's renewTime
// stamp less skew, and the client's wall clock may be skew behind the
// webhook's. So: max(CutOffMargin, skew + B/2) + 2 skew.
func MinMargin(l, skew, commitLag time.Duration) time.Duration {
	return max(CutOffMargin(l, skew, commitLag), skew+CommitBudget(l, skew, commitLag)/2) + 2*skew
}

// Margin is the client's safety margin for a lease of duration l, given a
// configured margin (0: the default) and the operator's skew and commit lag:
// the default is max(l/10, MinMargin); a configured margin below l/10 (what
// the controller's drift argument assumes, docs/protocol.md) or below
// MinMargin is refused, as is one that leaves no time before the deadline.
func Margin(l, margin, skew, commitLag time.Duration) (time.Duration, error) {
	least := MinMargin(l, skew, commitLag)
	if margin == 0 {
		margin = max(l/10, least)
	}
	switch {
	case margin < l/10:
		return 0, fmt.Errorf("SafetyMargin %v is below a tenth of the lease duration %v (%v): the deadline would not leave the controller's drift allowance its room; expected at least %v", margin, l, l/10, max(l/10, least))
	case margin < least:
		return 0, fmt.Errorf("SafetyMargin %v is below %v, the least that keeps the deadline before the fencing webhook's cut-off for a lease of %v with clock skew %v and commit lag %v (max(min(S + C, L/10), S + B/2) + 2 S); expected at least %v", margin, least, l, skew, commitLag, least)
	case margin >= l:
		return 0, fmt.Errorf("SafetyMargin %v must be shorter than the lease duration %v (clock skew %v, commit lag %v): the lease is too short for this operator's timing", margin, l, skew, commitLag)
	}
	return margin, nil
}

// Deadline is the client's deadline for a tenure of lease duration l whose
// latest successful renewal was sent at sent, on the client's monotonic
// clock: sent + l - margin (margin from Margin). The controller cannot
// expire the tenure before sent + l, and the fencing webhook accepts its
// token until at least the deadline.
func Deadline(sent time.Time, l, margin time.Duration) time.Time {
	return sent.Add(l - margin)
}

// Bound is the skew or commit lag a client counts with: the larger of what
// it configures and what the operator published in the lease's status
// (status.clockSkewMilliseconds, status.maxCommitLagMilliseconds; 0 when
// absent, as in a status written by a release before they existed), or def
// when neither is set. The larger, because either only moves the client's
// deadline earlier and its release's wait longer: the published value is
// what the operator's webhook and controller enforce (a smaller configured
// one would put the deadline past the cut-off), and a larger configured one
// is the user's knowledge of a slower path, or of an operator restarted with
// a larger value after the grant.
func Bound(configured time.Duration, publishedMillis int64, def time.Duration) time.Duration {
	d := max(configured, time.Duration(publishedMillis)*time.Millisecond)
	if d <= 0 {
		d = def
	}
	return d
}
