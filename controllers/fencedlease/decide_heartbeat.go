package fencedlease

import (
	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// The decision's heartbeat rules (docs/design.md, "Heartbeats"): a
// heartbeat renews a tenure once it is acknowledged, counting from this
// controller's sighting (its stamp never counts later than that); a
// heartbeat tenure past its expiry is first looked at live, then its request
// is removed (from that write's commit the fencing webhook refuses the
// token), then, in webhook mode, the heartbeat is looked at live again and
// the grant waits the commit lag if it moved in between, or if a stamp it
// counted was ahead of the controller's sighting by more than the skew.

// acknowledged tells whether the holder's request has been renewed since
// its grant (status.renewSequence is the grant's): from then on its
// heartbeat renews it. A pure function of the object, so that a controller
// that restarts or takes over agrees with the fencing webhook.
func acknowledged(lease *coordv1alpha1.FencedLease, req *coordv1alpha1.LeaseRequest) bool {
	return req.RenewSequence > lease.Status.RenewSequence
}

// holderUser is the user a heartbeat must be made by: the granted request's
// (status.holderUser), or for a status written before it existed, the
// request's own.
func holderUser(lease *coordv1alpha1.FencedLease, req *coordv1alpha1.LeaseRequest) string {
	if lease.Status.HolderUser != "" {
		return lease.Status.HolderUser
	}
	return req.User
}

// heartbeatRenewal brings the tenure's observation up to its heartbeat hb:
// once the tenure is acknowledged, a renewTime later than the one counted
// is a renewal, counted from this controller's sighting of it. renewed: the
// observation moved later.
func heartbeatRenewal(obs *observation, lease *coordv1alpha1.FencedLease, req *coordv1alpha1.LeaseRequest, hb *Heartbeat, timing Timing) (_ *observation, renewed bool) {
	o := *obs
	o.heartbeat = req.Heartbeat
	o.hbAcked = acknowledged(lease, req)
	o.hbUser = holderUser(lease, req)
	if o.hbAcked && hb.renews(req.HolderIdentity, o.hbUser) && hb.RenewTime.After(o.hbRenew) {
		o.hbRenew = hb.RenewTime
		if hb.RenewTime.Add(-timing.Skew).After(hb.Sighted) {
			// The holder's clock is ahead of the bound the protocol asks
			// (docs/protocol.md 3): the fencing webhook's cut-off from
			// this stamp may fall after this controller's expiry.
			o.hbAhead = true
		}
		if hb.Sighted.After(o.at) {
			o.at = hb.Sighted
			renewed = true
		}
	}
	return &o, renewed
}

// expireHeartbeat decides a heartbeat tenure past its expiry: with the
// heartbeat only from the informer, ask for it read live (a renewal
// committed and not yet delivered would then be sighted, and the tenure go
// on); with it live and silent, remove the request first, whatever the
// generation (the fencing webhook refuses the token from that write's
// commit), keeping what was checked for the grant that follows
// (heartbeatLagged).
func (d *decision) expireHeartbeat(st *coordv1alpha1.FencedLeaseStatus, obs *observation, hb *Heartbeat) {
	d.observation = obs
	if hb == nil || !hb.Live {
		d.needLive = true
		return
	}
	d.removeRequest, d.removeToken = st.HolderIdentity, st.FencingToken
	d.keepObservation = true
}

// endedByOwnRemoval tells whether this controller's expiry removed the
// request of the tenure st names (the expired annotation marks it), in
// webhook mode (in policy mode a grant never depends on a stamp).
func endedByOwnRemoval(lease *coordv1alpha1.FencedLease, timing Timing) bool {
	st := &lease.Status
	return !timing.ClampStamps && st.HolderIdentity != "" &&
		lease.Annotations[coordv1alpha1.ExpiredAnnotation] == coordv1alpha1.ExpiredMark(st.HolderIdentity, st.FencingToken)
}

// observedTenure tells whether obs is this controller's observation of the
// tenure lease's status names.
func observedTenure(lease *coordv1alpha1.FencedLease, obs *observation) bool {
	return obs != nil && obs.holder == lease.Status.HolderIdentity && obs.token == lease.Status.FencingToken
}

// heartbeatEndWaits asks for the heartbeat read live before a heartbeat
// tenure whose request this controller removed at its expiry is ended (and
// the next request granted): the read must come after the removal returned.
func (d *decision) heartbeatEndWaits(lease *coordv1alpha1.FencedLease, obs *observation, hb *Heartbeat, timing Timing) bool {
	if !endedByOwnRemoval(lease, timing) || !observedTenure(lease, obs) || obs.heartbeat == "" || !obs.hbAcked {
		return false
	}
	if hb != nil && hb.Live {
		return false
	}
	d.observation = obs
	d.needLive = true
	return true
}

// heartbeatLagged tells whether the grant after a tenure this controller
// expired must wait the commit lag (webhook mode): its heartbeat moved
// between the look before the removal and the one after it, or a stamp it
// counted was ahead, so the fencing webhook may have admitted writes under a
// cut-off later than this controller's expiry until the removal committed.
// Without an observation of the tenure (this controller restarted between
// the removal and the grant) it cannot tell, and waits.
func heartbeatLagged(lease *coordv1alpha1.FencedLease, obs *observation, hb *Heartbeat, timing Timing) bool {
	if !endedByOwnRemoval(lease, timing) {
		return false
	}
	if !observedTenure(lease, obs) {
		return true
	}
	if obs.heartbeat == "" || !obs.hbAcked {
		return false
	}
	if obs.hbAhead {
		return true
	}
	return hb.renews(obs.holder, obs.hbUser) && hb.RenewTime.After(obs.hbRenew)
}
