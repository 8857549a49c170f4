package main

import (
	"fmt"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// What this file computes from one FencedLease is shared by list, get and the
// operator actions, so that each column means the same everywhere.

// waiter is a request that is not the holder's, in grant order.
type waiter struct {
	// HolderIdentity of the waiting client.
	HolderIdentity string `json:"holderIdentity"`
	// User that made the request.
	User string `json:"user"`
	// Since is when the controller first saw the request; nil when it has not yet.
	Since *metav1.MicroTime `json:"since,omitempty"`
}

// waiters lists the requests other than the holder's in spec order, which is
// the order the controller grants them in. spec.requests is the truth (the
// controller may not have seen the newest request yet); status.waiting adds
// when the controller first saw each.
func waiters(lease *coordv1alpha1.FencedLease) []waiter {
	since := map[string]metav1.MicroTime{}
	for _, w := range lease.Status.Waiting {
		since[w.HolderIdentity] = w.Since
	}
	var out []waiter
	for _, r := range lease.Spec.Requests {
		if r.HolderIdentity == lease.Status.HolderIdentity {
			continue
		}
		w := waiter{HolderIdentity: r.HolderIdentity, User: r.User}
		if t, ok := since[r.HolderIdentity]; ok {
			w.Since = &t
		}
		out = append(out, w)
	}
	return out
}

// heldReason is the reason of the Held condition: Granted, HandedOver,
// TakenOver, Expired, Released, LockDelay or Unclaimed; "-" before the
// controller has looked at the lease.
func heldReason(lease *coordv1alpha1.FencedLease) string {
	if c := meta.FindStatusCondition(lease.Status.Conditions, coordv1alpha1.ConditionHeld); c != nil && c.Reason != "" {
		return c.Reason
	}
	return "-"
}

// token prints a fencing token; tokens start at 1, so 0 means none yet.
func token(t int64) string {
	if t == 0 {
		return "-"
	}
	return strconv.FormatInt(t, 10)
}

// holder prints the holder, <none> when nobody holds the lease.
func holder(lease *coordv1alpha1.FencedLease) string {
	if lease.Status.HolderIdentity == "" {
		return none
	}
	return lease.Status.HolderIdentity
}

// expiresIn is the time until the controller may expire the holder.
func expiresIn(lease *coordv1alpha1.FencedLease, now time.Time) string {
	if lease.Status.HolderIdentity == "" {
		return "-"
	}
	return timeLeft(expiresAt(lease), now)
}

// expiresAt is the earliest the controller may expire the holder: the
// acknowledged status.expireTime or, for a client that stamps its renewals
// (the controller then writes no status per renewal), the holder's latest
// renewTime plus the lease duration, whichever is later.
func expiresAt(lease *coordv1alpha1.FencedLease) *metav1.MicroTime {
	st := lease.Status
	at := st.ExpireTime
	if i := coordv1alpha1.RequestIndex(lease.Spec.Requests, st.HolderIdentity); i >= 0 {
		if rt := lease.Spec.Requests[i].RenewTime; rt != nil && st.LeaseDurationSeconds > 0 {
			e := metav1.NewMicroTime(rt.Add(time.Duration(st.LeaseDurationSeconds) * time.Second))
			if at == nil || e.After(at.Time) {
				at = &e
			}
		}
	}
	return at
}

// lockDelayActive tells whether the lease is quarantined after an expiry.
func lockDelayActive(lease *coordv1alpha1.FencedLease, now time.Time) bool {
	u := lease.Status.LockDelayUntil
	return u != nil && u.After(now)
}

// lockDelay prints the configured lock-delay and, while it holds the lease
// back, how much longer: "15s (until +9.8s)".
func lockDelay(lease *coordv1alpha1.FencedLease, now time.Time) string {
	s := seconds(lease.Spec.LockDelaySeconds)
	if lockDelayActive(lease, now) {
		s = fmt.Sprintf("%s (until +%s)", s, formatDuration(lease.Status.LockDelayUntil.Sub(now)))
	}
	return s
}

// previousHolder tells how the last tenure ended, in words.
func previousHolder(lease *coordv1alpha1.FencedLease, now time.Time) string {
	p := lease.Status.PreviousHolder
	if p == nil {
		return none
	}
	var how string
	switch p.Reason {
	case coordv1alpha1.EndReasonReleased:
		how = "released"
	case coordv1alpha1.EndReasonExpired:
		how = "expired; nobody has taken over yet"
	case coordv1alpha1.EndReasonSuperseded:
		how = "expired and was superseded"
		if lease.Status.HolderIdentity != "" {
			how += " by " + lease.Status.HolderIdentity
		}
	default:
		how = string(p.Reason)
	}
	return fmt.Sprintf("%s (token %d) %s at %s", p.HolderIdentity, p.FencingToken, how, formatTime(&p.EndTime, now))
}

// Guarded object states, against the lease's current token.
const (
	// stateCurrent: the object carries the lease's current token.
	stateCurrent = "current"
	// stateStale: the object carries an older token; only a write with the
	// current token changes it now.
	stateStale = "STALE"
	// stateAhead: the object carries a token the lease has not issued, which
	// happens after etcd is restored from a backup: raise spec.minFencingToken
	// above it.
	stateAhead = "AHEAD"
	// stateInvalid: the annotation is missing or not a token.
	stateInvalid = "INVALID"
)

// tokenState compares a guarded object's token annotation with the lease's
// current token.
func tokenState(annotation string, present bool, current int64) string {
	if !present {
		return stateInvalid
	}
	t, err := strconv.ParseInt(annotation, 10, 64)
	switch {
	case err != nil || t < 0:
		return stateInvalid
	case t == current:
		return stateCurrent
	case t < current:
		return stateStale
	default:
		return stateAhead
	}
}
