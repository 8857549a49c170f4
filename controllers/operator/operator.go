// Package operator assembles the kubefence operator on a controller-runtime
// manager: the FencedLease reconciler, the FencedLease validator and the
// three fencing handlers, with their shared settings (the users trusted as
// the controller, the lease admin groups, the clean-up users, the expiry
// timing and the webhook's clock skew). Setup is the one place that wires
// them: cmd/main.go, test/testenv, hack/demo and test/bench all call it, so
// what the tests, the demo and the benchmark run is what ships.
//
// It owns the wiring only, never a rule: the fencing rule is in
// controllers/webhooks/fencing, the lease rules in controllers and
// controllers/webhooks. It must not import test or hack packages, nor
// anything that builds the manager (flags, certificates, metrics and probe
// servers stay in cmd/main.go).
package operator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/kubefence/kubefence/controllers"
	"github.com/kubefence/kubefence/controllers/webhooks"
	"github.com/kubefence/kubefence/controllers/webhooks/fencing"
)

// RecorderName is the name the reconciler's events are recorded under.
const RecorderName = "kubefence-controller"

// Options configures Setup. Start from DefaultOptions: in Timing, WebhookSkew
// and CleanupUsers the zero value means "none", not "the default".
type Options struct {
	// Reconciler sets up the FencedLease reconciler (default true).
	Reconciler bool
	// Webhooks sets up the FencedLease validator and the fencing handlers on
	// the manager's webhook server (default true).
	Webhooks bool

	// Namespace is the operator's namespace, which holds the epoch store.
	// Required with Reconciler.
	Namespace string
	// EpochStoreName is the epoch store ConfigMap's name (default
	// controllers.DefaultEpochStoreName).
	EpochStoreName string
	// Timing is the controller's expiry arithmetic (default
	// controllers.DefaultTiming()).
	Timing controllers.Timing
	// MaxConcurrentReconciles is how many leases the reconciler decides at
	// once (0: controllers.DefaultMaxConcurrentReconciles).
	MaxConcurrentReconciles int

	// ControllerUsers are the usernames the FencedLease validator trusts as the
	// controller: the identity the reconciler runs as must be one of them, or
	// its writes are refused. Required with Webhooks.
	ControllerUsers []string
	// AdminGroups may change the settings of existing FencedLeases (empty:
	// system:masters).
	AdminGroups []string
	// CleanupUsers may DELETE guarded objects without holding their lease
	// (default fencing.DefaultCleanupUsers; empty: nobody).
	CleanupUsers []string
	// WebhookSkew is the clock offset allowed between the fencing webhook and
	// the controller: with Timing.CommitLag, the margin before a tenure's
	// expiry from which the webhook refuses its token (default
	// fencing.DefaultSkew; see fencing.CutOff).
	WebhookSkew time.Duration
	// LeaseReader is where the fencing webhook reads FencedLeases, live, for
	// every decision (default: a client of its own for the manager's config,
	// fencing.NewLeaseReader). It must never be a cache. The benchmark counts
	// reads through it.
	LeaseReader client.Reader

	// Clock is the reconciler's and the fencing webhook's clock (default: the
	// real clock).
	Clock clock.Clock
}

// DefaultOptions are the options of the deployed operator, but for Namespace
// and ControllerUsers, which have no default.
func DefaultOptions() Options {
	return Options{
		Reconciler:              true,
		Webhooks:                true,
		EpochStoreName:          controllers.DefaultEpochStoreName,
		Timing:                  controllers.DefaultTiming(),
		MaxConcurrentReconciles: controllers.DefaultMaxConcurrentReconciles,
		CleanupUsers:            append([]string(nil), fencing.DefaultCleanupUsers...),
		WebhookSkew:             fencing.DefaultSkew,
		Clock:                   clock.RealClock{},
	}
}

