package fencedlease

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// observation is what this controller process has seen of the current tenure.
// It is kept in memory only: a controller that restarts or takes over starts
// counting from its own first observation, so it never expires a holder earlier
// than its predecessor would have.
type observation struct {
	holder        string
	token         int64
	renewSequence int64
	// at is what expiry counts from. recorded is the time written to status
	// (renewTime, and expireTime = recorded + L + allowance); a grant's at is
	// moved later, to when its write returned, while recorded stays, so that
	// the persisted expireTime never falls after the controller's own expiry.
	at       time.Time
	recorded time.Time
	// acked is false from a grant until this controller observes the new
	// holder's first renewal (its acknowledgement).
	acked bool
}

// written updates the decision's observation once its status write returned
// at now: a grant counts from then (the new holder can only learn of it then,
// and a slow write, etcd or the API server restarting, must not eat into its
// tenure; later is the safe direction: expiry only moves later). A renewal
// needs no such care: its holder counts from when it sent it, which precedes
// the controller's observation.
func (d decision) written(now time.Time) {
	if o := d.observation; o != nil && d.granted && now.After(o.at) {
		o.at = now
	}
}

func newObservation(holder string, token, renewSequence int64, now time.Time) *observation {
	return &observation{holder: holder, token: token, renewSequence: renewSequence, at: now, recorded: now, acked: true}
}

// ackGrace is how long after a grant the controller leaves the expired
// predecessor's request in place while the new holder has not acknowledged:
// removing it shifts the list under the new holder's acknowledging patch (a
// JSON patch testing its index), which then has to read and try again.
func ackGrace(l time.Duration) time.Duration { return l / 3 }

// Transition is a change of holder that the reconciler reports as an event and a metric.
type Transition struct {
	// Kind is one of the condition reasons: Granted, HandedOver, TakenOver,
	// Expired, Released.
	Kind     string
	Holder   string
	Token    int64
	Previous string
	// PreviousToken is the token of the tenure that ended, if one did.
	PreviousToken int64
	// Tenure is how long the ended tenure lasted, on the controller's clock.
	Tenure time.Duration
}

// decision is the next single write the reconciler must make, or none.
type decision struct {
	// removeRequest, when set, names the expired holder whose request must be
	// removed from spec, with the expired annotation recording it. Before a grant
	// the write raises metadata.generation, so that the next token is larger.
	removeRequest string
	// status, when set, is the status to write.
	status *coordv1alpha1.FencedLeaseStatus
	// observation to remember once the write succeeds (nil: forget).
	observation *observation
	// renewed is true when status records a newly observed renewal.
	renewed bool
	// granted is true when status records a grant: its observation counts
	// from when the write returned.
	granted     bool
	transitions []Transition
	// requeueAfter is when the lease must be looked at again if nothing changes.
	requeueAfter time.Duration
}

