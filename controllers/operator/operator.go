// Package operator assembles the kubefence operator on a controller-runtime
// manager: the FencedLease reconciler, the FencedLease validator and the
// three fencing handlers, with their shared settings (the users trusted as
// the controller, the lease admin groups, the clean-up users, the expiry
// timing and the webhook's clock skew). Setup is the one place that wires
// them: cmd/main.go, test/testenv, hack/demo and test/bench all call it, so
// what the tests, the demo and the benchmark run is what ships.
//
// It owns the wiring only, never a rule: the fencing rule is in
// controllers/webhooks/fencing, the lease rules in controllers/fencedlease and
// controllers/webhooks/fencedlease. It must not import test or hack packages, nor
// anything that builds the manager (certificates, metrics and probe servers
// stay in cmd/main.go); its own flags are Options.BindFlags.
package operator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/fencedlease"
	"github.com/kubefence/kubefence/controllers/metrics"
	"github.com/kubefence/kubefence/controllers/policy"
	leasewebhook "github.com/kubefence/kubefence/controllers/webhooks/fencedlease"
	"github.com/kubefence/kubefence/controllers/webhooks/fencing"
	"github.com/kubefence/kubefence/pkg/fence/timing"
)

// RecorderName is the name the reconciler's events are recorded under.
const RecorderName = "kubefence-controller"

// Options configures Setup: the operator's one configuration. Start from
// DefaultOptions; BindFlags makes the deployer's choices and the timing
// group flags of a command; Validate, which Setup calls, is the one check.
// In WebhookSkew, CleanupUsers and Timing's drift fields the zero value
// means "none", not "the default".
type Options struct {
	// The deployer's choices.

	// Namespace is the operator's namespace: never fenced (I7), it holds the
	// leader-election Lease. Required with Reconciler.
	Namespace string
	// ServiceAccount is the operator's own service account in Namespace: its
	// user, system:serviceaccount:<Namespace>:<ServiceAccount>, is trusted as
	// the controller besides ControllerUsers (empty: none).
	ServiceAccount string
	// Enforcement is where fencing is judged: EnforcementWebhook (the
	// default) or EnforcementPolicy (a ValidatingAdmissionPolicy inside the
	// API server; the fencing webhook then serves /scale and evictions only).
	Enforcement string
	// RequiredKinds, in policy mode, are the kinds whose unguarded writes the
	// policy refuses in namespaces labelled kubefence.io/fencing=required
	// (in webhook mode the webhook configuration lists them).
	RequiredKinds []schema.GroupResource
	// BarrierServers is which API servers policy mode's barrier probes:
	// BarrierServersEndpoints (the default: every kube-apiserver the
	// kubernetes Service lists, each addressed directly, policy.Tracker) or
	// BarrierServersConfigured (only the address the operator is configured
	// with: one API server, or a control plane whose servers cannot be
	// addressed one by one; docs/design.md states the weaker guarantee).
	BarrierServers string
	// OwnerClusterRole, in policy mode, is the ClusterRole that owns the
	// policies, bindings and tenure tables the operator creates at run time
	// (policy.Owner): deleting it, as an uninstall does, has the garbage
	// collector delete them. Empty: nothing owns them (they stay after an
	// uninstall).
	OwnerClusterRole string
	// AdminGroups may change the settings of existing FencedLeases (empty:
	// system:masters).
	AdminGroups []string
	// ControllerUsers are the usernames the FencedLease validator trusts as
	// the controller besides ServiceAccount's: the identity the reconciler
	// runs as must be one of them, or its writes are refused. With Webhooks,
	// ServiceAccount or ControllerUsers is required.
	ControllerUsers []string
	// CleanupUsers may DELETE guarded objects without holding their lease
	// (default fencing.DefaultCleanupUsers; empty: nobody).
	CleanupUsers []string
	// MaxConcurrentReconciles is how many leases the reconciler decides at
	// once (default fencedlease.DefaultMaxConcurrentReconciles).
	MaxConcurrentReconciles int

	// Timing, for experts (docs/operations.md, "Tuning").

	// Timing is the controller's expiry arithmetic and the commit lag
	// (default fencedlease.DefaultTiming()); Setup sets ClampStamps itself.
	Timing fencedlease.Timing
	// WebhookSkew is the clock offset allowed between the fencing webhook and
	// the controller: with Timing.CommitLag, the margin before a tenure's
	// expiry from which the webhook refuses its token (default
	// timing.DefaultSkew; see timing.CutOff).
	WebhookSkew time.Duration

	// Test hooks: no flags.

	// Reconciler sets up the FencedLease reconciler (default true).
	Reconciler bool
	// Webhooks sets up the FencedLease validator and the fencing handlers on
	// the manager's webhook server (default true).
	Webhooks bool
	// Clock is the reconciler's and the fencing webhook's clock (default: the
	// real clock).
	Clock clock.Clock
	// LeaseReader is where the fencing webhook reads FencedLeases, live, for
	// every decision (default: a client of its own for the manager's config,
	// fencing.NewLeaseReader). It must never be a cache.
	LeaseReader client.Reader
}

