package fence

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence/protocol"
)

// bootPoll is how often the watchdog compares the deadline with CLOCK_BOOTTIME.
const bootPoll = 250 * time.Millisecond

// ErrLost is returned by a renewal whose answer no longer names this identity
// with its token: the lease expired or went to someone else.
var ErrLost = errors.New("lease lost")

// Elector competes for one FencedLease on behalf of one identity.
type Elector struct {
	cfg   Config
	clock clock.Clock
	key   types.NamespacedName
	view  *leaseView
	// problems reports failed reads and writes of the lease (log, metric,
	// Ready); retry paces Run's retries while not leading.
	problems *problems
	retry    backoff

	mu       sync.Mutex
	leading  bool
	token    int64
	deadline time.Time
	release  chan chan error
	stepDown chan struct{}
	released time.Time // when this identity last released voluntarily

	// boot reads CLOCK_BOOTTIME when the Elector runs on the real clock (nil
	// otherwise); bootDeadline is the deadline on it, and sentBoot its reading
	// when the last renewal was sent. A suspended machine's monotonic clock
	// stands still, CLOCK_BOOTTIME does not: the deadline holds on both.
	boot         func() time.Duration
	bootDeadline time.Duration
	sentBoot     time.Duration
	lastSent     time.Time

	// writes counts the FencedClient writes in flight; its lock is taken
	// before mu (Writes.Begin reads Token under it), never after.
	writes Writes

	// own is this Elector's own request, the only one it leads, renews and
	// withdraws; touched only by Run's goroutine. It outlives Run, so that
	// Run called again continues a tenure this Elector kept
	// (DisableReleaseOnCancel).
	own protocol.OwnRequest

	// hb, with Config.Heartbeat, is the heartbeat Lease that renews this
	// Elector's tenures once acknowledged; hbShared: a Session, whose
	// recent beat renews without a write (per lease every renewal writes).
	hb       *Session
	hbShared bool
}

// New validates cfg and returns an Elector. Nothing is sent to the API server
// until Run.
func New(cfg Config) (*Elector, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("invalid fence.Config: %w", err)
	}
	c := cfg.Clock
	if c == nil {
		c = clock.RealClock{}
	}
	key := types.NamespacedName{Namespace: cfg.Namespace, Name: cfg.Name}
	p := newProblems(key, c, cfg.Metrics, cfg.CreateIfMissing)
	e := &Elector{cfg: cfg, clock: c, key: key, problems: p, view: newLeaseView(cfg.Client, key, c, p), release: make(chan chan error), stepDown: make(chan struct{}, 1)}
	if _, real := c.(clock.RealClock); real {
		e.boot, _ = bootClock()
	}
	if hb := cfg.Heartbeat; hb != nil {
		e.hb = hb.Session
		if e.hb == nil {
			// Per-lease: every renewal writes.
			e.hb = &Session{Client: cfg.Client, Namespace: cfg.Namespace, Name: HeartbeatName(cfg.Name, cfg.Identity), Identity: cfg.Identity, User: cfg.User, Clock: c}
		} else {
			e.hbShared = true
		}
	}
	cfg.Metrics.init(cfg.Namespace, cfg.Name)
	return e, nil
}

// Identity is the holder identity this Elector competes as.
func (e *Elector) Identity() string { return e.cfg.Identity }

// Token returns the fencing token while this identity leads, and false otherwise.
func (e *Elector) Token() (int64, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.leading || !e.clock.Now().Before(e.deadline) || (e.boot != nil && e.boot() >= e.bootDeadline) {
		return 0, false
	}
	return e.token, true
}

// Deadline is the local deadline of the current tenure: the holder's context is
// cancelled then unless a renewal succeeds first. Zero when not leading.
func (e *Elector) Deadline() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.leading {
		return time.Time{}
	}
	return e.deadline
}