// decide computes the controller's next step for one FencedLease. It is a pure
// function of the object, what this controller has observed, the epoch carried
// over from earlier incarnations of the lease name (used only when the status
// is still empty) and the controller's clock.
func decide(lease *coordv1alpha1.FencedLease, obs *observation, storedEpoch int64, now time.Time, timing Timing) (decision, error) {
	var d decision
	old := &lease.Status
	st := old.DeepCopy()

	base := st.TokenBase
	if old.ObservedGeneration == 0 && storedEpoch > base {
		base = storedEpoch
		if timing.CommitLag > 0 && st.FencingToken == 0 {
			// A new incarnation of a deleted lease name: writes admitted under the
			// old incarnation's last tenure may still commit. Its first grant
			// comes in a later write, CommitLag after this controller first saw it.
			until := micro(now.Add(timing.CommitLag))
			st.LockDelayUntil = &until
		}
	}
	if lease.Spec.MinFencingToken > base {
		base = lease.Spec.MinFencingToken
	}
	st.TokenBase = base
	st.ObservedGeneration = lease.Generation
	reqs := lease.Spec.Requests
	nowMicro := micro(now)

	if st.HolderIdentity != "" {
		holder := st.HolderIdentity
		idx := coordv1alpha1.RequestIndex(reqs, holder)
		remade := idx >= 0 && obs != nil && obs.holder == holder && obs.token == st.FencingToken && reqs[idx].RenewSequence < obs.renewSequence
		switch {
		case idx < 0 || reqs[idx].RenewSequence < st.RenewSequence || remade:
			// The holder's request is gone (or was withdrawn and made anew, which
			// resets renewSequence): the tenure is over.
			reason := coordv1alpha1.EndReasonReleased
			if lease.Annotations[coordv1alpha1.ExpiredAnnotation] == coordv1alpha1.ExpiredMark(holder, st.FencingToken) {
				reason = coordv1alpha1.EndReasonExpired
			}
			revoked := lease.Annotations[coordv1alpha1.RevokedAnnotation] == coordv1alpha1.ExpiredMark(holder, st.FencingToken)
			tr := endTenure(st, reason, now)
			if reason == coordv1alpha1.EndReasonExpired && lease.Spec.LockDelaySeconds > 0 {
				until := micro(now.Add(time.Duration(lease.Spec.LockDelaySeconds) * time.Second))
				st.LockDelayUntil = &until
			}
			if revoked && timing.CommitLag > 0 {
				// Ended by an operator, not by its holder: writes the holder had
				// admitted may still commit. Grant in a later write, CommitLag on.
				until := micro(now.Add(timing.CommitLag))
				if st.LockDelayUntil == nil || st.LockDelayUntil.Before(&until) {
					st.LockDelayUntil = &until
				}
			}
			d.transitions = append(d.transitions, tr)
			obs = nil
		default:
			renewSeq := reqs[idx].RenewSequence
			switch {
			case obs == nil || obs.holder != holder || obs.token != st.FencingToken:
				// First time this controller sees this tenure: count from now.
				obs = newObservation(holder, st.FencingToken, renewSeq, now)
			case renewSeq > obs.renewSequence:
				obs = newObservation(holder, st.FencingToken, renewSeq, now)
				d.renewed = true
			}
			l := time.Duration(st.LeaseDurationSeconds) * time.Second
			expire := obs.at.Add(l + timing.Allowance(l))
			if old.ExpireTime != nil && old.ExpireTime.After(expire) {
				// Never before the persisted expireTime, whoever wrote it (an earlier
				// leader, or a second controller still running): the fencing webhook
				// accepts the token until just before it.
				expire = old.ExpireTime.Time
			}
			stamped := reqs[idx].RenewTime != nil && old.ExpireTime != nil
			if stamped {
				// Nor before the holder's renewTime + L + allowance: the fencing
				// webhook counts the tenure from that stamp (a controller that
				// observed an older renewal, or none, must not expire earlier).
				// In policy mode nothing else reads the stamp and no admission
				// check bounds it by a clock: trust it only up to this
				// controller's observation (ClampStamps).
				stamp := reqs[idx].RenewTime.Time
				if timing.ClampStamps && stamp.After(obs.at) {
					stamp = obs.at
				}
				if e := stamp.Add(l + timing.Allowance(l)); e.After(expire) {
					expire = e
				}
			}
			switch {
			case now.Before(expire):
				renewAt := micro(obs.recorded)
				expireAt := micro(obs.recorded.Add(l + timing.Allowance(l)))
				if old.ExpireTime != nil && old.ExpireTime.After(expireAt.Time) {
					// Status never moves back: two controllers would otherwise
					// rewrite each other's renewTime forever.
					expireAt = *old.ExpireTime
					if old.RenewTime != nil {
						renewAt = *old.RenewTime
					}
				}
				if !stamped || timing.AcknowledgeStamped {
					// A client without renewTime (an older helper): the fencing
					// webhook's bound is the acknowledged expireTime, so write it.
					// A stamped renewal needs no status write: one API write per
					// renewal, the holder's (unless an older webhook, which reads
					// only expireTime, may still serve: AcknowledgeStamped).
					st.RenewSequence = obs.renewSequence
					st.RenewTime = &renewAt
					st.ExpireTime = &expireAt
				}
				d.observation = obs
				d.requeueAfter = expire.Sub(now)
			case base+lease.Generation <= st.FencingToken:
				// The holder never renewed, so the generation has not moved since the
				// grant: remove its request first (a spec write raises the generation),
				// so that the next grant's token is larger (I1).
				d.removeRequest = holder
				return d, nil
			default:
				// Expire in status now; the expired request is removed after the next
				// grant, off the take-over's critical path.
				d.transitions = append(d.transitions, endTenure(st, coordv1alpha1.EndReasonExpired, now))
				if lease.Spec.LockDelaySeconds > 0 {
					until := micro(now.Add(time.Duration(lease.Spec.LockDelaySeconds) * time.Second))
					st.LockDelayUntil = &until
				}
				obs = nil
			}
		}
	}
	pending := expiredRequest(lease, st)
	queue := reqs
	if pending >= 0 {
		queue = append(reqs[:pending:pending], reqs[pending+1:]...)
	}

	if st.HolderIdentity == "" {
		obs = nil
		switch {
		case len(queue) == 0:
			setHeld(st, lease.Generation, now, metav1.ConditionFalse, idleReason(st), idleMessage(st))
		case st.LockDelayUntil != nil && now.Before(st.LockDelayUntil.Time):
			d.requeueAfter = st.LockDelayUntil.Sub(now)
			setHeld(st, lease.Generation, now, metav1.ConditionFalse, coordv1alpha1.ReasonLockDelay,
				fmt.Sprintf("%s; no grant before %s", lockDelayCause(st), st.LockDelayUntil.UTC().Format(time.RFC3339Nano)))
		default:
			next := &queue[0]
			token := base + lease.Generation
			if token <= st.FencingToken {
				// Cannot happen: a release is a spec write, and an expiry without a
				// newer generation removes the request first. Refuse rather than
				// issue a token that does not increase (I1).
				return d, fmt.Errorf("refusing to grant %q: token %d would not exceed the last token %d", next.HolderIdentity, token, st.FencingToken)
			}
			tr := grant(st, lease, next, token, len(d.transitions) > 0, now, timing)
			d.transitions = append(d.transitions, tr)
			obs = newObservation(next.HolderIdentity, token, next.RenewSequence, now)
			obs.acked = false
			d.granted = true
			d.observation = obs
			l := time.Duration(st.LeaseDurationSeconds) * time.Second
			d.requeueAfter = l + timing.Allowance(l)
		}
	}

	st.Waiting = waiting(queue, st.HolderIdentity, old.Waiting, nowMicro)
	if !equality.Semantic.DeepEqual(old, st) && !onlyGenerationMoved(old, st) {
		d.status = st
	} else if pending >= 0 {
		// Removing the request shifts the queue under the new holder's
		// acknowledging renewal (a JSON patch testing its index): wait for the
		// acknowledgement, for at most ackGrace (the helper re-reads and retries
		// at once if the removal comes first anyway).
		if obs != nil && !obs.acked && st.HolderIdentity != "" {
			l := time.Duration(st.LeaseDurationSeconds) * time.Second
			if wait := obs.at.Add(ackGrace(l)).Sub(now); wait > 0 {
				if d.requeueAfter == 0 || wait < d.requeueAfter {
					d.requeueAfter = wait
				}
				return d, nil
			}
		}
		d.removeRequest = reqs[pending].HolderIdentity
	}
	return d, nil
}

