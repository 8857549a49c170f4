package resourcelock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	rl "k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence"
	"github.com/kubefence/kubefence/pkg/fence/protocol"
	"github.com/kubefence/kubefence/pkg/fence/timing"
)

// ErrNotGranted is returned (wrapped) by Update while this identity's request
// waits in the queue: the controller has not granted it the lease.
var ErrNotGranted = errors.New("fenced lease not granted to this identity")

// Config configures a Lock.
type Config struct {
	// Client reads and patches the FencedLease. It must know the
	// coordination.kubefence.io scheme (and authentication.k8s.io/v1 when User is
	// empty), and should read from the API server, not from a cache
	// (client.New, not a manager's client). Required.
	Client client.Client

	// Namespace and Name locate the FencedLease, which must exist. Required.
	Namespace, Name string

	// Identity is this candidate's holderIdentity: lowercase letters, digits, '-',
	// '.', '_' and ':', at most 128 characters. Required.
	Identity string

	// User is this client's Kubernetes username, recorded in its request. Empty:
	// asked from the API server (SelfSubjectReview) at the first write.
	User string

	// SafetyMargin is subtracted from the lease duration when the Lock computes
	// the deadline of a token. Default and least as fence.Config's
	// (timing.Margin, with the skew and commit lag the lease publishes).
	SafetyMargin time.Duration

	// EventRecorder records the elector's events on the FencedLease. Optional.
	EventRecorder rl.EventRecorder

	// MaxCommitLag is how long the API server may take to commit a write it
	// admitted; it enters the token deadline's margin (pkg/fence/timing). The
	// lease's published commit lag counts if larger (timing.Bound); default
	// timing.DefaultCommitLag. (A release no longer waits it out: after a
	// write without an answer it keeps the request and lets the tenure expire,
	// fence.Writes.Quiesce.) Negative: refused.
	MaxCommitLag time.Duration

	// Clock measures token deadlines; it must be monotonic. Default: the real
	// clock. A release's waits use its timers when it is a clock.Clock, the
	// real clock's otherwise.
	Clock clock.PassiveClock
}

// Lock is a client-go resourcelock.Interface backed by a FencedLease. See the
// package documentation for how it maps client-go's model.
type Lock struct {
	cfg   Config
	clock clock.PassiveClock
	// timers is clock when it is a clock.Clock, else the real clock: a
	// release's waits.
	timers clock.Clock
	key    types.NamespacedName

	// writes counts the writes of Client in flight; its lock is taken before
	// mu (Writes.Begin reads Token under it), never after.
	writes fence.Writes

	// op serialises Get, Create and Update, which share the last version seen
	// and own.
	op sync.Mutex
	// own is this Lock's own request, the only one it renews and withdraws
	// (a request of its identity another process made or renewed is not).
	own protocol.OwnRequest

	mu       sync.Mutex
	lease    *coordv1alpha1.FencedLease // the newest version seen; nil before the first read
	token    int64                      // token of the current grant; 0 when none
	deadline time.Time                  // Token is valid before it
	refused  int64                      // a stale refusal was seen with this token: never renew it again
}

var (
	_ rl.Interface       = (*Lock)(nil)
	_ fence.WriteCounter = (*Lock)(nil)
)

// New validates cfg and returns a Lock. Nothing is sent to the API server
// until the elector calls it.
func New(cfg Config) (*Lock, error) {
	errs := protocol.ValidateClientConfig(cfg.Client, cfg.Namespace, cfg.Name, cfg.Identity)
	for name, d := range map[string]time.Duration{"SafetyMargin": cfg.SafetyMargin, "MaxCommitLag": cfg.MaxCommitLag} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s is %v: expected a positive duration, or 0 for the default", name, d))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("invalid resourcelock.Config: %w", err)
	}
	c := cfg.Clock
	if c == nil {
		c = clock.RealClock{}
	}
	timers, ok := c.(clock.Clock)
	if !ok {
		timers = clock.RealClock{}
	}
	return &Lock{cfg: cfg, clock: c, timers: timers, key: types.NamespacedName{Namespace: cfg.Namespace, Name: cfg.Name}}, nil
}

// Identity returns the holder identity this Lock competes as.
func (l *Lock) Identity() string { return l.cfg.Identity }

// Describe names the FencedLease, as namespace/name.
func (l *Lock) Describe() string { return l.key.String() }

