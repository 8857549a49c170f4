package manager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	crmanager "sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence"
)

// ErrLeaseLost is wrapped by the error Start returns when the tenure ended
// while the manager was running: the lease expired, went to someone else, was
// released through the Elector, or a write was refused as stale.
var ErrLeaseLost = errors.New("fenced lease lost")

// defaultGracefulShutdown is controller-runtime's default GracefulShutdownTimeout.
const defaultGracefulShutdown = 30 * time.Second

// LeaseOptions says which FencedLease elects the Manager's leader. Zero values
// take package fence's defaults.
type LeaseOptions struct {
	// Namespace and Name locate the FencedLease. Required. The lease must exist
	// (platform teams create it and choose its duration), unless
	// CreateIfMissing.
	Namespace, Name string

	// Identity is this replica's holderIdentity. Default: the host name, which is
	// the pod name in Kubernetes.
	Identity string

	// User is this replica's Kubernetes username. Empty: asked from the API
	// server (SelfSubjectReview) when the manager starts.
	User string

	// RenewInterval, RetryInterval and SafetyMargin are fence.Config's.
	RenewInterval, RetryInterval, SafetyMargin time.Duration

	// DisableReleaseOnCancel keeps the request when Start's context ends, so the
	// next replica waits for this one's lease to expire. By default the request
	// is withdrawn once the leader-election runnables have stopped.
	DisableReleaseOnCancel bool

	// OnNewHolder is called when the lease's holder or token changes. Optional.
	// It runs on the Elector's goroutine (fence.Callbacks): return quickly.
	OnNewHolder func(identity string, token int64)

	// Clock is fence.Config's; it also times the wait for the leader-election
	// runnables to stop after the tenure ended. Default: the real clock.
	Clock clock.Clock

	// Metrics, if set, records this replica's leadership (kubefence_client_leading:
	// the FencedLease's stand-in for controller-runtime's
	// leader_election_master_status), token, renewals and stale refusals.
	// Opt-in; for the manager's own /metrics endpoint:
	//
	//	m, err := fence.NewMetrics(crmetrics.Registry) // sigs.k8s.io/controller-runtime/pkg/metrics
	Metrics *fence.Metrics

	// Client talks to the API server for the election; it must know the
	// coordination.kubefence.io scheme (and authentication.k8s.io/v1 when User is
	// empty). Default: a client for ctrl.Options.LeaderElectionConfig, or for the
	// manager's config.
	Client client.WithWatch

	// CreateIfMissing is fence.Config's: create the FencedLease, with the API's
	// defaults, when it does not exist (needs create on fencedleases).
	CreateIfMissing bool

	// Heartbeat is fence.Config's: renew by a heartbeat Lease (per lease, or
	// a fence.Session shared with other Electors of this process) after
	// acknowledging the grant. Off by default.
	Heartbeat *fence.Heartbeat
}

// Manager is a controller-runtime Manager whose leader election is a
// FencedLease. It embeds the manager it wraps; Add, Start and Elected are its
// own (see the package documentation).
type Manager struct {
	crmanager.Manager

	elector *fence.Elector
	fenced  *fence.FencedClient
	grace   time.Duration
	clock   clock.Clock

	mu      sync.Mutex
	pending []crmanager.Runnable // leader-election runnables waiting for the grant
	leadCtx context.Context      // the tenure's context while leading
	ended   bool                 // the tenure ended: runnables cannot start again
	runCtx  context.Context      // the elector's context
	running sync.WaitGroup       // leader-election runnables started

	elected     chan struct{}
	electedOnce sync.Once
	failed      chan error // the first error that must stop the manager
}

