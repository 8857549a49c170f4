package protocol

import (
	"errors"
	"time"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// ErrNotOwnRequest is returned (wrapped) for a request of this client's
// identity that this client did not make, or that changed without this
// client changing it: another process shares the identity.
var ErrNotOwnRequest = errors.New("the request of this identity is not this client's own")

// OwnRequest is what a client knows of its own request, so that it renews,
// leads and withdraws only a request it made itself. Any process can use a
// holderIdentity (a restarted process whose predecessor's request is still
// there, a zombie after a force-delete, two replicas configured alike), and
// the lease cannot tell their requests apart; a client can: its own request is
// the one it appended, as its own writes left it. A request it did not
// append, or that changed without its doing (another process renewed it), is
// not its own, and neither is the tenure granted to it: leading that would
// share one token between two processes (docs/protocol.md, "3. Acknowledge,
// then renew every L/3").
//
// The zero OwnRequest owns nothing: a new client waits until a request of its
// identity it finds is gone, and then queues its own. OwnRequest is not safe
// for concurrent use.
type OwnRequest struct {
	made bool
	// last is the request as this client's last answered write left it;
	// pending the renewals it sent without an answer (any may have
	// committed), until one is answered or seen.
	last    coordv1alpha1.LeaseRequest
	pending []coordv1alpha1.LeaseRequest
}

// Appended records the request this client appended: its write was answered.
func (o *OwnRequest) Appended(r coordv1alpha1.LeaseRequest) { *o = OwnRequest{made: true, last: r} }

// Disown forgets the request: it was withdrawn or seen gone, or another
// process changed it.
func (o *OwnRequest) Disown() { *o = OwnRequest{} }

// Made tells whether this client appended a request it has not disowned
// since.
func (o *OwnRequest) Made() bool { return o.made }

// Observe records what lease (nil: deleted) shows of identity's request: a
// request gone is disowned, for good (a request of the identity appended
// later is someone else's unless this client appends it).
func (o *OwnRequest) Observe(lease *coordv1alpha1.FencedLease, identity string) {
	if lease == nil || coordv1alpha1.RequestIndex(lease.Spec.Requests, identity) < 0 {
		o.Disown()
	}
}

// Owns tells whether r is this client's own request: it appended it, and r is
// as its last answered write left it, or as a renewal it sent without an
// answer would leave it (r then confirms that renewal).
func (o *OwnRequest) Owns(r coordv1alpha1.LeaseRequest) bool {
	if !o.made {
		return false
	}
	if sameRequest(r, o.last) {
		return true
	}
	for _, p := range o.pending {
		if sameRequest(r, p) {
			o.last, o.pending = r, nil
			return true
		}
	}
	return false
}

// RenewPatch is RenewPatch for this client's own request; it refuses
// (ErrNotOwnRequest) a request that is not, and records the renewal as sent.
func (o *OwnRequest) RenewPatch(lease *coordv1alpha1.FencedLease, identity string, sent time.Time) (Patch, error) {
	if i := coordv1alpha1.RequestIndex(lease.Spec.Requests, identity); i >= 0 && !o.Owns(lease.Spec.Requests[i]) {
		return nil, o.NotOwn(lease, identity)
	}
	p, err := RenewPatch(lease, identity, sent)
	if err != nil {
		return nil, err
	}
	o.pending = append(o.pending, p[1].Value.(coordv1alpha1.LeaseRequest))
	return p, nil
}

// Renewed records the answer to a renewal: identity's request in lease, the
// API server's answer.
func (o *OwnRequest) Renewed(lease *coordv1alpha1.FencedLease, identity string) {
	if i := coordv1alpha1.RequestIndex(lease.Spec.Requests, identity); i >= 0 && o.made {
		o.last, o.pending = lease.Spec.Requests[i], nil
	}
}

// WithdrawPatch is WithdrawPatch for this client's own request: nil when
// identity has no request in lease or it is not this client's own.
func (o *OwnRequest) WithdrawPatch(lease *coordv1alpha1.FencedLease, identity string) Patch {
	if i := coordv1alpha1.RequestIndex(lease.Spec.Requests, identity); i < 0 || !o.Owns(lease.Spec.Requests[i]) {
		return nil
	}
	return WithdrawPatch(lease, identity)
}

// NotOwn explains why identity's request in lease is not this client's own
// (an error wrapping ErrNotOwnRequest).
func (o *OwnRequest) NotOwn(lease *coordv1alpha1.FencedLease, identity string) error {
	why := "not made by this client (another process using the same identity, or this identity's previous process, made it)"
	if o.made {
		why = "changed by another process using the same identity since this client last wrote it"
	}
	return &notOwnError{lease: lease.Namespace + "/" + lease.Name, identity: identity, why: why}
}

type notOwnError struct{ lease, identity, why string }

func (e *notOwnError) Error() string {
	return "the request of " + e.identity + " in fencedlease " + e.lease + " was " + e.why
}

func (e *notOwnError) Unwrap() error { return ErrNotOwnRequest }

// sameRequest tells whether stored, a request as the lease shows it, is ours
// as this client wrote it. A stored request that lacks only the renewTime
// ours has is ours too: a writer that does not know the field (the previous
// release's controller adds its finalizer and removes expired requests with
// a full update) drops it without renewing, while any renewal, by this
// process or another, raises renewSequence (test/upgrade TestRollingUpgrade,
// TestOwnsARequestWhoseRenewTimeAnOlderWriterDropped).
func sameRequest(stored, ours coordv1alpha1.LeaseRequest) bool {
	if stored.HolderIdentity != ours.HolderIdentity || stored.User != ours.User || stored.RenewSequence != ours.RenewSequence {
		return false
	}
	return stored.RenewTime == nil || stored.RenewTime.Equal(ours.RenewTime)
}