// Token returns the fencing token of the current grant while this identity
// holds the lease and the local deadline of its last renewal has not passed.
func (l *Lock) Token() (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.token == 0 || !l.clock.Now().Before(l.deadline) {
		return 0, false
	}
	return l.token, true
}

// Client returns a FencedClient stamping this Lock's token on every write. A
// write refused as stale makes the Lock refuse to renew that token, so the
// elector stops leading within its RenewDeadline. Its writes are counted in
// flight (Writes): a release withdraws the request only after they returned.
func (l *Lock) Client(c client.Client) *fence.FencedClient {
	return fence.NewFencedClient(c, l.cfg.Name, l, fence.ClientConfig{OnStale: func(error) { l.stepDown() }, Namespace: l.cfg.Namespace})
}

// Writes counts the writes of Client in flight: a release withdraws the
// request only after they returned (fence.Writes.Quiesce).
func (l *Lock) Writes() *fence.Writes { return &l.writes }

// stepDown drops the current token and refuses to renew it again.
func (l *Lock) stepDown() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refused = max(l.refused, l.token)
	l.token, l.deadline = 0, time.Time{}
}

// RecordEvent records an elector event on the FencedLease.
func (l *Lock) RecordEvent(s string) {
	if l.cfg.EventRecorder == nil {
		return
	}
	subject := &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: l.key.Namespace, Name: l.key.Name}}
	if lease := l.cached(); lease != nil {
		subject.ObjectMeta = lease.ObjectMeta
	}
	subject.Kind = "FencedLease"
	subject.APIVersion = coordv1alpha1.GroupVersion.String()
	l.cfg.EventRecorder.Eventf(subject, corev1.EventTypeNormal, "LeaderElection", "%s %s", l.cfg.Identity, s)
}

// rawRecord is what the elector compares to tell that the lease changed: the
// record plus the token, so that every grant and every renewal the controller
// observed is a change.
type rawRecord struct {
	rl.LeaderElectionRecord
	FencingToken int64 `json:"fencingToken"`
}

// Get reads the FencedLease and returns a record of its status. A missing
// lease is returned as the API server's NotFound error.
func (l *Lock) Get(ctx context.Context) (*rl.LeaderElectionRecord, []byte, error) {
	l.op.Lock()
	defer l.op.Unlock()
	lease, err := l.read(ctx)
	if err != nil {
		return nil, nil, err
	}
	rec := RecordOf(lease)
	raw, err := json.Marshal(rawRecord{LeaderElectionRecord: rec, FencingToken: lease.Status.FencingToken})
	if err != nil {
		return nil, nil, err
	}
	return &rec, raw, nil
}

// RecordOf is the LeaderElectionRecord a FencedLease's status amounts to. All
// times are the controller's.
func RecordOf(lease *coordv1alpha1.FencedLease) rl.LeaderElectionRecord {
	st := lease.Status
	d := st.LeaseDurationSeconds
	if d == 0 || st.HolderIdentity == "" {
		d = lease.Spec.LeaseDurationSeconds
	}
	rec := rl.LeaderElectionRecord{
		HolderIdentity:       st.HolderIdentity,
		LeaseDurationSeconds: int(d),
		LeaderTransitions:    int(st.LeaseTransitions),
	}
	if st.AcquireTime != nil {
		rec.AcquireTime = metav1.NewTime(st.AcquireTime.Time)
	}
	if st.RenewTime != nil {
		rec.RenewTime = metav1.NewTime(st.RenewTime.Time)
	}
	return rec
}

// Create is called by the elector when Get found no FencedLease. It does not
// create one (platform teams do, and choose its duration): if the lease exists
// by now it queues or renews like Update, otherwise it returns the NotFound
// error.
func (l *Lock) Create(ctx context.Context, ler rl.LeaderElectionRecord) error {
	l.op.Lock()
	defer l.op.Unlock()
	if _, err := l.read(ctx); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("FencedLease %s does not exist: create it before electing (clients cannot): %w", l.key, err)
		}
		return err
	}
	return l.update(ctx, ler)
}

// Update queues this identity's request, or renews it; it succeeds only while
// the controller has granted this identity the lease. A record without a
// holder (the elector's release) withdraws the request. The record's times
// and duration are ignored: the controller decides them.
func (l *Lock) Update(ctx context.Context, ler rl.LeaderElectionRecord) error {
	l.op.Lock()
	defer l.op.Unlock()
	return l.update(ctx, ler)
}