// New returns a Manager for cfg and opts whose leader election is the
// FencedLease of lease. opts.LeaderElection must be false, and
// opts.LeaderElectionResourceLockInterface nil: the FencedLease replaces
// controller-runtime's leader election. opts.LeaderElectionConfig, when set,
// is used for the election's client.
func New(cfg *rest.Config, opts ctrl.Options, lease LeaseOptions) (*Manager, error) {
	if opts.LeaderElection || opts.LeaderElectionResourceLockInterface != nil {
		return nil, errors.New("fence manager: leave ctrl.Options.LeaderElection off and LeaderElectionResourceLockInterface nil: the FencedLease in LeaseOptions elects the leader")
	}
	if lease.Identity == "" {
		host, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("fence manager: LeaseOptions.Identity is empty and the host name is unknown: %w", err)
		}
		lease.Identity = strings.ToLower(host)
	}
	grace := defaultGracefulShutdown
	if opts.GracefulShutdownTimeout != nil {
		grace = *opts.GracefulShutdownTimeout
	}
	cl := lease.Client
	if cl == nil {
		leCfg := cfg
		if opts.LeaderElectionConfig != nil {
			leCfg = opts.LeaderElectionConfig
		}
		s := runtime.NewScheme()
		if err := coordv1alpha1.AddToScheme(s); err != nil {
			return nil, err
		}
		if err := authenticationv1.AddToScheme(s); err != nil {
			return nil, err
		}
		if err := coordinationv1.AddToScheme(s); err != nil { // heartbeat Leases
			return nil, err
		}
		var err error
		if cl, err = client.NewWithWatch(leCfg, client.Options{Scheme: s}); err != nil {
			return nil, fmt.Errorf("fence manager: creating the election client: %w", err)
		}
	}

	inner, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return nil, err
	}
	clk := lease.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	m := &Manager{Manager: inner, grace: grace, clock: clk, elected: make(chan struct{}), failed: make(chan error, 1)}
	m.elector, err = fence.New(fence.Config{
		Client: cl, Namespace: lease.Namespace, Name: lease.Name, Identity: lease.Identity, User: lease.User,
		RenewInterval: lease.RenewInterval, RetryInterval: lease.RetryInterval, SafetyMargin: lease.SafetyMargin,
		DisableReleaseOnCancel: lease.DisableReleaseOnCancel, Metrics: lease.Metrics, Clock: lease.Clock,
		CreateIfMissing: lease.CreateIfMissing, Heartbeat: lease.Heartbeat,
		Callbacks: fence.Callbacks{
			OnStartedLeading: m.startLeading,
			OnStoppedLeading: m.stopLeading,
			OnNewHolder:      lease.OnNewHolder,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("fence manager: %w", err)
	}
	m.fenced = m.elector.Client(inner.GetClient())
	if err := inner.Add(electorRunnable{m}); err != nil {
		return nil, err
	}
	if err := inner.AddHealthzCheck("fencedlease", m.elector.Check); err != nil {
		return nil, err
	}
	// Not ready until the lease has been read: a missing lease or RoleBinding
	// shows as "lease never seen: <reason>" on /readyz.
	if err := inner.AddReadyzCheck("fencedlease", m.elector.Ready); err != nil {
		return nil, err
	}
	return m, nil
}

// Token returns the fencing token while this replica leads.
func (m *Manager) Token() (int64, bool) { return m.elector.Token() }

// GetFencedClient returns the manager's client wrapped so that every create,
// update, patch and delete is guarded by the lease and carries the current
// token, and status and scale writes are sent only while leading. A write
// refused as stale ends the tenure at once (and so stops the manager).
func (m *Manager) GetFencedClient() client.Client { return m.fenced }

// Elector returns the fence.Elector of this manager, for Release, Deadline
// and Identity. Releasing ends the tenure, which stops the manager.
func (m *Manager) Elector() *fence.Elector { return m.elector }

// Elected is closed when this replica is first granted the lease.
func (m *Manager) Elected() <-chan struct{} { return m.elected }

// Add adds a runnable. Runnables that need leader election wait for the grant
// and run with the tenure's context; the others go to the embedded manager.
func (m *Manager) Add(r crmanager.Runnable) error {
	if !needsLeaderElection(r) {
		return m.Manager.Add(r)
	}
	// Warm-up (starting event sources before the grant) is not leader work.
	if w, ok := r.(warmupRunnable); ok {
		if err := m.Manager.Add(warmupOnly{w}); err != nil {
			return err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.ended:
		return errors.New("fence manager: the tenure has ended; runnables cannot be added any more")
	case m.leadCtx != nil:
		m.run(m.leadCtx, r)
	default:
		m.pending = append(m.pending, r)
	}
	return nil
}

// Start runs the manager until ctx ends or the tenure ends; in the latter case
// it returns an error wrapping ErrLeaseLost.
func (m *Manager) Start(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- m.Manager.Start(ctx) }()
	select {
	case err := <-done:
		return err
	case err := <-m.failed:
		cancel()
		if ierr := <-done; ierr != nil {
			return errors.Join(err, ierr)
		}
		return err
	}
}

func (m *Manager) fail(err error) {
	select {
	case m.failed <- err:
	default:
	}
}

// run starts a leader-election runnable in the tenure; m.mu is held.
func (m *Manager) run(ctx context.Context, r crmanager.Runnable) {
	m.running.Add(1)
	go func() {
		defer m.running.Done()
		if err := r.Start(ctx); err != nil {
			m.fail(fmt.Errorf("fence manager: leader-election runnable: %w", err))
		}
	}()
}

// startLeading is the elector's OnStartedLeading: it starts the runnables that
// waited for the grant, with the tenure's context.
func (m *Manager) startLeading(ctx context.Context, token int64) {
	m.mu.Lock()
	if m.ended {
		// A new grant while the manager stops after a lost tenure: controllers
		// cannot start twice, so this tenure runs nothing and ends with Start.
		m.mu.Unlock()
		return
	}
	m.leadCtx = ctx
	for _, r := range m.pending {
		m.run(ctx, r)
	}
	m.pending = nil
	m.mu.Unlock()
	logf.FromContext(ctx).Info("Fenced lease granted: starting leader-election runnables", "token", token)
	m.electedOnce.Do(func() { close(m.elected) })
}

// stopLeading is the elector's OnStoppedLeading. The tenure's context is
// already cancelled; it waits for the leader-election runnables (so that a
// release hands over only after they stopped) and stops the manager unless
// it is stopping anyway.
func (m *Manager) stopLeading(token int64) {
	m.mu.Lock()
	m.leadCtx = nil
	m.ended = true
	runCtx := m.runCtx
	m.mu.Unlock()
	waitTimeout(m.clock, &m.running, m.grace)
	if runCtx != nil && runCtx.Err() == nil {
		m.fail(fmt.Errorf("%w: tenure of %q with token %d ended", ErrLeaseLost, m.elector.Identity(), token))
	}
}

// waitTimeout waits for wg, at most d (forever when d is negative).
func waitTimeout(clk clock.Clock, wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	if d < 0 {
		<-done
		return
	}
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C():
	}
}