// Release ends a tenure voluntarily: the holder's context is cancelled first,
// then the request is withdrawn, so the controller hands the lease to the next
// candidate at once. Run keeps going and queues again; cancel Run's context
// instead to stop competing. Release returns nil if this identity did not lead.
func (e *Elector) Release(ctx context.Context) error {
	if _, leading := e.Token(); !leading {
		return nil
	}
	done := make(chan error, 1)
	select {
	case e.release <- done:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// StepDown ends the current tenure at once without withdrawing the request:
// the holder's context is cancelled. A FencedClient calls it when a write is
// refused as stale. Run keeps competing, but does not lead that tenure (its
// token) again: it waits until the lease changes (a new grant, or the
// controller expires the tenure) and then competes again.
func (e *Elector) StepDown() {
	select {
	case e.stepDown <- struct{}{}:
	default:
	}
}

// Check is a healthz.Checker: it fails when this identity believes it leads
// past its deadline, which means the renewal loop is stuck.
func (e *Elector) Check(*http.Request) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.leading && e.clock.Now().After(e.deadline.Add(time.Second)) {
		return fmt.Errorf("fenced lease %s: still leading %v after the local deadline", e.key, e.clock.Since(e.deadline))
	}
	return nil
}

// Ready is a healthz.Checker for readiness: it fails with "lease never seen:
// <reason>" until this Elector has read its FencedLease once (reason is one
// of LeaseErrorReasons, with the error and what to check), with "the lease no
// longer exists" while it is deleted, and with "request not queued: <reason>"
// while its last attempt to queue failed (the webhook down or refusing). The
// first-day mistakes (no FencedLease, no RoleBinding, the webhook down) keep
// it failing; add it as a readiness check, not a liveness check: restarting
// does not fix them.
func (e *Elector) Ready(*http.Request) error { return e.problems.ready() }

// Run competes for the lease until ctx is cancelled: it queues a request, waits
// (on a watch) for the grant, leads while it can renew, and queues again after
// losing the lease. On return the request is withdrawn (unless
// DisableReleaseOnCancel) and OnStoppedLeading has run if OnStartedLeading did.
// It leads only this Elector's own request (see the package documentation): a
// request of its identity it did not append, or that another process renewed,
// it neither leads, renews nor withdraws, and it queues again once that is
// gone.
func (e *Elector) Run(ctx context.Context) error {
	log := logf.FromContext(ctx).WithValues("lease", e.key, "identity", e.cfg.Identity)
	if e.cfg.User == "" {
		user, err := protocol.WhoAmI(ctx, e.cfg.Client)
		if err != nil {
			return fmt.Errorf("%w (set Config.User to skip)", err)
		}
		e.cfg.User = user
	}
	e.problems.setLogger(log)
	viewCtx, stopView := context.WithCancel(ctx)
	defer stopView()
	go e.view.run(viewCtx)

	var lastHolder string
	var lastToken int64 = -1
	// fenced is the token of a tenure this elector stepped down from on a
	// stale refusal: the API server knows a newer tenure of the lease, so it
	// does not lead that token again (its writes would be refused, and each
	// acknowledging renewal would delay the controller's grant) but waits for
	// the lease to change: a new grant, or its request expired and removed.
	var fenced int64 = -1
	// foreign is set while a request of this identity that is not this
	// Elector's own is there (logged once).
	var foreign bool
	for {
		if ctx.Err() != nil {
			return e.withdraw(context.WithoutCancel(ctx))
		}
		lease, known := e.view.get()
		if known {
			e.own.Observe(lease, e.cfg.Identity)
		}
		if known && lease == nil && e.cfg.CreateIfMissing {
			if err := e.create(ctx); err != nil {
				sleep(ctx, e.clock, e.retry.step())
			}
			continue
		}
		if known && lease != nil {
			if h, t := lease.Status.HolderIdentity, lease.Status.FencingToken; h != lastHolder || t != lastToken {
				lastHolder, lastToken = h, t
				if e.cfg.Callbacks.OnNewHolder != nil {
					e.cfg.Callbacks.OnNewHolder(h, t)
				}
			}
			idx := coordv1alpha1.RequestIndex(lease.Spec.Requests, e.cfg.Identity)
			own := idx >= 0 && e.own.Owns(lease.Spec.Requests[idx])
			if idx >= 0 && !own && !foreign {
				// Another process uses this identity (or this identity's
				// previous process left its request): its request, and a
				// tenure granted to it, are not ours. Leading it would share
				// the token; wait until it is gone (withdrawn, or expired and
				// removed by the controller) and queue our own.
				log.Info("A request of this identity is there that is not this Elector's own: not leading, renewing or withdrawing it; waiting until it is gone",
					"reason", e.own.NotOwn(lease, e.cfg.Identity).Error(), "holder", lease.Status.HolderIdentity, "token", lease.Status.FencingToken)
				e.own.Disown()
			}
			foreign = idx >= 0 && !own
			switch {
			case own && lease.Status.HolderIdentity == e.cfg.Identity && lease.Status.FencingToken != fenced:
				if e.lead(ctx, lease) {
					fenced = lease.Status.FencingToken
					log.Info("Waiting for the lease to change before leading again", "token", fenced)
				}
				continue
			case idx < 0 && lease.Status.HolderIdentity != e.cfg.Identity:
				// Queue (again) only once the controller no longer lists us as holder,
				// so that a new request is never mistaken for the old tenure; and after
				// a release, only once the next holder has acknowledged its grant, so
				// that our write does not delay the hand-over.
				if wait := e.handoverPending(lease); wait > 0 {
					e.waitChange(ctx, wait)
					continue
				}
				if err := e.join(ctx, lease); err != nil {
					e.problems.failed("queue", err)
					log.V(1).Info("Queueing failed; retrying", "error", err.Error())
					sleep(ctx, e.clock, e.retry.step())
					_ = e.view.refresh(ctx)
				} else {
					e.retry.reset()
					e.problems.queued()
				}
				continue
			}
		}
		select {
		case <-ctx.Done():
			return e.withdraw(context.WithoutCancel(ctx))
		case <-e.view.changed:
		case done := <-e.release:
			done <- nil
		}
	}
}

// handoverPending returns how long to hold back a new request after a
// release: until the next holder acknowledged its grant, at most one lease
// duration.
func (e *Elector) handoverPending(lease *coordv1alpha1.FencedLease) time.Duration {
	e.mu.Lock()
	released := e.released
	e.mu.Unlock()
	if released.IsZero() {
		return 0
	}
	left := released.Add(time.Duration(lease.Spec.LeaseDurationSeconds) * time.Second).Sub(e.clock.Now())
	holder := lease.Status.HolderIdentity
	if left <= 0 || (holder == "" && len(lease.Spec.Requests) == 0) {
		return 0
	}
	if i := coordv1alpha1.RequestIndex(lease.Spec.Requests, holder); holder != "" && i >= 0 && lease.Spec.Requests[i].RenewSequence > 0 {
		return 0
	}
	return left
}

// waitChange waits for a change of the lease, a release request, or d.
func (e *Elector) waitChange(ctx context.Context, d time.Duration) {
	t := e.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-e.view.changed:
	case <-t.C():
	case done := <-e.release:
		done <- nil
	}
}

