package fencedlease

import (
	"fmt"
	"time"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// Memory is what one controller process remembers of one lease between its
// decisions: its own observation of the current tenure (see observation). It
// lives in memory only; a controller that restarts, or another that takes
// over, starts from the zero value, which has observed nothing.
type Memory struct {
	obs *observation
	// hb is the tenure's heartbeat as the reconciler found it for the next
	// decision (WithHeartbeat); never remembered between decisions.
	hb *Heartbeat
}

// WithHeartbeat is m with the heartbeat the next decision sees (nil: none,
// or not known): the reconciler's tracker or live read, the explorer's model.
func (m Memory) WithHeartbeat(h *Heartbeat) Memory {
	m.hb = h
	return m
}

// HeartbeatName is the heartbeat Lease a decision about lease with memory
// m needs: the one the holder's request names, or, once this controller
// removed a heartbeat tenure's request at its expiry, the one it observed
// (empty: none).
func HeartbeatName(lease *coordv1alpha1.FencedLease, m Memory) string {
	st := &lease.Status
	if st.HolderIdentity == "" {
		return ""
	}
	if i := coordv1alpha1.HolderRequestIndex(lease.Spec.Requests, st); i >= 0 {
		return lease.Spec.Requests[i].Heartbeat
	}
	if observedTenure(lease, m.obs) {
		return m.obs.heartbeat
	}
	return ""
}

// Observed is a copy of what a Memory holds, for traces and tests.
type Observed struct {
	Holder        string
	Token         int64
	RenewSequence int64
	// At is what the expiry counts from; Recorded is the time written to
	// status for it (see observation).
	At, Recorded time.Time
	// Acknowledged is false from a grant until the new holder's first
	// renewal was observed.
	Acknowledged bool
	// Heartbeat is the heartbeat Lease the tenure's request names (empty:
	// none); HeartbeatRenew the latest renewTime counted from it,
	// HeartbeatAcknowledged whether heartbeats renew the tenure,
	// HeartbeatAhead whether a counted stamp ran ahead of its sighting.
	Heartbeat                             string
	HeartbeatRenew                        time.Time
	HeartbeatAcknowledged, HeartbeatAhead bool
}

// Observed returns what the memory holds; false when it holds nothing.
func (m Memory) Observed() (Observed, bool) {
	if m.obs == nil {
		return Observed{}, false
	}
	o := m.obs
	return Observed{Holder: o.holder, Token: o.token, RenewSequence: o.renewSequence, At: o.at, Recorded: o.recorded, Acknowledged: o.acked,
		Heartbeat: o.heartbeat, HeartbeatRenew: o.hbRenew, HeartbeatAcknowledged: o.hbAcked, HeartbeatAhead: o.hbAhead}, true
}

func (m Memory) String() string {
	o, ok := m.Observed()
	if !ok {
		return "nothing observed"
	}
	return fmt.Sprintf("%s token %d renewSequence %d at %s recorded %s acknowledged %v",
		o.Holder, o.Token, o.RenewSequence, o.At.UTC().Format(time.RFC3339Nano), o.Recorded.UTC().Format(time.RFC3339Nano), o.Acknowledged)
}

// Step is one pass of the reconcile loop over one lease, as values: the
// decision on the lease as read (Decide), the single write it sends (Write)
// and what the controller remembers afterwards (Remember). The reconciler's
// loop is made of it, and so is the protocol explorer's controller
// (test/explorer), which runs these rules against a modelled API server,
// clocks, caches and restarts.
type Step struct {
	d decision
	// before is the memory the decision was made with.
	before Memory
}

// Decide makes the controller's next decision about lease (as read, from the
// cache or the API server) with what this controller process remembers of
// it, the epoch that earlier incarnations of the lease name left in the
// epoch store (read only while status.observedGeneration is 0) and its clock.
func Decide(lease *coordv1alpha1.FencedLease, mem Memory, storedEpoch int64, now time.Time, timing Timing) (Step, error) {
	d, err := decide(lease, mem.obs, mem.hb, storedEpoch, now, timing)
	return Step{d: d, before: Memory{obs: mem.obs}}, err
}

// Write returns the object the step's write sends, made from lease (the
// object it was decided on), and whether it goes to the status subresource;
// nil when there is nothing to write. It is sent with lease's resourceVersion
// (an optimistic lock).
func (s Step) Write(lease *coordv1alpha1.FencedLease) (updated *coordv1alpha1.FencedLease, statusWrite bool) {
	return s.d.apply(lease)
}

// Remember returns what the controller remembers after the step. wrote
// reports that the step's write returned successfully at now. A step with
// nothing to write remembers its decision's observation; a status write that
// returned, the decision's observation (a grant's counting from now); a
// request removal (a spec write) or a write that failed, what was remembered
// before.
func (s Step) Remember(wrote bool, now time.Time) Memory {
	switch {
	case s.d.removeRequest == "" && s.d.status == nil:
		return Memory{obs: s.d.observation}
	case wrote && s.d.keepObservation:
		return Memory{obs: s.d.observation}
	case !wrote || s.d.removeRequest != "":
		return s.before
	}
	d := s.d
	if d.observation != nil {
		o := *d.observation
		d.observation = &o
	}
	d.written(now)
	return Memory{obs: d.observation}
}

// RequeueAfter is when the lease must be looked at again if nothing changes
// (zero: only when it changes).
func (s Step) RequeueAfter() time.Duration { return s.d.requeueAfter }

// Transitions are the changes of holder the step's write records.
func (s Step) Transitions() []Transition { return s.d.transitions }

// ExpiredLate tells whether the step ends a tenure past its expiry (or
// removes its request first), and how long after the expiry it decided so.
func (s Step) ExpiredLate() (time.Duration, bool) { return s.d.expiredLate, s.d.expired }

// Renewed tells whether the step observed a new renewal of the holder.
func (s Step) Renewed() bool { return s.d.renewed }

// NeedsLiveHeartbeat tells whether the step decided nothing until the
// tenure's heartbeat (HeartbeatName) is read from the API server and handed
// to Decide again (Memory.WithHeartbeat with Live set): it would end a
// heartbeat tenure.
func (s Step) NeedsLiveHeartbeat() bool { return s.d.needLive }

// EpochOf is what the epoch finalizer records for a deleted lease: the
// highest token its incarnation issued or reserved (its token, tokenBase and
// minFencingToken), above which the next incarnation's tokens start (I1).
func EpochOf(lease *coordv1alpha1.FencedLease) int64 {
	return max(lease.Status.FencingToken, lease.Spec.MinFencingToken, lease.Status.TokenBase)
}