func (l *Lock) update(ctx context.Context, ler rl.LeaderElectionRecord) error {
	if ler.HolderIdentity != "" && ler.HolderIdentity != l.cfg.Identity {
		return fmt.Errorf("lock %s competes as %q and cannot write a record for %q", l.key, l.cfg.Identity, ler.HolderIdentity)
	}
	lease := l.cached()
	if lease == nil {
		var err error
		if lease, err = l.read(ctx); err != nil {
			return err
		}
	}
	// The fast path works on the last version seen; if a test or an optimistic
	// lock fails because it moved on, read it again once.
	for attempt := 0; ; attempt++ {
		var err error
		if ler.HolderIdentity == "" {
			err = l.withdraw(ctx, lease)
		} else {
			err = l.acquireOrRenew(ctx, lease)
		}
		if attempt > 0 || !(apierrors.IsConflict(err) || apierrors.IsInvalid(err)) {
			return err
		}
		if lease, err = l.read(ctx); err != nil {
			return err
		}
	}
}

func (l *Lock) acquireOrRenew(ctx context.Context, lease *coordv1alpha1.FencedLease) error {
	idx := coordv1alpha1.RequestIndex(lease.Spec.Requests, l.cfg.Identity)
	if idx < 0 {
		if lease.Status.HolderIdentity == l.cfg.Identity {
			// Queue again only once the controller no longer lists us as holder, so
			// that a new request is never mistaken for the tenure that just ended.
			return fmt.Errorf("%w: %s still names %q as holder after its request was withdrawn", ErrNotGranted, l.key, l.cfg.Identity)
		}
		return l.join(ctx, lease)
	}
	if !l.own.Owns(lease.Spec.Requests[idx]) {
		// Another process uses this identity (or this identity's previous
		// process left its request): neither the request nor a tenure granted
		// to it is ours. Wait until it is gone, then queue our own.
		return fmt.Errorf("%w: %w; waiting until it is gone", ErrNotGranted, l.own.NotOwn(lease, l.cfg.Identity))
	}
	if lease.Status.HolderIdentity != l.cfg.Identity {
		return fmt.Errorf("%w: %s is held by %q; the request of %q is queued", ErrNotGranted, l.key, lease.Status.HolderIdentity, l.cfg.Identity)
	}
	token := lease.Status.FencingToken
	l.mu.Lock()
	refused := l.refused
	l.mu.Unlock()
	if token <= refused {
		return fmt.Errorf("%w: a write with token %d of %s was refused as stale; waiting for a newer grant", fence.ErrLost, token, l.key)
	}

	// Renew (or acknowledge the grant): raise our renewSequence, testing that the
	// request is exactly as last seen.
	patch, err := l.own.RenewPatch(lease, l.cfg.Identity, time.Now())
	if err != nil {
		return err
	}
	updated := lease.DeepCopy()
	sent := l.clock.Now()
	if err := l.cfg.Client.Patch(ctx, updated, patch); err != nil {
		if apierrors.IsNotFound(err) {
			l.forget()
		}
		return fmt.Errorf("renewing the request of %q in %s: %w", l.cfg.Identity, l.key, err)
	}
	l.own.Renewed(updated, l.cfg.Identity)
	l.seen(updated)
	if updated.Status.HolderIdentity != l.cfg.Identity || updated.Status.FencingToken != token {
		return fmt.Errorf("%w: %s is now held by %q with token %d", fence.ErrLost, l.key, updated.Status.HolderIdentity, updated.Status.FencingToken)
	}
	d := time.Duration(updated.Status.LeaseDurationSeconds) * time.Second
	skew := timing.Bound(0, updated.Status.ClockSkewMilliseconds, timing.DefaultSkew)
	lag := timing.Bound(l.cfg.MaxCommitLag, updated.Status.MaxCommitLagMilliseconds, timing.DefaultCommitLag)
	margin, err := timing.Margin(d, l.cfg.SafetyMargin, skew, lag)
	if err != nil {
		return fmt.Errorf("%s: %w", l.key, err)
	}
	l.mu.Lock()
	l.token, l.deadline = token, timing.Deadline(sent, d, margin)
	l.mu.Unlock()
	return nil
}