// Barrier server choices.
const (
	BarrierServersEndpoints  = "endpoints"
	BarrierServersConfigured = "configured"
)

// Enforcement modes.
const (
	EnforcementWebhook = "webhook"
	EnforcementPolicy  = "policy"
)

// DefaultOptions are the options of the deployed operator, but for
// Namespace, ServiceAccount and ControllerUsers, which have no default here
// (BindFlags gives the first two theirs).
func DefaultOptions() Options {
	return Options{
		Reconciler:              true,
		Webhooks:                true,
		Timing:                  fencedlease.DefaultTiming(),
		MaxConcurrentReconciles: fencedlease.DefaultMaxConcurrentReconciles,
		CleanupUsers:            append([]string(nil), fencing.DefaultCleanupUsers...),
		WebhookSkew:             timing.DefaultSkew,
		Clock:                   clock.RealClock{},
		Enforcement:             EnforcementWebhook,
		BarrierServers:          BarrierServersEndpoints,
	}
}

// excluded are the namespaces nothing is fenced in (I7).
func (o Options) excluded() []string {
	excluded := []string{"kube-system"}
	if o.Namespace != "" && o.Namespace != "kube-system" {
		excluded = append([]string{o.Namespace}, excluded...)
	}
	return excluded
}

// controllerUsers are the users trusted as the controller: ServiceAccount's
// and ControllerUsers.
func (o Options) controllerUsers() []string {
	if o.ServiceAccount == "" {
		return o.ControllerUsers
	}
	return append([]string{"system:serviceaccount:" + o.Namespace + ":" + o.ServiceAccount}, o.ControllerUsers...)
}

// PolicySettings are the settings of policy mode's generated policies.
func (o Options) PolicySettings() policy.Settings {
	return policy.Settings{ExcludedNamespaces: o.excluded(), ControllerUsers: o.controllerUsers(), AdminGroups: o.AdminGroups,
		CleanupUsers: o.CleanupUsers, RequiredKinds: o.RequiredKinds}
}

