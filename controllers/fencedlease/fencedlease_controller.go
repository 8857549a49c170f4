package fencedlease

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/metrics"
)

// DefaultMaxConcurrentReconciles is how many leases the controller decides at
// once. A reconcile is mostly waiting for one API write (a grant, an expiry),
// so after a mass fail-over (hundreds of leases expiring within one renewal
// interval) the grants are bounded by workers / write latency: a 500-lease
// fail-over needs about a thousand writes (grant, expired request removed)
// within the renewal interval, and the API server takes 0.2 to 0.6 s a write
// under that load, so 16 workers left grants waiting 6 s for one
// (docs/benchmarks.md, "Scale"). Workers cost a goroutine each; the API
// server's flow control, not this number, bounds what it runs at once.
const DefaultMaxConcurrentReconciles = 64

// Event reasons.
const (
	EventGranted    = "Granted"
	EventHandedOver = "HandedOver"
	EventTakenOver  = "TakenOver"
	EventExpired    = "Expired"
	EventReleased   = "Released"
)

// FencedLeaseReconciler grants, renews, expires and hands over FencedLeases.
type FencedLeaseReconciler struct {
	client.Client
	// Clock is the controller's clock: the only one that decides expiry.
	Clock clock.Clock
	// Recorder emits events.k8s.io/v1 Events.
	Recorder events.EventRecorder
	// Epochs carries tokens across delete-then-recreate.
	Epochs *EpochStore
	// Timing is the expiry arithmetic.
	Timing Timing
	// MaxConcurrentReconciles bounds parallel reconciles (default
	// DefaultMaxConcurrentReconciles).
	MaxConcurrentReconciles int
	// APIReader reads a lease from the API server after a write conflicted: the
	// cache is then known to be behind (default: the manager's API reader).
	APIReader client.Reader
	// MaxRetryDelay caps the backoff after a failed reconcile (default 1 s), so
	// that leases move again soon after an API server or etcd outage.
	MaxRetryDelay time.Duration
	// Tenures, in policy mode, is told of every grant before it is written
	// and of every other tenure change after (nil in webhook mode).
	Tenures TenureTable
	// Heartbeats holds this controller's sightings of heartbeat Leases
	// (default: a new tracker, fed by an informer SetupWithManager adds).
	Heartbeats *HeartbeatTracker

	mu       sync.Mutex
	memories map[types.UID]Memory
}