// electorRunnable runs the fence.Elector on every replica, after the caches
// synced.
type electorRunnable struct{ m *Manager }

func (electorRunnable) NeedLeaderElection() bool { return false }

func (r electorRunnable) Start(ctx context.Context) error {
	r.m.mu.Lock()
	r.m.runCtx = ctx
	r.m.mu.Unlock()
	if err := r.m.elector.Run(ctx); err != nil && ctx.Err() == nil {
		return fmt.Errorf("fence manager: fenced lease election: %w", err)
	}
	return nil
}

// warmupRunnable is controller-runtime's (unexported) warm-up interface,
// implemented by controllers.
type warmupRunnable interface {
	Warmup(context.Context) error
}

// warmupOnly hands a gated runnable's warm-up to the embedded manager.
type warmupOnly struct{ w warmupRunnable }

func (w warmupOnly) Warmup(ctx context.Context) error { return w.w.Warmup(ctx) }
func (warmupOnly) NeedLeaderElection() bool           { return false }
func (warmupOnly) Start(ctx context.Context) error    { <-ctx.Done(); return nil }

// needsLeaderElection mirrors how controller-runtime sorts runnables into its
// leader-election group.
func needsLeaderElection(r crmanager.Runnable) bool {
	switch rr := r.(type) {
	case *crmanager.Server:
		return rr.NeedLeaderElection()
	case interface{ GetCache() cache.Cache }:
		return false
	case webhook.Server:
		return false
	case crmanager.LeaderElectionRunnable:
		return rr.NeedLeaderElection()
	default:
		return true
	}
}
