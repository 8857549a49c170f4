package fence

import (
	"context"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// leaseView keeps the newest version of one FencedLease seen through a watch
// or through the answers to this client's own writes, and signals changes.
type leaseView struct {
	cl  client.WithWatch
	key types.NamespacedName
	// clock paces the retries of a failed read or watch (the Elector's).
	clock clock.Clock
	// problems is told of every read and watch, failed or not.
	problems *problems

	mu      sync.Mutex
	lease   *coordv1alpha1.FencedLease // nil: not found
	known   bool
	changed chan struct{}
}

func newLeaseView(cl client.WithWatch, key types.NamespacedName, clk clock.Clock, p *problems) *leaseView {
	return &leaseView{cl: cl, key: key, clock: clk, problems: p, changed: make(chan struct{}, 1)}
}

// get returns the newest version seen (nil if the lease does not exist) and
// whether anything has been seen yet.
func (v *leaseView) get() (*coordv1alpha1.FencedLease, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.lease, v.known
}

// offer records lease if it is newer than what the view holds.
func (v *leaseView) offer(lease *coordv1alpha1.FencedLease) {
	v.mu.Lock()
	if v.known && v.lease != nil && lease != nil && lease.UID == v.lease.UID && olderOrSame(lease.ResourceVersion, v.lease.ResourceVersion) {
		v.mu.Unlock()
		return
	}
	v.lease, v.known = lease, true
	v.mu.Unlock()
	if lease != nil {
		v.problems.seenLease()
	} else {
		v.problems.goneLease()
	}
	select {
	case v.changed <- struct{}{}:
	default:
	}
}

func olderOrSame(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	if errA != nil || errB != nil {
		return a == b
	}
	return x <= y
}

// gone records that the lease does not exist and signals a change.
func (v *leaseView) gone() {
	v.mu.Lock()
	v.lease, v.known = nil, true
	v.mu.Unlock()
	v.problems.goneLease()
	select {
	case v.changed <- struct{}{}:
	default:
	}
}

// refresh reads the lease from the API server.
func (v *leaseView) refresh(ctx context.Context) error {
	var lease coordv1alpha1.FencedLease
	err := v.cl.Get(ctx, v.key, &lease)
	switch {
	case apierrors.IsNotFound(err):
		v.problems.failed("read", err)
		v.gone()
		return nil
	case err != nil:
		v.problems.failed("read", err)
		return err
	}
	v.offer(&lease)
	return nil
}

// run keeps the view current until ctx ends: a read, then a watch from that
// version; on any watch error it reads again and re-watches. Failed reads and
// watches are retried with a jittered exponential back-off (backoff). That
// back-off never delays a holder: its renewals are timed by RenewInterval and
// RetryInterval and read the version their own answers left in the view, and
// its deadline is counted apart from the view (lead, watchdog).
func (v *leaseView) run(ctx context.Context) {
	var b backoff
	for ctx.Err() == nil {
		if err := v.refresh(ctx); err != nil {
			sleep(ctx, v.clock, b.step())
			continue
		}
		rv := "0"
		if l, _ := v.get(); l != nil {
			rv = l.ResourceVersion
		}
		w, err := v.cl.Watch(ctx, &coordv1alpha1.FencedLeaseList{}, &client.ListOptions{
			Namespace:     v.key.Namespace,
			FieldSelector: fields.OneTermEqualSelector("metadata.name", v.key.Name),
			Raw:           &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true},
		})
		if err != nil {
			v.problems.failed("watch", err)
			sleep(ctx, v.clock, b.step())
			continue
		}
		err = v.consume(ctx, w)
		w.Stop()
		if err != nil && !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
			v.problems.failed("watch", err)
			sleep(ctx, v.clock, b.step())
			continue
		}
		b.reset()
	}
}

// consume applies the watch's events until it ends; it returns the error of
// an Error event.
func (v *leaseView) consume(ctx context.Context, w watch.Interface) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				if l, ok := ev.Object.(*coordv1alpha1.FencedLease); ok {
					v.offer(l)
				}
			case watch.Deleted:
				v.gone()
			case watch.Error:
				return apierrors.FromObject(ev.Object)
			}
		}
	}
}

// sleep waits d on clk, or until ctx ends.
func sleep(ctx context.Context, clk clock.Clock, d time.Duration) {
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C():
	}
}