// Validate reports every setting Setup cannot work with.
func (o Options) Validate() error {
	var errs []error
	if !o.Reconciler && !o.Webhooks {
		errs = append(errs, errors.New("nothing to set up: enable Reconciler, Webhooks or both (start from DefaultOptions)"))
	}
	if o.Reconciler {
		if o.Namespace == "" {
			errs = append(errs, errors.New("Namespace is empty: the operator's namespace is never fenced and holds its leader-election Lease"))
		}
		if err := o.Timing.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("Timing: %w", err))
		}
		if o.MaxConcurrentReconciles < 1 {
			errs = append(errs, fmt.Errorf("MaxConcurrentReconciles (--max-concurrent-reconciles) is %d: expected at least 1", o.MaxConcurrentReconciles))
		}
	}
	if o.Webhooks {
		if len(o.controllerUsers()) == 0 {
			errs = append(errs, errors.New("ServiceAccount and ControllerUsers are empty: the FencedLease validator would refuse the controller's own writes"))
		}
		if o.ServiceAccount != "" && o.Namespace == "" {
			errs = append(errs, fmt.Errorf("ServiceAccount %q without Namespace: expected the operator's namespace to name its user", o.ServiceAccount))
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
	switch o.Enforcement {
	case EnforcementWebhook:
		if len(o.RequiredKinds) > 0 {
			errs = append(errs, errors.New("RequiredKinds is set in webhook mode: list the required kinds in the fencing webhook configuration instead"))
		}
	case EnforcementPolicy:
		if o.Reconciler {
			if err := o.PolicySettings().Validate(); err != nil {
				errs = append(errs, fmt.Errorf("policy mode: %w", err))
			}
		}
	default:
		errs = append(errs, fmt.Errorf("Enforcement %q: expected %q or %q", o.Enforcement, EnforcementWebhook, EnforcementPolicy))
	}
	if o.BarrierServers != BarrierServersEndpoints && o.BarrierServers != BarrierServersConfigured {
		errs = append(errs, fmt.Errorf("BarrierServers %q: expected %q or %q", o.BarrierServers, BarrierServersEndpoints, BarrierServersConfigured))
	}
	return errors.Join(errs...)
}

// Setup validates o and adds the parts it enables to mgr.
func Setup(mgr ctrl.Manager, o Options) error {
	if err := o.Validate(); err != nil {
		return fmt.Errorf("invalid operator options: %w", err)
	}
	// The manager serves controller-runtime's registry on its metrics endpoint.
	if err := metrics.Register(ctrlmetrics.Registry); err != nil {
		return fmt.Errorf("registering the kubefence metrics: %w", err)
	}
	var err error
	if o.Reconciler {
		epochs := &fencedlease.EpochStore{Reader: mgr.GetAPIReader(), Writer: mgr.GetClient()}
		r := &fencedlease.FencedLeaseReconciler{
			Client:   mgr.GetClient(),
			Clock:    o.Clock,
			Recorder: mgr.GetEventRecorder(RecorderName),
			Epochs:   epochs,
			Timing:   o.Timing,

			MaxConcurrentReconciles: o.MaxConcurrentReconciles,
		}
		r.Timing.Skew = o.WebhookSkew // published to clients with the commit lag
		if o.Enforcement == EnforcementPolicy {
			r.Timing.ClampStamps = true
			if r.Tenures, err = setupPolicy(mgr, o); err != nil {
				return err
			}
		}
		if err := r.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the FencedLease reconciler: %w", err)
		}
	}
	if !o.Webhooks {
		return nil
	}
	v := &leasewebhook.FencedLeaseValidator{ControllerUsers: o.controllerUsers(), AdminGroups: o.AdminGroups,
		CleanupUsers: o.CleanupUsers, ExcludedNamespaces: o.excluded(), Clock: o.Clock, StampSkew: o.WebhookSkew}
	if o.Enforcement == EnforcementWebhook {
		// A lease shorter than 10 (skew + commit lag) has a cut-off margin
		// of L/10 and a smaller commit-lag bound (in policy mode every grant
		// after an expiry waits the commit lag after its barrier instead).
		skew, lag := o.WebhookSkew, o.Timing.CommitLag
		v.DurationWarning = func(l time.Duration) string { return fencing.ShortLeaseWarning(l, skew, lag) }
	}
	if err := v.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the FencedLease validator: %w", err)
	}
	parents, err := dynamic.NewForConfig(mgr.GetConfig())
	if err != nil {
		return fmt.Errorf("creating the dynamic client that reads the parents of /scale writes: %w", err)
	}
	leases := &fencing.LeaseReader{Reader: o.LeaseReader}
	// In policy mode the fencing webhook's configuration sends it only /scale
	// and evictions (config/components/policy): the handlers are the same.
	if o.LeaseReader == nil {
		if leases, err = fencing.NewLeaseReader(mgr.GetConfig(), mgr.GetScheme()); err != nil {
			return err
		}
	}
	if o.Enforcement == EnforcementPolicy {
		// The holder's renewTime is bounded by no clock in this mode: the
		// tenure table ends a tenure for /scale and evictions.
		table := &policy.Table{Reader: leases.Reader}
		leases.Tenures = func(ctx context.Context, ns, name string) (int64, bool, error) {
			e, found, err := table.Get(ctx, ns, name)
			return e.Token, found && e.Held, err
		}
	}
	fencing.Register(mgr.GetWebhookServer(), fencing.Handler{
		Leases: leases, Parents: parents,
		Clock: o.Clock, Skew: o.WebhookSkew, CommitLag: o.Timing.CommitLag, CleanupUsers: o.CleanupUsers,
	})
	if o.Namespace != "" {
		// kubefence_webhook_clock_offset_seconds, from the renewals of the
		// controller's leader-election Lease.
		sampler, err := fencing.NewClockSampler(mgr.GetConfig(), types.NamespacedName{Namespace: o.Namespace, Name: coordv1alpha1.LeaderElectionID}, o.Clock)
		if err != nil {
			return err
		}
		if err := mgr.Add(sampler); err != nil {
			return fmt.Errorf("adding the clock-offset sampler: %w", err)
		}
	}
	return nil
}