// join appends this identity's request, with an optimistic lock. It never
// reports success: the controller grants later.
func (l *Lock) join(ctx context.Context, lease *coordv1alpha1.FencedLease) error {
	if l.cfg.User == "" {
		user, err := protocol.WhoAmI(ctx, l.cfg.Client)
		if err != nil {
			return fmt.Errorf("%w (set Config.User to skip)", err)
		}
		l.cfg.User = user
	}
	updated := lease.DeepCopy()
	updated.Spec.Requests = append(updated.Spec.Requests, coordv1alpha1.LeaseRequest{HolderIdentity: l.cfg.Identity, User: l.cfg.User})
	if err := l.cfg.Client.Update(ctx, updated); err != nil {
		if apierrors.IsConflict(err) {
			return err
		}
		return fmt.Errorf("queueing the request of %q in %s: %w", l.cfg.Identity, l.key, err)
	}
	l.own.Appended(updated.Spec.Requests[len(updated.Spec.Requests)-1])
	l.seen(updated)
	return fmt.Errorf("%w: queued the request of %q in %s", ErrNotGranted, l.cfg.Identity, l.key)
}

// withdraw drops the token, waits until every write of Client sent with it
// has returned, then removes this Lock's own request, releasing the lease if
// held: the controller grants the next request at once. After a write of the
// tenure that returned without an answer (it may still be admitted, and
// commit) it keeps the request instead and disowns it, so the tenure expires
// (fence.Writes.Quiesce). A request of this identity that another process
// made or renewed stays: withdrawing it would end that process's tenure
// without waiting for its writes.
func (l *Lock) withdraw(ctx context.Context, lease *coordv1alpha1.FencedLease) error {
	l.forget()
	patch := l.own.WithdrawPatch(lease, l.cfg.Identity)
	if patch == nil {
		return nil
	}
	d := lease.Status.LeaseDurationSeconds
	if d == 0 {
		d = lease.Spec.LeaseDurationSeconds
	}
	var token int64
	if lease.Status.HolderIdentity == l.cfg.Identity {
		token = lease.Status.FencingToken
	}
	if !l.writes.Quiesce(ctx, l.timers, time.Duration(d)*time.Second, token) {
		l.own.Disown()
		l.RecordEvent(fmt.Sprintf("kept its request: a write with token %d ended without an answer and may still be admitted; the tenure expires instead", token))
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("withdrawing the request of %q from %s: gave up waiting for the writes in flight: %w", l.cfg.Identity, l.key, err)
	}
	updated := lease.DeepCopy()
	if err := l.cfg.Client.Patch(ctx, updated, patch); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		if apierrors.IsConflict(err) || apierrors.IsInvalid(err) {
			return err
		}
		return fmt.Errorf("withdrawing the request of %q from %s: %w", l.cfg.Identity, l.key, err)
	}
	l.seen(updated)
	return nil
}

// read gets the FencedLease from the API server and records it.
func (l *Lock) read(ctx context.Context) (*coordv1alpha1.FencedLease, error) {
	var lease coordv1alpha1.FencedLease
	if err := l.cfg.Client.Get(ctx, l.key, &lease); err != nil {
		if apierrors.IsNotFound(err) {
			l.forget()
			l.mu.Lock()
			l.lease = nil
			l.mu.Unlock()
		}
		return nil, err
	}
	l.seen(&lease)
	return &lease, nil
}

// seen records a version of the lease and drops the token if that version no
// longer names this identity with it. A request of this Lock's that changed
// without its doing (another process with its identity renewed it) makes it
// step down and disown the request. Callers hold op.
func (l *Lock) seen(lease *coordv1alpha1.FencedLease) {
	l.own.Observe(lease, l.cfg.Identity)
	coHolder := false
	if i := coordv1alpha1.RequestIndex(lease.Spec.Requests, l.cfg.Identity); i >= 0 && l.own.Made() && !l.own.Owns(lease.Spec.Requests[i]) {
		coHolder = true
		l.own.Disown()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lease = lease
	if coHolder {
		l.refused = max(l.refused, l.token)
	}
	if l.token != 0 && (coHolder || lease.Status.HolderIdentity != l.cfg.Identity || lease.Status.FencingToken != l.token) {
		l.token, l.deadline = 0, time.Time{}
	}
}

func (l *Lock) forget() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.token, l.deadline = 0, time.Time{}
}

func (l *Lock) cached() *coordv1alpha1.FencedLease {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lease
}