// expiredRequest finds the request of a previous holder that expired, if the
// controller has not removed it yet (the expired annotation records each
// removal, so that a request the same identity makes afresh is kept).
func expiredRequest(lease *coordv1alpha1.FencedLease, st *coordv1alpha1.FencedLeaseStatus) int {
	p := st.PreviousHolder
	if p == nil || p.Reason == coordv1alpha1.EndReasonReleased || p.HolderIdentity == st.HolderIdentity {
		return -1
	}
	if lease.Annotations[coordv1alpha1.ExpiredAnnotation] == coordv1alpha1.ExpiredMark(p.HolderIdentity, p.FencingToken) {
		return -1
	}
	return coordv1alpha1.RequestIndex(lease.Spec.Requests, p.HolderIdentity)
}

func endTenure(st *coordv1alpha1.FencedLeaseStatus, reason coordv1alpha1.EndReason, now time.Time) Transition {
	tr := Transition{Kind: string(reason), Previous: st.HolderIdentity, PreviousToken: st.FencingToken}
	if st.AcquireTime != nil {
		tr.Tenure = now.Sub(st.AcquireTime.Time)
	}
	st.PreviousHolder = &coordv1alpha1.PreviousHolder{
		HolderIdentity: st.HolderIdentity,
		FencingToken:   st.FencingToken,
		EndTime:        micro(now),
		Reason:         reason,
	}
	st.HolderIdentity = ""
	st.AcquireTime = nil
	st.RenewTime = nil
	st.ExpireTime = nil
	st.RenewSequence = 0
	return tr
}