// create creates the FencedLease with the API's defaults (CreateIfMissing).
// Creating grants nothing: the candidates that raced to create it queue on it
// like on any lease (the loser's AlreadyExists is followed by a read), and
// only the controller grants, one holder at a time.
func (e *Elector) create(ctx context.Context) error {
	lease := &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: e.key.Namespace, Name: e.key.Name}}
	err := e.cfg.Client.Create(ctx, lease)
	switch {
	case err == nil:
		logf.FromContext(ctx).Info("Created the FencedLease (CreateIfMissing)", "lease", e.key, "identity", e.cfg.Identity)
		e.view.offer(lease)
		return nil
	case apierrors.IsAlreadyExists(err):
		return e.view.refresh(ctx)
	}
	e.problems.failed("create", err)
	return fmt.Errorf("creating %s: %w", e.key, err)
}

// join appends this identity's request, with an optimistic lock.
func (e *Elector) join(ctx context.Context, lease *coordv1alpha1.FencedLease) error {
	req := coordv1alpha1.LeaseRequest{HolderIdentity: e.cfg.Identity, User: e.cfg.User}
	if e.hb != nil {
		if err := e.hb.ensure(ctx, e.cfg.User); err != nil {
			return err
		}
		req.Heartbeat = e.hb.Name
	}
	updated := lease.DeepCopy()
	updated.Spec.Requests = append(updated.Spec.Requests, req)
	if err := e.cfg.Client.Update(ctx, updated); err != nil {
		return fmt.Errorf("queueing request for %s: %w", e.key, err)
	}
	e.own.Appended(updated.Spec.Requests[len(updated.Spec.Requests)-1])
	e.view.offer(updated)
	return nil
}