// setupPolicy adds policy mode's parts to mgr: the installer of the
// policies and the tenure tables with their propagation barrier, which it
// returns for the reconciler.
func setupPolicy(mgr ctrl.Manager, o Options) (*policy.Tenures, error) {
	settings := o.PolicySettings()
	servers := policy.ConfiguredServer(mgr.GetConfig())
	if o.BarrierServers == BarrierServersEndpoints {
		// A server that left the endpoints is still waited for until it
		// is proven gone (docs/design.md, "Absent is not dead"); the
		// tracker looks at the list in the background too, so that a new
		// leader knows the servers listed since its replica started.
		tracker := &policy.Tracker{Reader: mgr.GetAPIReader(), Base: mgr.GetConfig()}
		if err := mgr.Add(tracker); err != nil {
			return nil, fmt.Errorf("adding the API server tracker: %w", err)
		}
		servers = tracker.APIServers
	}
	// Uncached: the installer reads the installed fencing policy's
	// incarnation, which must be the one the API servers enforce; it watches
	// its objects and writes them again when they drift.
	live, err := client.NewWithWatch(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return nil, fmt.Errorf("creating the policy installer's client: %w", err)
	}
	owner := &policy.Owner{Reader: live, ClusterRole: o.OwnerClusterRole}
	if err := mgr.Add(&policy.Installer{Settings: settings, Client: live, OnCheck: metrics.PolicyChecked, Owner: owner}); err != nil {
		return nil, fmt.Errorf("adding the policy installer: %w", err)
	}
	if err := (&policy.NamespaceMarker{Client: mgr.GetClient(), Excluded: settings.ExcludedNamespaces}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("adding the terminating namespace marker: %w", err)
	}
	return &policy.Tenures{
		Table:     &policy.Table{Reader: mgr.GetAPIReader(), Writer: mgr.GetClient(), Owner: owner},
		Leases:    mgr.GetAPIReader(),
		Barrier:   &policy.Barrier{Servers: servers, Prober: &policy.DryRunProber{}},
		Excluded:  settings.ExcludedNamespaces,
		CommitLag: o.Timing.CommitLag,
		Recorder:  mgr.GetEventRecorder(RecorderName),
	}, nil
}