func grant(st *coordv1alpha1.FencedLeaseStatus, lease *coordv1alpha1.FencedLease, next *coordv1alpha1.LeaseRequest, token int64, endedNow bool, now time.Time, timing Timing) Transition {
	kind := coordv1alpha1.ReasonGranted
	tr := Transition{Holder: next.HolderIdentity, Token: token}
	if p := st.PreviousHolder; p != nil && (endedNow || p.Reason == coordv1alpha1.EndReasonExpired) {
		tr.Previous, tr.PreviousToken = p.HolderIdentity, p.FencingToken
		if p.Reason == coordv1alpha1.EndReasonReleased {
			kind = coordv1alpha1.ReasonHandedOver
		} else {
			kind = coordv1alpha1.ReasonTakenOver
			// "Expired, nobody took over" becomes "superseded by a new holder".
			p.Reason = coordv1alpha1.EndReasonSuperseded
		}
	}
	tr.Kind = kind
	if st.PreviousHolder == nil || st.PreviousHolder.HolderIdentity != next.HolderIdentity {
		st.LeaseTransitions++
	}
	l := time.Duration(lease.Spec.LeaseDurationSeconds) * time.Second
	acquire := micro(now)
	expire := micro(now.Add(l + timing.Allowance(l)))
	st.HolderIdentity = next.HolderIdentity
	st.FencingToken = token
	st.LeaseDurationSeconds = lease.Spec.LeaseDurationSeconds
	st.AcquireTime = &acquire
	st.RenewTime = &acquire
	st.ExpireTime = &expire
	st.RenewSequence = next.RenewSequence
	st.LockDelayUntil = nil
	setHeld(st, lease.Generation, now, metav1.ConditionTrue, kind,
		fmt.Sprintf("granted to %s with fencing token %d", next.HolderIdentity, token))
	return tr
}

func lockDelayCause(st *coordv1alpha1.FencedLeaseStatus) string {
	switch {
	case st.PreviousHolder == nil:
		return "the lease name had an earlier incarnation, whose writes may still be committing"
	case st.PreviousHolder.Reason == coordv1alpha1.EndReasonReleased:
		return "the previous tenure was revoked by an operator, and its writes may still be committing"
	default:
		return "previous holder expired"
	}
}

func idleReason(st *coordv1alpha1.FencedLeaseStatus) string {
	switch {
	case st.PreviousHolder == nil:
		return coordv1alpha1.ReasonUnclaimed
	case st.PreviousHolder.Reason == coordv1alpha1.EndReasonReleased:
		return coordv1alpha1.ReasonReleased
	default:
		return coordv1alpha1.ReasonExpired
	}
}

func idleMessage(st *coordv1alpha1.FencedLeaseStatus) string {
	p := st.PreviousHolder
	switch {
	case p == nil:
		return "nobody has requested the lease"
	case p.Reason == coordv1alpha1.EndReasonReleased:
		return fmt.Sprintf("%s released token %d; nobody else is waiting", p.HolderIdentity, p.FencingToken)
	default:
		return fmt.Sprintf("%s stopped renewing and expired with token %d; nobody else is waiting", p.HolderIdentity, p.FencingToken)
	}
}

func setHeld(st *coordv1alpha1.FencedLeaseStatus, generation int64, now time.Time, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type:               coordv1alpha1.ConditionHeld,
		LastTransitionTime: metav1.NewTime(now.Truncate(time.Second)),
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: generation,
	})
}

// waiting lists the requests other than the holder's in grant order, keeping
// the time the controller first saw each.
func waiting(reqs []coordv1alpha1.LeaseRequest, holder string, prev []coordv1alpha1.WaitingRequest, now metav1.MicroTime) []coordv1alpha1.WaitingRequest {
	since := make(map[string]metav1.MicroTime, len(prev))
	for _, w := range prev {
		since[w.HolderIdentity] = w.Since
	}
	var out []coordv1alpha1.WaitingRequest
	for _, r := range reqs {
		if r.HolderIdentity == holder {
			continue
		}
		s, ok := since[r.HolderIdentity]
		if !ok {
			s = now
		}
		out = append(out, coordv1alpha1.WaitingRequest{HolderIdentity: r.HolderIdentity, Since: s})
	}
	return out
}

// micro is t as the API stores it: wall clock, microseconds, no monotonic reading.
func micro(t time.Time) metav1.MicroTime {
	return metav1.NewMicroTime(t.Round(0).Truncate(time.Microsecond))
}

// onlyGenerationMoved tells whether st differs from old only in the observed
// generation (of the status and of its conditions): what a client's spec
// write (a stamped renewal, a new request joining the queue... ) changes by
// itself. That alone is not worth a status write: observedGeneration moves
// with the next write that decides something (one API write per renewal).
func onlyGenerationMoved(old, st *coordv1alpha1.FencedLeaseStatus) bool {
	n := st.DeepCopy()
	n.ObservedGeneration = old.ObservedGeneration
	for i := range n.Conditions {
		if c := meta.FindStatusCondition(old.Conditions, n.Conditions[i].Type); c != nil {
			n.Conditions[i].ObservedGeneration = c.ObservedGeneration
		}
	}
	return equality.Semantic.DeepEqual(old, n)
}
