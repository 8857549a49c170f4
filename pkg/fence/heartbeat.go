package fence

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence/protocol"
)

// Heartbeat makes an Elector renew its tenures by updating a
// coordination.k8s.io/v1 Lease (one protobuf write, client-go's own
// renewal) instead of patching the FencedLease; the grant is still
// acknowledged by one patch of the request (docs/protocol.md 3,
// docs/design.md "Heartbeats"). The Lease is labelled kubefence.io/heartbeat
// and annotated with this client's user; the candidate role lets the
// Elector create and update it, and the policy kubefence-heartbeats lets
// nobody else write it.
type Heartbeat struct {
	// Session, if set, is one heartbeat Lease shared by every Elector of
	// this process and identity in its namespace (NewSession): one update
	// renews all their tenures. Nil: a Lease of this Elector's own,
	// HeartbeatName(lease, identity).
	Session *Session
}

// HeartbeatName is the name of the per-lease heartbeat Lease of identity on
// the FencedLease lease: "<lease>-hb-<8 hex digits of identity's FNV-1a>".
func HeartbeatName(lease, identity string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(identity))
	if len(lease) > 240 {
		lease = lease[:240]
	}
	return fmt.Sprintf("%s-hb-%08x", lease, h.Sum32())
}

// Session is a heartbeat Lease shared by the Electors of one process and
// identity in one namespace (the Chubby/ZooKeeper session): each Elector's
// renewal asks the session to beat, and a beat sent less than Interval ago
// (or in flight) serves every Elector, so that the process writes about one
// Lease update per Interval for all its tenures. Expiry stays per tenure, on
// the controller's clock.
type Session struct {
	// Client writes the Lease. Required.
	Client client.Client
	// Namespace and Name locate the Lease. Required.
	Namespace, Name string
	// Identity is the holderIdentity of every Elector sharing the session.
	Identity string
	// User is this client's username (empty: the first Elector's).
	User string
	// Interval: a beat sent less than this long ago renews an Elector that
	// asks without a new write. Default (0) and at most: the asking
	// Elector's renewal interval (a third of its lease duration), so that
	// the process writes about once per renewal interval for all its
	// tenures.
	Interval time.Duration
	// Clock must be the Electors' clock (default the real clock).
	Clock clock.Clock

	mu     sync.Mutex
	lease  *coordinationv1.Lease
	last   beat
	flight *beatFlight
}

// NewSession is a session heartbeat named name in namespace for identity.
func NewSession(c client.Client, namespace, name, identity string) *Session {
	return &Session{Client: c, Namespace: namespace, Name: name, Identity: identity}
}

type beat struct {
	sent, answered time.Time
	sentBoot       time.Duration
}

type beatFlight struct {
	done chan struct{}
	b    beat
	err  error
}

func (s *Session) clock() clock.Clock {
	if s.Clock == nil {
		return clock.RealClock{}
	}
	return s.Clock
}

// ensure creates the Lease if it does not exist (labelled, annotated with
// user, naming identity, renewed now), or reads it and checks it is this
// identity's and user's.
func (s *Session) ensure(ctx context.Context, user string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lease != nil {
		return nil
	}
	if s.User == "" {
		s.User = user
	}
	key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
	var l coordinationv1.Lease
	err := s.Client.Get(ctx, key, &l)
	switch {
	case apierrors.IsNotFound(err):
		id := s.Identity
		now := metav1.NewMicroTime(time.Now())
		l = coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name,
				Labels:      map[string]string{coordv1alpha1.HeartbeatLabel: "true"},
				Annotations: map[string]string{coordv1alpha1.HeartbeatUserAnnotation: s.User}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &id, RenewTime: &now},
		}
		if err := s.Client.Create(ctx, &l); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating heartbeat Lease %s: %w", key, err)
		} else if err != nil {
			return s.Client.Get(ctx, key, &l) // raced: checked at the next ensure
		}
	case err != nil:
		return fmt.Errorf("reading heartbeat Lease %s: %w", key, err)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != s.Identity || l.Annotations[coordv1alpha1.HeartbeatUserAnnotation] != s.User {
		return fmt.Errorf("heartbeat Lease %s belongs to another holder (holderIdentity %v, %s %q); expected holderIdentity %q made by %q: choose another session name",
			key, ptrString(l.Spec.HolderIdentity), coordv1alpha1.HeartbeatUserAnnotation, l.Annotations[coordv1alpha1.HeartbeatUserAnnotation], s.Identity, s.User)
	}
	s.lease = &l
	return nil
}

func ptrString(p *string) string {
	if p == nil {
		return "<none>"
	}
	return *p
}