// Validate reports every setting Setup cannot work with.
func (o Options) Validate() error {
	var errs []error
	if !o.Reconciler && !o.Webhooks {
		errs = append(errs, errors.New("nothing to set up: enable Reconciler, Webhooks or both (start from DefaultOptions)"))
	}
	if o.Reconciler {
		if o.Namespace == "" {
			errs = append(errs, errors.New("Namespace is empty: the reconciler keeps its epoch store in the operator's namespace"))
		}
		if o.EpochStoreName == "" {
			errs = append(errs, errors.New("EpochStoreName is empty (controllers.DefaultEpochStoreName is the default)"))
		}
		if err := o.Timing.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("Timing: %w", err))
		}
		if o.MaxConcurrentReconciles < 0 {
			errs = append(errs, fmt.Errorf("MaxConcurrentReconciles %d is negative: expected >= 1, or 0 for the default", o.MaxConcurrentReconciles))
		}
	}
	if o.Webhooks {
		if len(o.ControllerUsers) == 0 {
			errs = append(errs, errors.New("ControllerUsers is empty: the FencedLease validator would refuse the controller's own writes"))
		}
		for i, u := range o.ControllerUsers {
			if u == "" {
				errs = append(errs, fmt.Errorf("ControllerUsers[%d] is empty", i))
			}
		}
		for i, u := range o.CleanupUsers {
			if u == "" {
				errs = append(errs, fmt.Errorf("CleanupUsers[%d] is empty", i))
			}
		}
		for i, g := range o.AdminGroups {
			if g == "" {
				errs = append(errs, fmt.Errorf("AdminGroups[%d] is empty", i))
			}
		}
		if o.WebhookSkew < 0 {
			errs = append(errs, fmt.Errorf("WebhookSkew %v is negative: expected >= 0", o.WebhookSkew))
		}
	}
	if o.Clock == nil {
		errs = append(errs, errors.New("Clock is nil (clock.RealClock{} is the default)"))
	}
	return errors.Join(errs...)
}

// Setup validates o and adds the parts it enables to mgr.
func Setup(mgr ctrl.Manager, o Options) error {
	if err := o.Validate(); err != nil {
		return fmt.Errorf("invalid operator options: %w", err)
	}
	if o.Reconciler {
		epochs := &controllers.EpochStore{Reader: mgr.GetAPIReader(), Writer: mgr.GetClient(),
			Namespace: o.Namespace, Name: o.EpochStoreName}
		r := &controllers.FencedLeaseReconciler{
			Client:   mgr.GetClient(),
			Clock:    o.Clock,
			Recorder: mgr.GetEventRecorder(RecorderName),
			Epochs:   epochs,
			Timing:   o.Timing,

			MaxConcurrentReconciles: o.MaxConcurrentReconciles,
		}
		if err := r.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the FencedLease reconciler: %w", err)
		}
		// The leader copies an epoch store of earlier versions (one ConfigMap in
		// the operator's namespace) into the per-namespace shards; Get reads it
		// through meanwhile.
		if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
			n, err := epochs.MigrateLegacy(ctx)
			log := ctrl.Log.WithName("epoch-store")
			if err != nil {
				log.Error(err, "Migrating the legacy epoch store failed; it is still read through, retried at the next start")
				return nil
			}
			if n > 0 {
				log.Info("Migrated legacy epoch store", "entries", n, "configMap", o.Namespace+"/"+o.EpochStoreName)
			}
			return nil
		})); err != nil {
			return fmt.Errorf("adding the epoch store migration: %w", err)
		}
	}
	if !o.Webhooks {
		return nil
	}
	excluded := []string{"kube-system"}
	if o.Namespace != "" && o.Namespace != "kube-system" {
		excluded = append([]string{o.Namespace}, excluded...)
	}
	v := &webhooks.FencedLeaseValidator{ControllerUsers: o.ControllerUsers, AdminGroups: o.AdminGroups,
		CleanupUsers: o.CleanupUsers, ExcludedNamespaces: excluded, Clock: o.Clock, StampSkew: o.WebhookSkew}
	if err := v.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the FencedLease validator: %w", err)
	}
	parents, err := dynamic.NewForConfig(mgr.GetConfig())
	if err != nil {
		return fmt.Errorf("creating the dynamic client that reads the parents of /scale writes: %w", err)
	}
	leases := &fencing.LeaseReader{Reader: o.LeaseReader}
	if o.LeaseReader == nil {
		if leases, err = fencing.NewLeaseReader(mgr.GetConfig(), mgr.GetScheme()); err != nil {
			return err
		}
	}
	fencing.Register(mgr.GetWebhookServer(), fencing.Handler{
		Leases: leases, Parents: parents,
		Clock: o.Clock, Skew: o.WebhookSkew, CommitLag: o.Timing.CommitLag, CleanupUsers: o.CleanupUsers,
	})
	return nil
}
