package fencedlease

import (
	"fmt"
	"slices"
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
	// heartbeat is the heartbeat Lease the tenure's request names (empty:
	// none), hbUser the user it must be made by; hbRenew the latest of its renewTimes counted for the tenure,
	// hbAcked whether the tenure was acknowledged (from then on heartbeats
	// renew it, and the fencing webhook counts their stamps), hbAhead
	// whether a counted stamp was more than the skew after this
	// controller's sighting of it (docs/design.md, "Heartbeats").
	heartbeat string
	hbUser    string
	hbRenew   time.Time
	hbAcked   bool
	hbAhead   bool
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

// decision is the next single write the reconciler must make, or none. It
// carries the whole write (apply): the reconciler only sends it.
type decision struct {
	// removeRequest, when set, names the expired holder whose request must be
	// removed from spec, with the expired annotation recording it and
	// removeToken, the token of the tenure that expired. Before a grant the
	// write raises metadata.generation, so that the next token is larger.
	removeRequest string
	removeToken   int64
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
	// expiredLate, when expired, is how long after the tenure's expiry the
	// decision to end it came (timers and the work queue).
	expired     bool
	expiredLate time.Duration
	// needLive asks for the tenure's heartbeat read from the API server
	// before anything is decided: the decision would end a heartbeat tenure
	// (docs/design.md, "Heartbeats").
	needLive bool
	// keepObservation: a heartbeat tenure's request removal, after which
	// the controller must still know what it checked of the heartbeat.
	keepObservation bool
}

// apply returns the object the decision's write sends, made from lease (the
// object it was decided on), and whether it goes to the status subresource;
// nil when there is nothing to write. A removal drops the expired holder's
// request and marks the expired annotation with that holder and the token of
// its tenure (endedByRequest and expiredRequest read the mark): one
// optimistic-locked update, so that a renewal sent meanwhile makes it
// conflict and the next decision sees the renewal.
func (d decision) apply(lease *coordv1alpha1.FencedLease) (updated *coordv1alpha1.FencedLease, statusWrite bool) {
	switch {
	case d.removeRequest != "":
		updated = lease.DeepCopy()
		updated.Spec.Requests = slices.DeleteFunc(updated.Spec.Requests, func(q coordv1alpha1.LeaseRequest) bool {
			return q.HolderIdentity == d.removeRequest
		})
		if updated.Annotations == nil {
			updated.Annotations = map[string]string{}
		}
		updated.Annotations[coordv1alpha1.ExpiredAnnotation] = coordv1alpha1.ExpiredMark(d.removeRequest, d.removeToken)
		return updated, false
	case d.status != nil:
		updated = lease.DeepCopy()
		updated.Status = *d.status
		return updated, true
	}
	return nil, false
}

// decide computes the controller's next step for one FencedLease. It is a pure
// function of the object, what this controller has observed, the epoch carried
// over from earlier incarnations of the lease name (used only when the status
// is still empty) and the controller's clock. Its steps run in order on one
// copy of the status; a step that asks for a spec write ends the decision:
//
//  1. tokenBase: the floor under the tokens, and a new incarnation's wait;
//  2. currentTenure, if someone holds the lease: ended by a change of its
//     request (endedByRequest), running on (observe, expiry, acknowledge),
//     or expired (expire: remove the request first, or end it in status);
//  3. grantNext, if nobody holds it (now): idle, waiting out lockDelayUntil,
//     or granted to the first waiter;
//  4. waiting: the waiting list;
//  5. the status write if the status changed (more than its observed
//     generation), else tidy: the expired predecessor's request removed.
func decide(lease *coordv1alpha1.FencedLease, obs *observation, hb *Heartbeat, storedEpoch int64, now time.Time, timing Timing) (decision, error) {
	var d decision
	old := &lease.Status
	st := old.DeepCopy()
	base, wait := tokenBase(lease, storedEpoch, now, timing)
	st.TokenBase = base
	if wait != nil {
		st.LockDelayUntil = wait
	}
	st.ObservedGeneration = lease.Generation

	if st.HolderIdentity != "" {
		d.currentTenure(lease, st, obs, hb, now, timing)
		if d.removeRequest != "" || d.needLive {
			return d, nil
		}
	}
	pending := expiredRequest(lease, st)
	queue := lease.Spec.Requests
	if pending >= 0 {
		queue = append(queue[:pending:pending], queue[pending+1:]...)
	}
	if st.HolderIdentity == "" {
		if err := d.grantNext(lease, st, queue, now, timing); err != nil {
			return d, err
		}
	}
	st.Waiting = waiting(queue, st.HolderIdentity, old.Waiting, micro(now))

	if !equality.Semantic.DeepEqual(old, st) && !onlyGenerationMoved(old, st) {
		d.status = st
	} else if pending >= 0 {
		d.tidy(lease, st, pending, now)
	}
	return d, nil
}

// tokenBase decides the floor under this incarnation's tokens (I1; a token
// is tokenBase + generation): the status's tokenBase, raised on the first
// reconcile (nothing observed yet) to the epoch an earlier incarnation of the
// lease name left in the store, and to spec.minFencingToken. For a new
// incarnation (a stored epoch above, nothing granted yet) it also returns
// wait, the lockDelayUntil before its first grant, the commit lag from now:
// writes admitted under the earlier incarnation's last tenure may still
// commit (docs/design.md, "How each way a tenure ends keeps the promise":
// delete-then-recreate).
func tokenBase(lease *coordv1alpha1.FencedLease, storedEpoch int64, now time.Time, timing Timing) (base int64, wait *metav1.MicroTime) {
	st := &lease.Status
	base = st.TokenBase
	if st.ObservedGeneration == 0 && storedEpoch > base {
		base = storedEpoch
		if timing.CommitLag > 0 && st.FencingToken == 0 {
			until := micro(now.Add(timing.CommitLag))
			wait = &until
		}
	}
	return max(base, lease.Spec.MinFencingToken), wait
}

// currentTenure decides the tenure of the holder st names: ended by a change
// of its request (tenureEnded, endedByRequest); else, with this controller's
// observation brought up to the request (observe), running on until its
// expiry (acknowledge the renewal, look again at the expiry) or past it
// (expire).
func (d *decision) currentTenure(lease *coordv1alpha1.FencedLease, st *coordv1alpha1.FencedLeaseStatus, obs *observation, hb *Heartbeat, now time.Time, timing Timing) {
	idx := coordv1alpha1.HolderRequestIndex(lease.Spec.Requests, &lease.Status)
	if tenureEnded(lease, idx, obs) {
		if d.heartbeatEndWaits(lease, obs, hb, timing) {
			return
		}
		d.transitions = append(d.transitions, endedByRequest(lease, st, now, timing))
		if heartbeatLagged(lease, obs, hb, timing) {
			waitCommitLag(st, now, timing)
		}
		return
	}
	req := &lease.Spec.Requests[idx]
	obs, d.renewed = observe(obs, st.HolderIdentity, st.FencingToken, req.RenewSequence, now)
	if req.Heartbeat != "" {
		var beat bool
		obs, beat = heartbeatRenewal(obs, lease, req, hb, timing)
		d.renewed = d.renewed || beat
	}
	expire, stamped := expiry(&lease.Status, req, obs, timing)
	if !now.Before(expire) {
		if req.Heartbeat != "" {
			d.expireHeartbeat(st, obs, hb)
			// Late only once decided: the live read comes first.
			d.expired, d.expiredLate = !d.needLive, now.Sub(expire)
			return
		}
		d.expired, d.expiredLate = true, now.Sub(expire)
		d.expire(lease, st, now)
		return
	}
	acknowledge(st, &lease.Status, obs, stamped || req.Heartbeat != "", timing)
	d.observation = obs
	d.requeueAfter = expire.Sub(now)
}

// tenureEnded tells whether the holder's request (at idx, from
// HolderRequestIndex: -1 if none carries the tenure) says its tenure is
// over: the request is gone (released or withdrawn by its holder, revoked
// by an operator, removed by this controller at expiry), it was made again
// by another user than the one granted (status.holderUser), its
// renewSequence is below what status recorded, or it was withdrawn and made
// anew since this controller observed it (a new request starts its
// renewSequence again, below the observation's). A stamped renewal leaves
// status.renewSequence at the grant's and a controller that took over has
// no observation: then only the user tells a request made again from the
// granted one (docs/design.md, "Which request carries the tenure").
func tenureEnded(lease *coordv1alpha1.FencedLease, idx int, obs *observation) bool {
	if idx < 0 {
		return true
	}
	st := &lease.Status
	seq := lease.Spec.Requests[idx].RenewSequence
	return obs != nil && obs.holder == st.HolderIdentity && obs.token == st.FencingToken && seq < obs.renewSequence
}

// endedByRequest ends a tenure whose request says it is over (tenureEnded):
// Expired when the expired annotation marks this tenure (this controller
// removed the request: expire's remove-first path), then with the lease's
// lock delay; else Released. After an operator's revocation (the revoked
// annotation marks this tenure) the next grant waits the commit lag as well:
// writes its holder had admitted may still commit (docs/design.md, "How each
// way a tenure ends keeps the promise": operator release).
func endedByRequest(lease *coordv1alpha1.FencedLease, st *coordv1alpha1.FencedLeaseStatus, now time.Time, timing Timing) Transition {
	mark := coordv1alpha1.ExpiredMark(st.HolderIdentity, st.FencingToken)
	reason := coordv1alpha1.EndReasonReleased
	if lease.Annotations[coordv1alpha1.ExpiredAnnotation] == mark {
		reason = coordv1alpha1.EndReasonExpired
	}
	tr := endTenure(st, reason, now)
	if reason == coordv1alpha1.EndReasonExpired {
		startLockDelay(lease, st, now)
	}
	if lease.Annotations[coordv1alpha1.RevokedAnnotation] == mark {
		waitCommitLag(st, now, timing)
	}
	return tr
}

// waitCommitLag holds the next grant off until the commit lag from now (at
// least): writes the fencing webhook admitted under the tenure that ended
// may still commit until then.
func waitCommitLag(st *coordv1alpha1.FencedLeaseStatus, now time.Time, timing Timing) {
	if timing.CommitLag <= 0 {
		return
	}
	until := micro(now.Add(timing.CommitLag))
	if st.LockDelayUntil == nil || st.LockDelayUntil.Before(&until) {
		st.LockDelayUntil = &until
	}
}

// observe brings this controller's observation up to the holder's request
// (I3): a tenure it has not observed yet counts from now (a controller that
// restarts or takes over never expires a holder earlier than its predecessor
// would), and a raised renewSequence is a renewal observed now (renewed).
func observe(obs *observation, holder string, token, renewSequence int64, now time.Time) (_ *observation, renewed bool) {
	switch {
	case obs == nil || obs.holder != holder || obs.token != token:
		return newObservation(holder, token, renewSequence, now), false
	case renewSequence > obs.renewSequence:
		return newObservation(holder, token, renewSequence, now), true
	}
	return obs, false
}

// expiry is when the tenure ends if its holder stays silent (I3): the
// observation + L + allowance, never before the persisted expireTime
// (whoever wrote it, an earlier leader or a second controller still running:
// the fencing webhook accepts the token until just before it), nor before the
// holder's renewTime stamp + L + allowance (the fencing webhook counts the
// tenure from that stamp). With ClampStamps (policy mode, where no admission
// check bounds the stamp by a clock and nothing else reads it) the stamp
// counts only up to the observation. stamped: the request carries a stamp
// and status an acknowledged expireTime.
func expiry(old *coordv1alpha1.FencedLeaseStatus, req *coordv1alpha1.LeaseRequest, obs *observation, timing Timing) (expire time.Time, stamped bool) {
	l := time.Duration(old.LeaseDurationSeconds) * time.Second
	expire = timing.Expiry(obs.at, l)
	if old.ExpireTime != nil && old.ExpireTime.After(expire) {
		expire = old.ExpireTime.Time
	}
	stamped = req.RenewTime != nil && old.ExpireTime != nil
	if stamped {
		stamp := req.RenewTime.Time
		if timing.ClampStamps && stamp.After(obs.at) {
			stamp = obs.at
		}
		if e := timing.Expiry(stamp, l); e.After(expire) {
			expire = e
		}
	}
	return expire, stamped
}

// acknowledge records a running tenure's latest observed renewal in status
// (renewSequence, renewTime, expireTime = renewTime + L + allowance) for a
// holder whose fencing webhook bound is that expireTime: a renewal without a
// renewTime stamp (a client that does not stamp). A stamped
// renewal needs no status write: one API write per renewal, the holder's
// (I2). Status never moves back: an expireTime already later (another
// controller's) stays, with its renewTime, or two controllers would rewrite
// each other's renewTime forever.
func acknowledge(st, old *coordv1alpha1.FencedLeaseStatus, obs *observation, stamped bool, timing Timing) {
	if stamped {
		return
	}
	l := time.Duration(old.LeaseDurationSeconds) * time.Second
	renewAt := micro(obs.recorded)
	expireAt := micro(timing.Expiry(obs.recorded, l))
	if old.ExpireTime != nil && old.ExpireTime.After(expireAt.Time) {
		expireAt = *old.ExpireTime
		if old.RenewTime != nil {
			renewAt = *old.RenewTime
		}
	}
	st.RenewSequence = obs.renewSequence
	st.RenewTime = &renewAt
	st.ExpireTime = &expireAt
}

// expire decides a tenure past its expiry. If the generation has not moved
// since the grant (the holder never renewed), the next token would not be
// larger: remove the holder's request first, a spec write that raises the
// generation (I1; the next decision ends the tenure in endedByRequest).
// Otherwise end it in status now, with the lease's lock delay; the expired
// request is removed after the next grant (tidy), off the take-over's
// critical path.
func (d *decision) expire(lease *coordv1alpha1.FencedLease, st *coordv1alpha1.FencedLeaseStatus, now time.Time) {
	if st.TokenBase+lease.Generation <= st.FencingToken {
		d.removeRequest, d.removeToken = st.HolderIdentity, st.FencingToken
		return
	}
	d.transitions = append(d.transitions, endTenure(st, coordv1alpha1.EndReasonExpired, now))
	startLockDelay(lease, st, now)
}

// startLockDelay holds off the next grant for the lease's lockDelaySeconds
// after an expiry (none after a release).
func startLockDelay(lease *coordv1alpha1.FencedLease, st *coordv1alpha1.FencedLeaseStatus, now time.Time) {
	if lease.Spec.LockDelaySeconds > 0 {
		until := micro(now.Add(time.Duration(lease.Spec.LockDelaySeconds) * time.Second))
		st.LockDelayUntil = &until
	}
}

// grantNext decides a lease nobody holds, queue being its requests without
// an expired predecessor's: idle when nobody waits; no grant before
// lockDelayUntil (an expiry's lock delay, the commit lag after a revocation
// or before a new incarnation's first grant); else the first waiter is
// granted the token tokenBase + generation, and one that would not exceed
// the last token is refused (I1: cannot happen, since a release is a spec
// write and expire removes a never-renewed request first). The grant's
// observation waits for the holder's acknowledgement (tidy) and counts from
// when the write returns (written).
func (d *decision) grantNext(lease *coordv1alpha1.FencedLease, st *coordv1alpha1.FencedLeaseStatus, queue []coordv1alpha1.LeaseRequest, now time.Time, timing Timing) error {
	switch {
	case len(queue) == 0:
		setHeld(st, lease.Generation, now, metav1.ConditionFalse, idleReason(st), idleMessage(st))
	case st.LockDelayUntil != nil && now.Before(st.LockDelayUntil.Time):
		d.requeueAfter = st.LockDelayUntil.Sub(now)
		setHeld(st, lease.Generation, now, metav1.ConditionFalse, coordv1alpha1.ReasonLockDelay,
			fmt.Sprintf("%s; no grant before %s", lockDelayCause(st), st.LockDelayUntil.UTC().Format(time.RFC3339Nano)))
	default:
		next := &queue[0]
		token := st.TokenBase + lease.Generation
		if token <= st.FencingToken {
			return fmt.Errorf("refusing to grant %q: token %d would not exceed the last token %d", next.HolderIdentity, token, st.FencingToken)
		}
		d.transitions = append(d.transitions, grant(st, lease, next, token, len(d.transitions) > 0, now, timing))
		obs := newObservation(next.HolderIdentity, token, next.RenewSequence, now)
		obs.acked = false
		d.granted = true
		d.observation = obs
		l := time.Duration(st.LeaseDurationSeconds) * time.Second
		d.requeueAfter = l + timing.Allowance(l)
	}
	return nil
}

// tidy decides, when no status write is due, the removal of the expired
// predecessor's request (at pending, found by expiredRequest), marked with
// that tenure's token. While the new holder has not acknowledged its grant it
// waits, for at most ackGrace: the removal shifts the list under the
// holder's acknowledging renewal (a JSON patch testing its index; the helper
// re-reads and retries at once if the removal comes first anyway).
func (d *decision) tidy(lease *coordv1alpha1.FencedLease, st *coordv1alpha1.FencedLeaseStatus, pending int, now time.Time) {
	if o := d.observation; o != nil && !o.acked && st.HolderIdentity != "" {
		l := time.Duration(st.LeaseDurationSeconds) * time.Second
		if wait := o.at.Add(ackGrace(l)).Sub(now); wait > 0 {
			if d.requeueAfter == 0 || wait < d.requeueAfter {
				d.requeueAfter = wait
			}
			return
		}
	}
	d.removeRequest, d.removeToken = lease.Spec.Requests[pending].HolderIdentity, st.PreviousHolder.FencingToken
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
	st.HolderUser = ""
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
	expire := micro(timing.Expiry(now, l))
	st.HolderIdentity = next.HolderIdentity
	st.HolderUser = next.User
	st.FencingToken = token
	st.LeaseDurationSeconds = lease.Spec.LeaseDurationSeconds
	st.MaxCommitLagMilliseconds, st.ClockSkewMilliseconds = milliseconds(timing.CommitLag), milliseconds(timing.Skew)
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
