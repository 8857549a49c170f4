package fencing

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kubefence/kubefence/controllers/metrics"
)

// offsetWindow is how long a clock-offset sample counts toward the gauge.
const offsetWindow = time.Minute

// samplerRetry is how long the sampler waits before it watches again after
// its watch failed (or ended at once).
const samplerRetry = 5 * time.Second

// ClockSampler feeds kubefence_webhook_clock_offset_seconds, a lower bound of
// how far the controller's clock is ahead of this replica's webhook clock,
// from a timestamp the controller writes regularly: spec.renewTime of its
// leader-election Lease (coordination.k8s.io), a microsecond MicroTime the
// leader takes from its own clock before each renewal (every retry period,
// 2 s by default) and the acquisition, and the leader is the process whose
// clock grants and expires tenures. Each version the watch delivers yields
// renewTime minus this replica's clock on arrival: the renewal was written
// before it committed and arrives after, so the sample never exceeds the
// offset and falls short of it by the renewal's write and delivery time.
//
// FencedLease timestamps do not serve: with stamped renewals
// status.renewTime moves only at grants, so a sample taken later is minus
// the tenure's age, not the offset (review 2026-12-01, finding 12).
//
// Without leader election (--leader-elect=false) the Lease does
// not exist: the controller and the webhook share one process and one
// clock, and the gauge stays 0.
type ClockSampler struct {
	// Client watches the Lease.
	Client client.WithWatch
	// Lease is the controller's leader-election Lease.
	Lease types.NamespacedName
	// Clock is this replica's webhook clock (Handler.Clock).
	Clock clock.PassiveClock

	mu sync.Mutex
	// offset is the largest sample of the window that started at since.
	offset  time.Duration
	since   time.Time
	started bool
}

// NewClockSampler is a ClockSampler of lease with a client of its own for
// cfg (its scheme knows Leases alone).
func NewClockSampler(cfg *rest.Config, lease types.NamespacedName, clk clock.PassiveClock) (*ClockSampler, error) {
	scheme := runtime.NewScheme()
	if err := coordinationv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("creating the fencing webhook's clock-offset client: %w", err)
	}
	return &ClockSampler{Client: c, Lease: lease, Clock: clk}, nil
}

// Start watches the Lease until ctx ends, watching again after each end.
func (s *ClockSampler) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("clock-offset").WithValues("lease", s.Lease.String())
	for {
		started := time.Now()
		if err := s.watch(ctx); err != nil && ctx.Err() == nil {
			log.Info("Cannot watch the controller's leader-election Lease for kubefence_webhook_clock_offset_seconds; retrying", "error", err.Error())
		}
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(started) < samplerRetry {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(samplerRetry):
			}
		}
	}
}

// NeedLeaderElection is false: every replica's webhook has its own clock.
func (s *ClockSampler) NeedLeaderElection() bool { return false }

func (s *ClockSampler) watch(ctx context.Context) error {
	w, err := s.Client.Watch(ctx, &coordinationv1.LeaseList{}, client.InNamespace(s.Lease.Namespace),
		client.MatchingFields{"metadata.name": s.Lease.Name})
	if err != nil {
		return err
	}
	defer w.Stop()
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
				if l, ok := ev.Object.(*coordinationv1.Lease); ok {
					s.Observe(l)
				}
			case watch.Error:
				return apierrors.FromObject(ev.Object)
			}
		}
	}
}

// Observe records one version of the Lease, just received: its renewTime
// minus this replica's clock. The gauge is the largest sample of the
// current window; the first sample after a window of offsetWindow starts
// the next one.
func (s *ClockSampler) Observe(l *coordinationv1.Lease) {
	if l.Spec.RenewTime == nil {
		return
	}
	now := s.Clock.Now()
	sample := l.Spec.RenewTime.Sub(now)
	s.mu.Lock()
	defer s.mu.Unlock()
	expired := !s.started || now.Sub(s.since) > offsetWindow
	if expired || sample > s.offset {
		if expired {
			s.since, s.started = now, true
		}
		s.offset = sample
		metrics.ClockOffset(sample)
	}
}