// lead runs one tenure, from the acknowledging renewal to its end. It
// returns true when the tenure ended by a step-down (StepDown: a write was
// refused as stale).
func (e *Elector) lead(ctx context.Context, lease *coordv1alpha1.FencedLease) (steppedDown bool) {
	log := logf.FromContext(ctx).WithValues("lease", e.key, "identity", e.cfg.Identity)
	token := lease.Status.FencingToken
	// The grant is acknowledged by a renewal: its send time starts the local clock.
	sent, acked, err := e.renew(ctx, lease, token)
	if err != nil && !errors.Is(err, ErrLost) {
		// Most often the request moved (its JSON patch test failed): read the
		// lease again and retry at once, once.
		if e.view.refresh(ctx) == nil {
			if cur, _ := e.view.get(); cur != nil {
				sent, acked, err = e.renew(ctx, cur, token)
			}
		}
	}
	if err != nil {
		log.V(1).Info("Could not acknowledge grant", "token", token, "error", err.Error())
		if !errors.Is(err, ErrLost) {
			// Not leading yet: back off like the other retries of a candidate.
			e.problems.failed("acknowledge", err)
			sleep(ctx, e.clock, e.retry.step())
		}
		_ = e.view.refresh(ctx)
		return
	}
	lease = acked
	e.retry.reset()
	l := time.Duration(lease.Status.LeaseDurationSeconds) * time.Second
	cfg := e.cfg.published(&lease.Status) // the operator's skew and commit lag
	renewEvery, retryEvery, _, err := cfg.timings(l)
	if err != nil {
		log.Error(err, "Cannot hold lease with this configuration")
		_ = e.withdraw(ctx)
		sleep(ctx, e.clock, l)
		return
	}
	// timings accepted l, and so does Deadline.
	until := func(sent time.Time) time.Time { d, _ := cfg.Deadline(sent, l); return d }
	e.setLeading(true, token, until(sent))
	leadCtx, cancel := context.WithCancel(ctx)
	renewed := make(chan struct{}, 1)
	go e.watchdog(leadCtx, cancel, renewed)
	log.Info("Started leading", "token", token)
	go e.cfg.Callbacks.OnStartedLeading(leadCtx, token)

	select { // a step-down asked for before this tenure does not end it
	case <-e.stepDown:
	default:
	}
	var releaseDone chan error
	defer func() {
		cancel()
		e.setLeading(false, 0, time.Time{})
		if e.cfg.Callbacks.OnStoppedLeading != nil {
			e.cfg.Callbacks.OnStoppedLeading(token)
		}
		log.Info("Stopped leading", "token", token)
		if releaseDone != nil || ctx.Err() != nil {
			err := e.withdraw(context.WithoutCancel(ctx))
			if releaseDone != nil {
				e.mu.Lock()
				e.released = e.clock.Now()
				e.mu.Unlock()
			}
			if releaseDone != nil {
				releaseDone <- err
			}
		}
	}()

	// due is when the next renewal (or retry) is sent: a wake-up for
	// anything else (a change of the lease) leaves it where it is, or a
	// lease that changes more often than renewEvery would never be renewed.
	due := e.clock.Now().Add(renewEvery)
	for {
		deadline := e.Deadline()
		now := e.clock.Now()
		if !now.Before(deadline) {
			log.Info("Local deadline passed without a successful renewal", "token", token)
			return
		}
		timer := e.clock.NewTimer(max(0, min(due.Sub(now), deadline.Sub(now))))
		select {
		case <-leadCtx.Done():
			// Run's context ended, or the watchdog saw the deadline pass.
			timer.Stop()
			return
		case releaseDone = <-e.release:
			timer.Stop()
			cancel()
			return
		case <-e.stepDown:
			timer.Stop()
			log.Info("Stepping down: a write was refused as stale", "token", token)
			if e.hbShared {
				if err := e.detach(ctx); err != nil {
					log.Error(err, "The session heartbeat may go on renewing this tenure until it is withdrawn")
				}
			}
			return true
		case <-e.view.changed:
			timer.Stop()
			cur, _ := e.view.get()
			if cur == nil || cur.Status.HolderIdentity != e.cfg.Identity || cur.Status.FencingToken != token {
				log.Info("Lease is no longer ours", "token", token)
				return
			}
			if i := coordv1alpha1.RequestIndex(cur.Spec.Requests, e.cfg.Identity); i >= 0 && !e.own.Owns(cur.Spec.Requests[i]) {
				// Someone else renewed our request: a second process holds
				// this tenure with us. Step down at once; the request is not
				// ours to renew or withdraw any more.
				log.Info("Stepping down: another process renewed this identity's request", "token", token,
					"reason", e.own.NotOwn(cur, e.cfg.Identity).Error())
				e.own.Disown()
				return true
			}
		case <-timer.C():
			if !e.clock.Now().Before(e.Deadline()) {
				continue
			}
			cur, _ := e.view.get()
			if cur == nil {
				return
			}
			// A renewal may not outlive the deadline it is trying to extend.
			rctx, rcancel := context.WithTimeout(leadCtx, e.Deadline().Sub(e.clock.Now()))
			var sent time.Time
			var err error
			if e.beats(cur) {
				sent, err = e.beat(rctx, cur, token, renewEvery)
			} else {
				sent, _, err = e.renew(rctx, cur, token)
			}
			rcancel()
			switch {
			case err == nil:
				if d := until(sent); d.After(e.Deadline()) {
					e.setLeading(true, token, d)
				}
				select {
				case renewed <- struct{}{}:
				default:
				}
				due = e.clock.Now().Add(renewEvery)
			case errors.Is(err, ErrLost):
				log.Info("Renewal refused: lease lost", "token", token)
				return
			default:
				// Counted and logged, but retried every RetryInterval, never
				// backed off: the deadline decides when the tenure ends.
				e.problems.failed("renew", err)
				log.V(1).Info("Renewal failed; retrying", "token", token, "error", err.Error())
				_ = e.view.refresh(ctx)
				due = e.clock.Now().Add(retryEvery)
			}
		}
	}
}