// +kubebuilder:rbac:groups=coordination.kubefence.io,resources=fencedleases,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=coordination.kubefence.io,resources=fencedleases/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=coordination.kubefence.io,resources=fencedleases/finalizers,verbs=update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile moves one FencedLease one or more steps forward: record a renewal,
// expire a silent holder, record a release, grant the next request.
func (r *FencedLeaseReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	var lease coordv1alpha1.FencedLease
	if err := r.Get(ctx, req.NamespacedName, &lease); err != nil {
		if apierrors.IsNotFound(err) {
			metrics.Forget(req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !lease.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.finalize(ctx, &lease)
	}
	if !controllerutil.ContainsFinalizer(&lease, coordv1alpha1.EpochFinalizer) {
		controllerutil.AddFinalizer(&lease, coordv1alpha1.EpochFinalizer)
		if err := r.Update(ctx, &lease); err != nil {
			return r.retryOnConflict(err)
		}
	}

	if err := r.syncTenure(ctx, &lease); err != nil {
		return ctrl.Result{}, err
	}

	var stored int64
	if lease.Status.ObservedGeneration == 0 {
		var err error
		if stored, err = r.Epochs.Get(ctx, lease.Namespace, lease.Name); err != nil {
			return ctrl.Result{}, err
		}
	}

	// Write until there is nothing left to decide: at most an expiry-and-grant,
	// the removal of the expired request, and (rarely) one more of each. A
	// conflict means the cache is behind: read the lease from the API server
	// and decide again, rather than wait for a watch that can lag for seconds
	// after an outage.
	conflicts := 0
	for range 5 {
		now := r.Clock.Now()
		mem := r.memory(lease.UID)
		step, err := Decide(&lease, mem.WithHeartbeat(r.heartbeatFor(&lease, mem)), stored, now, r.Timing)
		if err == nil && step.NeedsLiveHeartbeat() {
			// Ending a heartbeat tenure: only on a quorum read of the
			// heartbeat (docs/design.md, "Heartbeats").
			live, rerr := r.readHeartbeat(ctx, lease.Namespace, HeartbeatName(&lease, mem))
			if rerr != nil {
				return ctrl.Result{}, rerr
			}
			now = r.Clock.Now()
			step, err = Decide(&lease, mem.WithHeartbeat(&live), stored, now, r.Timing)
		}
		if err != nil {
			log.Error(err, "Refusing to grant", "lease", req.NamespacedName)
			return ctrl.Result{}, err
		}
		updated, statusWrite := step.Write(&lease)
		if updated == nil {
			r.setMemory(lease.UID, step.Remember(false, now))
			if step.Renewed() {
				// A stamped renewal, tracked in memory only (no status write).
				metrics.Renewed(lease.Namespace, lease.Name)
			}
			return ctrl.Result{RequeueAfter: step.RequeueAfter()}, nil
		}
		if statusWrite {
			err = r.writeStatus(ctx, &lease, updated)
		} else {
			err = r.removeExpired(ctx, updated, step.d.removeRequest)
		}
		if err != nil {
			if r.rereadAfterConflict(ctx, err, &lease, &conflicts) {
				continue
			}
			return r.retryOnConflict(err)
		}
		lease = *updated
		r.setMemory(lease.UID, step.Remember(true, r.Clock.Now()))
		if late, ok := step.ExpiredLate(); ok {
			metrics.ExpiryDecided(late)
		}
		if statusWrite {
			r.report(ctx, &lease, step.d)
		}
	}
	return ctrl.Result{RequeueAfter: time.Millisecond}, nil
}

// removeExpired sends a decision's request removal (decision.apply): the
// expired holder's request gone and the removal recorded in the expired
// annotation, in one optimistic-locked write: if the holder renewed meanwhile
// the write conflicts and the next reconcile sees the renewal.
func (r *FencedLeaseReconciler) removeExpired(ctx context.Context, updated *coordv1alpha1.FencedLease, holder string) error {
	if err := r.Update(ctx, updated); err != nil {
		return fmt.Errorf("removing expired request of %s: %w", holder, err)
	}
	return nil
}

// finalize records the lease's highest token in the epoch store, then lets the
// deletion proceed. The finalizer is removed with an optimistic lock, so a grant
// written after the token was read makes the removal conflict and repeat.
func (r *FencedLeaseReconciler) finalize(ctx context.Context, lease *coordv1alpha1.FencedLease) error {
	if !controllerutil.ContainsFinalizer(lease, coordv1alpha1.EpochFinalizer) {
		return nil
	}
	high := EpochOf(lease)
	if err := r.Epochs.Record(ctx, lease.Namespace, lease.Name, high); err != nil {
		return err
	}
	if err := r.recordDeleted(ctx, lease, high); err != nil {
		return err
	}
	controllerutil.RemoveFinalizer(lease, coordv1alpha1.EpochFinalizer)
	if err := r.Update(ctx, lease); err != nil {
		return fmt.Errorf("removing the epoch finalizer: %w", err) // retried with backoff
	}
	r.setMemory(lease.UID, Memory{})
	logf.FromContext(ctx).Info("Recorded epoch of deleted lease", "lease", client.ObjectKeyFromObject(lease), "token", high)
	return nil
}

// report records a status write's changes of holder: metrics and a log line
// for each, and one Event for the write. A write that ends a tenure and grants
// the next is one change for the lease's readers (kubectl describe): its one
// Event is the grant's, naming how the previous tenure ended, so that a mass
// fail-over costs one Event per lease, not three
// (test/operator: "records one Event per tenure change").
func (r *FencedLeaseReconciler) report(ctx context.Context, lease *coordv1alpha1.FencedLease, d decision) {
	log := logf.FromContext(ctx)
	ns, name := lease.Namespace, lease.Name
	if d.renewed {
		metrics.Renewed(ns, name)
	}
	var age time.Duration
	if lease.Status.AcquireTime != nil {
		age = r.Clock.Since(lease.Status.AcquireTime.Time)
	}
	metrics.LeaseState(ns, name, lease.Status.FencingToken, age)
	var event *Transition
	ended := false
	for i, tr := range d.transitions {
		switch tr.Kind {
		case string(coordv1alpha1.EndReasonExpired):
			metrics.Expired(ns, name, tr.Tenure)
			log.Info("Lease expired", "lease", client.ObjectKeyFromObject(lease), "holder", tr.Previous, "token", tr.PreviousToken)
		case string(coordv1alpha1.EndReasonReleased):
			metrics.Released(ns, name, tr.Tenure)
			log.Info("Lease released", "lease", client.ObjectKeyFromObject(lease), "holder", tr.Previous, "token", tr.PreviousToken)
		default:
			metrics.Granted(ns, name, tr.Kind)
			log.Info("Lease granted", "lease", client.ObjectKeyFromObject(lease), "holder", tr.Holder, "token", tr.Token,
				"kind", tr.Kind, "previousHolder", tr.Previous, "previousToken", tr.PreviousToken)
		}
		// The grant, if the write made one, else the end of the tenure.
		if event == nil || tr.Holder != "" {
			event = &d.transitions[i]
		}
		ended = ended || tr.Holder == ""
	}
	if event != nil {
		eventType, reason, action, note := transitionEvent(*event, ended, lease.Status.LeaseDurationSeconds)
		r.Recorder.Eventf(lease, nil, eventType, reason, action, "%s", note)
	}
}

// transitionEvent is the Event of one status write's change of holder (see
// report): the grant's, naming the end of the previous tenure, or the end's
// alone. An expiry is one Warning: Expired, or TakenOver when the write that
// ended the tenure (ended) also granted the next; a later grant after an
// expiry is Normal. l is the lease duration in seconds of the tenure that
// expired.
func transitionEvent(tr Transition, ended bool, l int32) (eventType, reason, action, note string) {
	expired := func(holder string, token int64) string {
		return fmt.Sprintf("%s did not renew token %d within %ds", holder, token, l)
	}
	switch tr.Kind {
	case string(coordv1alpha1.EndReasonExpired):
		return corev1.EventTypeWarning, EventExpired, "Expire", expired(tr.Previous, tr.PreviousToken) + "; token expired"
	case string(coordv1alpha1.EndReasonReleased):
		return corev1.EventTypeNormal, EventReleased, "Release", fmt.Sprintf("%s released token %d", tr.Previous, tr.PreviousToken)
	}
	note = fmt.Sprintf("granted to %s with fencing token %d", tr.Holder, tr.Token)
	eventType = corev1.EventTypeNormal
	switch {
	case tr.Kind == EventTakenOver && ended:
		eventType = corev1.EventTypeWarning
		note = fmt.Sprintf("%s (previous holder %s)", note, expired(tr.Previous, tr.PreviousToken))
	case tr.Kind == EventTakenOver:
		note = fmt.Sprintf("%s (previous holder %s, token %d, expired)", note, tr.Previous, tr.PreviousToken)
	case tr.Previous != "":
		note = fmt.Sprintf("%s (previous holder %s, token %d)", note, tr.Previous, tr.PreviousToken)
	}
	return eventType, tr.Kind, "Grant", note
}

func (r *FencedLeaseReconciler) memory(uid types.UID) Memory {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.memories[uid]
}

func (r *FencedLeaseReconciler) setMemory(uid types.UID, m Memory) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.memories == nil {
		r.memories = map[types.UID]Memory{}
	}
	if m.obs == nil {
		delete(r.memories, uid)
		return
	}
	r.memories[uid] = m
}

// conflictRetry is how soon a reconcile whose write conflicted runs again. The
// watch normally brings the newer version first; after an API server outage
// watches can lag for seconds, so the retry does not wait for them.
const conflictRetry = 50 * time.Millisecond

// rereadAfterConflict reads the lease from the API server after the first
// conflict of a reconcile and tells whether the caller should decide again on
// it. A second conflict falls back to a short requeue.
func (r *FencedLeaseReconciler) rereadAfterConflict(ctx context.Context, err error, lease *coordv1alpha1.FencedLease, conflicts *int) bool {
	if !apierrors.IsConflict(err) || r.APIReader == nil || *conflicts > 0 {
		return false
	}
	*conflicts++
	var fresh coordv1alpha1.FencedLease
	if r.APIReader.Get(ctx, client.ObjectKeyFromObject(lease), &fresh) != nil {
		return false
	}
	if fresh.UID != lease.UID || !fresh.DeletionTimestamp.IsZero() {
		// Deleted or recreated: the next reconcile starts from the top (the
		// epoch store, the finalizer).
		return false
	}
	*lease = fresh
	return true
}

func (r *FencedLeaseReconciler) retryOnConflict(err error) (ctrl.Result, error) {
	if apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	}
	return ctrl.Result{}, err
}

// SetupWithManager registers the reconciler.
func (r *FencedLeaseReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = DefaultMaxConcurrentReconciles
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.MaxRetryDelay == 0 {
		r.MaxRetryDelay = time.Second
	}
	if r.Heartbeats == nil {
		r.Heartbeats = NewHeartbeatTracker()
	}
	if err := mgr.Add(&heartbeatInformer{cfg: mgr.GetConfig(), tracker: r.Heartbeats, clock: r.Clock}); err != nil {
		return fmt.Errorf("adding the heartbeat informer: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&coordv1alpha1.FencedLease{}).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: r.MaxConcurrentReconciles,
			// The default backoff grows to 16 minutes; a lease stuck that long
			// after an outage would be a liveness failure.
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, r.MaxRetryDelay),
		}).
		Named("fencedlease").
		Complete(r)
}