// beat renews the Lease, or returns a beat sent less than fresh ago, or the
// one in flight. The beat's answered time lets the Elector count it only if
// it arrived before its deadline.
func (s *Session) beat(ctx context.Context, fresh time.Duration, boot func() time.Duration) (beat, error) {
	c := s.clock()
	s.mu.Lock()
	if s.lease == nil {
		s.mu.Unlock()
		return beat{}, errors.New("heartbeat Lease not set up")
	}
	if !s.last.sent.IsZero() && fresh > 0 && c.Since(s.last.sent) < fresh {
		b := s.last
		s.mu.Unlock()
		return b, nil
	}
	if f := s.flight; f != nil {
		s.mu.Unlock()
		select {
		case <-f.done:
			return f.b, f.err
		case <-ctx.Done():
			return beat{}, ctx.Err()
		}
	}
	f := &beatFlight{done: make(chan struct{})}
	s.flight = f
	l := s.lease.DeepCopy()
	s.mu.Unlock()

	b := beat{sent: c.Now()}
	if boot != nil {
		b.sentBoot = boot()
	}
	rt := metav1.NewMicroTime(time.Now())
	if l.Spec.RenewTime != nil && rt.Before(l.Spec.RenewTime) {
		rt = *l.Spec.RenewTime // never back (the policy refuses it)
	}
	l.Spec.RenewTime = &rt
	err := s.Client.Update(ctx, l)
	if apierrors.IsConflict(err) {
		// Written meanwhile (a process before this one with the session's
		// name): read it and try once more.
		var cur coordinationv1.Lease
		if err = s.Client.Get(ctx, client.ObjectKeyFromObject(l), &cur); err == nil {
			cur.Spec.RenewTime = &rt
			l = &cur
			err = s.Client.Update(ctx, l)
		}
	}
	b.answered = c.Now()
	s.mu.Lock()
	if err == nil {
		s.lease, s.last = l, b
	} else {
		err = fmt.Errorf("renewing heartbeat Lease %s/%s: %w", s.Namespace, s.Name, err)
	}
	s.flight = nil
	f.b, f.err = b, err
	s.mu.Unlock()
	close(f.done)
	return b, err
}

// beats tells whether the Elector renews its tenure on lease by its
// heartbeat: its own request names it (a request appended without one, by an
// earlier Run or release, renews by patches).
func (e *Elector) beats(lease *coordv1alpha1.FencedLease) bool {
	if e.hb == nil {
		return false
	}
	i := coordv1alpha1.RequestIndex(lease.Spec.Requests, e.cfg.Identity)
	return i >= 0 && lease.Spec.Requests[i].Heartbeat == e.hb.Name && e.own.Owns(lease.Spec.Requests[i])
}

// beat renews the tenure of token by its heartbeat and returns when the
// counted beat was sent. The beat's answer says nothing of the lease: the
// watch does (lead's view.changed). A beat answered at or after the
// deadline does not count (the controller's look before it expires the
// tenure is sure to see only the beats committed before that deadline).
func (e *Elector) beat(ctx context.Context, lease *coordv1alpha1.FencedLease, token int64, renewEvery time.Duration) (time.Time, error) {
	if lease.Status.HolderIdentity != e.cfg.Identity || lease.Status.FencingToken != token {
		return time.Time{}, ErrLost
	}
	var fresh time.Duration
	if e.hbShared {
		// A session's beat sent less than a renewal interval ago serves:
		// the deadline from it still leaves the next renewal its turn.
		fresh = renewEvery
		if e.hb.Interval > 0 && e.hb.Interval < fresh {
			fresh = e.hb.Interval
		}
	}
	start := e.clock.Now()
	b, err := e.hb.beat(ctx, fresh, e.boot)
	took := e.clock.Since(start)
	if err != nil {
		e.cfg.Metrics.observeRenewal(e.key.Namespace, e.key.Name, RenewalError, took)
		return time.Time{}, err
	}
	if !b.answered.Before(e.Deadline()) {
		e.cfg.Metrics.observeRenewal(e.key.Namespace, e.key.Name, RenewalError, took)
		return time.Time{}, fmt.Errorf("heartbeat %s/%s answered after the deadline: not counted", e.hb.Namespace, e.hb.Name)
	}
	e.cfg.Metrics.observeRenewal(e.key.Namespace, e.key.Name, RenewalOK, took)
	e.mu.Lock()
	if b.sent.After(e.lastSent) {
		e.lastSent, e.sentBoot = b.sent, b.sentBoot
	}
	e.mu.Unlock()
	return b.sent, nil
}

// detach removes the heartbeat from this Elector's own request, testing the
// request first: a session's tenure it stopped leading without withdrawing
// (a stale refusal) would otherwise stay renewed by the beats the session
// goes on sending for its other tenures, and never expire. Without the
// heartbeat the controller expires it L after its last renewal. Best
// effort: a failure is logged, and the request stays as it is.
func (e *Elector) detach(ctx context.Context) error {
	lease, _ := e.view.get()
	if lease == nil {
		return nil
	}
	i := coordv1alpha1.RequestIndex(lease.Spec.Requests, e.cfg.Identity)
	if i < 0 || lease.Spec.Requests[i].Heartbeat == "" || !e.own.Owns(lease.Spec.Requests[i]) {
		return nil
	}
	path := fmt.Sprintf("/spec/requests/%d", i)
	p := protocol.Patch{{Op: "test", Path: path, Value: lease.Spec.Requests[i]}, {Op: "remove", Path: path + "/heartbeat"}}
	updated := lease.DeepCopy()
	if err := e.cfg.Client.Patch(ctx, updated, p); err != nil {
		return fmt.Errorf("detaching %s's request from its session heartbeat: %w", e.key, err)
	}
	e.own.Renewed(updated, e.cfg.Identity)
	e.view.offer(updated)
	return nil
}