// watchdog cancels the holder's context when the local deadline passes. It
// runs apart from the renewal loop so that a renewal stuck in the network (or a
// slow callback) cannot hold the deadline back.
func (e *Elector) watchdog(ctx context.Context, cancel context.CancelFunc, renewed <-chan struct{}) {
	for {
		deadline := e.Deadline()
		if deadline.IsZero() {
			return
		}
		wait := deadline.Sub(e.clock.Now())
		if e.boot != nil && wait > bootPoll {
			// Timers count on the monotonic clock, which stands still while the
			// machine is suspended: look at CLOCK_BOOTTIME every bootPoll too.
			wait = bootPoll
		}
		t := e.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-renewed:
			t.Stop()
		case <-t.C():
			if !e.clock.Now().Before(e.Deadline()) || e.bootExpired() {
				cancel()
				return
			}
		}
	}
}

func (e *Elector) setLeading(leading bool, token int64, deadline time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if leading != e.leading || token != e.token {
		e.cfg.Metrics.setLeading(e.key.Namespace, e.key.Name, leading, token)
	}
	e.leading, e.token, e.deadline = leading, token, deadline
	if leading && e.boot != nil {
		// deadline = sent + (L - margin); the same span on CLOCK_BOOTTIME.
		e.bootDeadline = e.sentBoot + deadline.Sub(e.lastSent)
	}
}

// bootExpired tells whether the deadline passed on CLOCK_BOOTTIME (the machine
// was suspended) while the monotonic clock says it has not.
func (e *Elector) bootExpired() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leading && e.boot != nil && e.boot() >= e.bootDeadline
}

// Writes counts the FencedClient writes of this Elector in flight: a release
// withdraws the request only after they returned (Writes.Quiesce).
func (e *Elector) Writes() *Writes { return &e.writes }

