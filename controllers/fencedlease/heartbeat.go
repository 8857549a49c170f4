package fencedlease

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// Heartbeat is what this controller knows of the heartbeat Lease a holder's
// request names (spec.requests[].heartbeat; docs/design.md, "Heartbeats"),
// handed to Decide with the lease (Memory.WithHeartbeat).
type Heartbeat struct {
	// Name is the Lease's name, in the FencedLease's namespace.
	Name string
	// Found: the Lease exists and carries coordv1alpha1.HeartbeatLabel.
	Found bool
	// Holder is its spec.holderIdentity, User its
	// coordv1alpha1.HeartbeatUserAnnotation.
	Holder, User string
	// RenewTime is its spec.renewTime (zero: none).
	RenewTime time.Time
	// Sighted is when this controller first saw that RenewTime, on its
	// clock: what a heartbeat renewal counts from.
	Sighted time.Time
	// Live: read from the API server for this decision (a quorum read), not
	// from the informer's cache.
	Live bool
}

// renews tells whether h may renew the tenure of holder granted to user: the
// Lease exists with the label, names the holder and was made by the
// granted request's user (the policy kubefence-heartbeats lets only that
// user write it).
func (h *Heartbeat) renews(holder, user string) bool {
	return h != nil && h.Found && h.Holder == holder && h.User != "" && h.User == user && !h.RenewTime.IsZero()
}

// HeartbeatTracker remembers, in memory only, when this controller first saw
// each heartbeat Lease's renewTime. The informer (WatchHeartbeats) and the
// live reads before an expiry (Reconcile) feed it; a heartbeat event
// enqueues nothing: a tenure's expiry is looked at when its requeue fires.
type HeartbeatTracker struct {
	mu   sync.Mutex
	seen map[types.NamespacedName]Heartbeat
}

// NewHeartbeatTracker is an empty tracker.
func NewHeartbeatTracker() *HeartbeatTracker {
	return &HeartbeatTracker{seen: map[types.NamespacedName]Heartbeat{}}
}

// Observe records lease as seen at now and returns what the tracker holds
// for it: a renewTime it has not seen yet is sighted now; one it has keeps
// its first sighting. A Lease without the label counts as not found.
func (t *HeartbeatTracker) Observe(lease *coordinationv1.Lease, now time.Time) Heartbeat {
	key := types.NamespacedName{Namespace: lease.Namespace, Name: lease.Name}
	h := Heartbeat{Name: lease.Name}
	if _, ok := lease.Labels[coordv1alpha1.HeartbeatLabel]; ok && lease.DeletionTimestamp.IsZero() {
		h.Found = true
		h.User = lease.Annotations[coordv1alpha1.HeartbeatUserAnnotation]
		if lease.Spec.HolderIdentity != nil {
			h.Holder = *lease.Spec.HolderIdentity
		}
		if lease.Spec.RenewTime != nil {
			h.RenewTime = lease.Spec.RenewTime.Time
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	prev, ok := t.seen[key]
	h.Sighted = now
	if ok && prev.Found && h.Found && prev.RenewTime.Equal(h.RenewTime) {
		h.Sighted = prev.Sighted
	}
	if !h.Found {
		delete(t.seen, key)
		return h
	}
	t.seen[key] = h
	return h
}

// Forget drops a deleted Lease.
func (t *HeartbeatTracker) Forget(namespace, name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.seen, types.NamespacedName{Namespace: namespace, Name: name})
}

// Get returns what the tracker holds for the Lease (Found false if nothing).
func (t *HeartbeatTracker) Get(namespace, name string) Heartbeat {
	t.mu.Lock()
	defer t.mu.Unlock()
	h, ok := t.seen[types.NamespacedName{Namespace: namespace, Name: name}]
	if !ok {
		return Heartbeat{Name: name}
	}
	return h
}

// heartbeatInformer runs a client-go informer over the Leases labelled
// coordv1alpha1.HeartbeatLabel in every namespace (a label-selected list and
// watch: client-go's own Leases, the nodes' among them, are never listed)
// and feeds the tracker. It runs on every replica, so that a new leader has
// sightings from before it took over (a sighting is never before the commit
// of what it saw, which is all that I3 asks of an observation).
type heartbeatInformer struct {
	cfg     *rest.Config
	tracker *HeartbeatTracker
	clock   clock.Clock
}

func (h *heartbeatInformer) NeedLeaderElection() bool { return false }

func (h *heartbeatInformer) Start(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(h.cfg)
	if err != nil {
		return fmt.Errorf("creating the heartbeat informer's client: %w", err)
	}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = coordv1alpha1.HeartbeatLabel
	}))
	inf := f.Coordination().V1().Leases().Informer()
	observe := func(obj any) {
		if l, ok := obj.(*coordinationv1.Lease); ok {
			h.tracker.Observe(l, h.clock.Now())
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj any) { observe(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if l, ok := obj.(*coordinationv1.Lease); ok {
				h.tracker.Forget(l.Namespace, l.Name)
			}
		},
	}); err != nil {
		return fmt.Errorf("watching heartbeat Leases: %w", err)
	}
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	<-ctx.Done()
	f.Shutdown()
	return nil
}

// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch

// readHeartbeat reads the heartbeat name in namespace from the API server (a
// quorum read) and records it in the tracker at now.
func (r *FencedLeaseReconciler) readHeartbeat(ctx context.Context, namespace, name string) (Heartbeat, error) {
	var l coordinationv1.Lease
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &l)
	if apierrors.IsNotFound(err) {
		r.Heartbeats.Forget(namespace, name)
		return Heartbeat{Name: name, Live: true}, nil
	}
	if err != nil {
		return Heartbeat{}, fmt.Errorf("reading heartbeat Lease %s/%s: %w", namespace, name, err)
	}
	h := r.Heartbeats.Observe(&l, r.Clock.Now())
	h.Live = true
	return h, nil
}

// heartbeatFor is the heartbeat a decision about lease needs, from the
// tracker (HeartbeatName; nil when none).
func (r *FencedLeaseReconciler) heartbeatFor(lease *coordv1alpha1.FencedLease, mem Memory) *Heartbeat {
	name := HeartbeatName(lease, mem)
	if name == "" || r.Heartbeats == nil {
		return nil
	}
	h := r.Heartbeats.Get(lease.Namespace, name)
	return &h
}