// renew raises this identity's renewSequence with one JSON patch that first
// tests the request is exactly as last seen. It returns the time the patch was
// sent. The answer must still name this identity with token, or ErrLost.
func (e *Elector) renew(ctx context.Context, lease *coordv1alpha1.FencedLease, token int64) (time.Time, *coordv1alpha1.FencedLease, error) {
	idx := coordv1alpha1.RequestIndex(lease.Spec.Requests, e.cfg.Identity)
	if idx < 0 || lease.Status.HolderIdentity != e.cfg.Identity || lease.Status.FencingToken != token {
		return time.Time{}, nil, ErrLost
	}
	// renewTime is a wall-clock time for the API server's side (the webhook
	// compares it with its own clock); the deadline counts on e.clock.
	patch, err := e.own.RenewPatch(lease, e.cfg.Identity, time.Now())
	if errors.Is(err, protocol.ErrNotOwnRequest) {
		return time.Time{}, nil, fmt.Errorf("%w: %w", ErrLost, err)
	}
	if err != nil {
		return time.Time{}, nil, err
	}
	updated := lease.DeepCopy()
	sent := e.clock.Now()
	var sentBoot time.Duration
	if e.boot != nil {
		sentBoot = e.boot()
	}
	err = e.cfg.Client.Patch(ctx, updated, patch)
	took := e.clock.Since(sent)
	if err != nil {
		if apierrors.IsNotFound(err) {
			e.cfg.Metrics.observeRenewal(e.key.Namespace, e.key.Name, RenewalLost, took)
			return time.Time{}, nil, ErrLost
		}
		e.cfg.Metrics.observeRenewal(e.key.Namespace, e.key.Name, RenewalError, took)
		return time.Time{}, nil, fmt.Errorf("renewing %s: %w", e.key, err)
	}
	e.own.Renewed(updated, e.cfg.Identity)
	e.view.offer(updated)
	if updated.Status.HolderIdentity != e.cfg.Identity || updated.Status.FencingToken != token {
		e.cfg.Metrics.observeRenewal(e.key.Namespace, e.key.Name, RenewalLost, took)
		return time.Time{}, nil, ErrLost
	}
	e.cfg.Metrics.observeRenewal(e.key.Namespace, e.key.Name, RenewalOK, took)
	e.mu.Lock()
	e.lastSent, e.sentBoot = sent, sentBoot
	e.mu.Unlock()
	return sent, updated, nil
}

// withdraw removes this Elector's own request, if it is there, once every
// FencedClient write sent with its token has returned (Writes.Quiesce): the
// controller grants the next request at once. After a write of the tenure
// that returned without an answer (it may still be admitted, and commit) it
// keeps the request instead and disowns it: the tenure expires, and Run
// queues a new request once the controller removed it. A request of this
// identity that another process made or renewed stays: withdrawing it would
// end that process's tenure without waiting for its writes.
func (e *Elector) withdraw(ctx context.Context) error {
	if e.cfg.DisableReleaseOnCancel {
		return nil
	}
	lease, _ := e.view.get()
	if lease == nil || e.own.WithdrawPatch(lease, e.cfg.Identity) == nil {
		return nil
	}
	l := time.Duration(lease.Status.LeaseDurationSeconds) * time.Second
	if l == 0 {
		l = time.Duration(lease.Spec.LeaseDurationSeconds) * time.Second
	}
	var token int64
	if lease.Status.HolderIdentity == e.cfg.Identity {
		token = lease.Status.FencingToken
	}
	if !e.writes.Quiesce(ctx, e.clock, l, token) {
		logf.FromContext(ctx).Info("Keeping the request: a write with this tenure's token ended without an answer and may still be admitted; "+
			"the tenure expires instead of being handed over at once", "lease", e.key, "identity", e.cfg.Identity, "token", token)
		e.own.Disown()
		return nil
	}
	for attempt := 0; attempt < 5; attempt++ {
		lease, _ := e.view.get()
		if lease == nil {
			return nil
		}
		patch := e.own.WithdrawPatch(lease, e.cfg.Identity)
		if patch == nil {
			return nil
		}
		updated := lease.DeepCopy()
		err := e.cfg.Client.Patch(ctx, updated, patch)
		if err == nil || apierrors.IsNotFound(err) {
			e.own.Disown()
			if err == nil {
				e.view.offer(updated)
			}
			return nil
		}
		e.problems.failed("withdraw", err)
		if rerr := e.view.refresh(ctx); rerr != nil {
			return fmt.Errorf("withdrawing request from %s: %w", e.key, err)
		}
	}
	return fmt.Errorf("withdrawing request from %s: the lease kept changing", e.key)
}
