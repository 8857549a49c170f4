package policy

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// Objects are the policies and bindings of s, in the order they are applied.
// s.Incarnation must be set (Apply sets it).
func (s Settings) Objects() []client.Object {
	objs := []client.Object{s.TablePolicy(), s.TableBinding(), s.LeasePolicy(), s.LeaseBinding(),
		s.TerminatingPolicy(), s.TerminatingBinding(), s.FencingPolicy(), s.GuardedBinding(),
		s.ClusterScopedPolicy(), s.ClusterScopedBinding()}
	if b := s.RequiredBinding(); b != nil {
		objs = append(objs, b)
	}
	if s.Owner != nil {
		for _, o := range objs {
			o.SetOwnerReferences([]metav1.OwnerReference{*s.Owner})
		}
	}
	return objs
}

// Apply creates or updates the policies and bindings of s with server-side
// apply (field manager FieldManager, taking ownership of every field it sets).
// Unless s.Incarnation is set, the fencing policy keeps the incarnation of
// the installed one, or gets a new random one when none is installed (or the
// installed one has none): tenure tables written for another incarnation
// are not trusted (docs/design.md, "Switching modes").
func (s Settings) Apply(ctx context.Context, c client.Client) error {
	_, err := s.apply(ctx, c)
	return err
}

// apply is Apply, returning the settings applied (their Incarnation set).
func (s Settings) apply(ctx context.Context, c client.Client) (Settings, error) {
	if err := s.Validate(); err != nil {
		return s, err
	}
	if s.Incarnation == "" {
		inc, err := InstalledIncarnation(ctx, c)
		if err != nil && !errors.Is(err, ErrNoIncarnation) {
			return s, err
		}
		if inc == "" {
			inc = rand.Text()
		}
		s.Incarnation = inc
	}
	for _, o := range s.Objects() {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			return s, err
		}
		u := &unstructured.Unstructured{Object: m}
		unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
		unstructured.RemoveNestedField(u.Object, "status")
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
			return s, fmt.Errorf("applying %s %s: %w", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), err)
		}
	}
	return s, nil
}

// ErrNoIncarnation is wrapped by InstalledIncarnation's error when the
// fencing policy is not installed or names no incarnation.
var ErrNoIncarnation = errors.New("the fencing policy names no tenure table incarnation")

// InstalledIncarnation is the incarnation the installed fencing policy
// trusts tenure tables of, read through r (read it live: a table is written
// for the policy the API servers enforce).
func InstalledIncarnation(ctx context.Context, r client.Reader) (string, error) {
	var p admissionregistrationv1.ValidatingAdmissionPolicy
	if err := r.Get(ctx, client.ObjectKey{Name: FencingPolicyName}, &p); err != nil {
		if apierrors.IsNotFound(err) {
			return "", fmt.Errorf("%w: ValidatingAdmissionPolicy %s is not installed", ErrNoIncarnation, FencingPolicyName)
		}
		return "", fmt.Errorf("reading ValidatingAdmissionPolicy %s: %w", FencingPolicyName, err)
	}
	inc := p.Annotations[IncarnationAnnotation]
	if inc == "" {
		return "", fmt.Errorf("%w: ValidatingAdmissionPolicy %s has no annotation %s (installed by an earlier version)", ErrNoIncarnation, FencingPolicyName, IncarnationAnnotation)
	}
	return inc, nil
}

// Installer applies the policies at the operator's start, retrying every
// RetryInterval until it succeeds, and then keeps them as generated (a
// manager runnable on every replica): an installed policy or binding that was
// deleted, or edited in any field of its spec (a rule dropped, a match
// condition added, validationActions set to Warn), or a fencing policy that
// lost its incarnation annotation, is written again as generated, at once on
// a watch event (when Client is a client.WithWatch) and at the latest every
// CheckInterval (safety review 2026-12-01, finding 10).
type Installer struct {
	Settings      Settings
	Client        client.Client
	RetryInterval time.Duration
	// CheckInterval bounds the time between two comparisons of the installed
	// objects with the generated ones (default 1 min).
	CheckInterval time.Duration
	// OnCheck, if set, is told the outcome of each comparison of an
	// installed object ("<Kind>/<name>") with the generated one: whether it
	// was as generated and, if not, whether writing it again succeeded (the
	// operator exports it as kubefence_policy_not_as_generated and
	// kubefence_policy_restored_total).
	OnCheck func(object string, asGenerated, restored bool)
	// Owner, if set, owns every policy and binding (ownerReferences): while
	// it is missing or being deleted (an uninstall), nothing is applied or
	// written again, so that the garbage collector removes them for good.
	Owner *Owner
}

// owned is s with its Owner set to i.Owner as it is now.
func (i *Installer) owned(ctx context.Context, s Settings) (Settings, error) {
	ref, err := i.Owner.Ref(ctx)
	s.Owner = ref
	return s, err
}

// Start implements manager.Runnable.
func (i *Installer) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("policy")
	interval := i.RetryInterval
	if interval <= 0 {
		interval = 5 * time.Second
	}
	var applied Settings
	for {
		s, err := i.owned(ctx, i.Settings)
		if err == nil {
			applied, err = s.apply(ctx, i.Client)
		}
		if err == nil {
			log.Info("Fencing policies applied", "policy", FencingPolicyName, "table", coordv1alpha1.TenureTableName)
			break
		}
		if errors.Is(err, ErrOwnerGone) {
			log.Info("Not applying the fencing policies: their owner is gone (uninstalled, or switched to webhook mode); retrying", "reason", err.Error(), "after", interval)
		} else {
			log.Error(err, "Applying the fencing policies failed; retrying", "after", interval)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
	check := i.CheckInterval
	if check <= 0 {
		check = time.Minute
	}
	events := i.watch(ctx)
	for {
		if err := i.keep(ctx, applied.Incarnation); err != nil {
			log.Error(err, "Keeping the fencing policies as generated failed; retrying", "after", interval)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(interval):
			}
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-events:
		case <-time.After(check):
		}
	}
}

// installedObject is the object of the same kind and name as o, empty.
func installedObject(o client.Object) client.Object {
	switch o.(type) {
	case *admissionregistrationv1.ValidatingAdmissionPolicy:
		return &admissionregistrationv1.ValidatingAdmissionPolicy{}
	default:
		return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	}
}

// keep compares every installed policy and binding with the generated one
// and writes again each that is missing or differs. The fencing policy keeps
// the installed incarnation; only when it is gone is it written with inc,
// the incarnation this installer applied (while it is gone no table write
// succeeds, Table.Update reading the installed incarnation first, so the
// tables still say what they said for inc).
func (i *Installer) keep(ctx context.Context, inc string) error {
	s, err := i.owned(ctx, i.Settings)
	if errors.Is(err, ErrOwnerGone) {
		// Being uninstalled: the garbage collector deletes the policies;
		// writing them again would leave them without a live owner.
		logf.FromContext(ctx).Info("Not keeping the fencing policies: their owner is gone (uninstalled, or switched to webhook mode)", "reason", err.Error())
		return nil
	}
	if err != nil {
		return err
	}
	installed, err := InstalledIncarnation(ctx, i.Client)
	switch {
	case err == nil:
		s.Incarnation = installed
	case errors.Is(err, ErrNoIncarnation):
		s.Incarnation = inc
	default:
		return err
	}
	var errs []error
	for _, want := range s.Objects() {
		if err := i.keepOne(ctx, s, want); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// keepOne compares one object and writes it again if it is not as
// generated; a conflict (another replica wrote it meanwhile) compares again.
func (i *Installer) keepOne(ctx context.Context, s Settings, want client.Object) error {
	name := want.GetObjectKind().GroupVersionKind().Kind + "/" + want.GetName()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		asGenerated, err := i.asGenerated(ctx, want)
		if err != nil {
			return err
		}
		if asGenerated {
			i.report(name, true, false)
			return nil
		}
		logf.FromContext(ctx).Info("A fencing policy or binding is not as generated (deleted or edited); writing it again", "object", name)
		if err := s.writeAgain(ctx, i.Client, want); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
				// Another replica wrote it meanwhile: compare again.
				return apierrors.NewConflict(admissionregistrationv1.Resource(name), want.GetName(), err)
			}
			i.report(name, false, false)
			return fmt.Errorf("writing %s again as generated: %w", name, err)
		}
		i.report(name, false, true)
		return nil
	})
}

func (i *Installer) report(object string, asGenerated, restored bool) {
	if i.OnCheck != nil {
		i.OnCheck(object, asGenerated, restored)
	}
}

// asGenerated tells whether the installed object of want's kind and name is
// want as the API server would store it: a dry-run update of want onto the
// installed version (so the server's defaults are filled in and every field
// another writer added is dropped) must leave its spec, and the
// annotations want sets, unchanged.
func (i *Installer) asGenerated(ctx context.Context, want client.Object) (bool, error) {
	live := installedObject(want)
	if err := i.Client.Get(ctx, client.ObjectKeyFromObject(want), live); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading %s: %w", want.GetName(), err)
	}
	for k, v := range want.GetAnnotations() {
		if live.GetAnnotations()[k] != v {
			return false, nil
		}
	}
	probe := want.DeepCopyObject().(client.Object)
	probe.SetResourceVersion(live.GetResourceVersion())
	probe.SetAnnotations(live.GetAnnotations())
	probe.SetLabels(live.GetLabels())
	if err := i.Client.Update(ctx, probe, client.DryRunAll, client.FieldOwner(FieldManager)); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return false, nil // changed meanwhile: written again, then checked again
		}
		return false, fmt.Errorf("comparing %s with the generated one (dry run): %w", want.GetName(), err)
	}
	return equality.Semantic.DeepEqual(spec(probe), spec(live)), nil
}

// spec is the spec of a policy or binding.
func spec(o client.Object) any {
	switch o := o.(type) {
	case *admissionregistrationv1.ValidatingAdmissionPolicy:
		return o.Spec
	case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
		return o.Spec
	}
	return nil
}

// writeAgain writes want as generated: created if it is gone, else its spec
// replaced whole (an update, which drops the fields other writers added,
// as server-side apply would not) and its annotations set.
func (s Settings) writeAgain(ctx context.Context, c client.Client, want client.Object) error {
	live := installedObject(want)
	if err := c.Get(ctx, client.ObjectKeyFromObject(want), live); err != nil {
		if apierrors.IsNotFound(err) {
			return c.Create(ctx, want.DeepCopyObject().(client.Object), client.FieldOwner(FieldManager))
		}
		return err
	}
	obj := want.DeepCopyObject().(client.Object)
	obj.SetResourceVersion(live.GetResourceVersion())
	ann := live.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	maps.Copy(ann, want.GetAnnotations())
	obj.SetAnnotations(ann)
	obj.SetLabels(live.GetLabels())
	return c.Update(ctx, obj, client.FieldOwner(FieldManager))
}

// watch returns a channel that receives when an installed policy or
// binding of policy mode changes, for as long as ctx lasts, if the client
// can watch; otherwise nil (only CheckInterval then).
func (i *Installer) watch(ctx context.Context) <-chan struct{} {
	wc, ok := i.Client.(client.WithWatch)
	if !ok {
		return nil
	}
	names := map[string]bool{}
	for _, o := range i.Settings.Objects() {
		names[o.GetName()] = true
	}
	out := make(chan struct{}, 1)
	for _, list := range []client.ObjectList{&admissionregistrationv1.ValidatingAdmissionPolicyList{}, &admissionregistrationv1.ValidatingAdmissionPolicyBindingList{}} {
		go func() {
			for ctx.Err() == nil {
				w, err := wc.Watch(ctx, list)
				if err != nil {
					select {
					case <-ctx.Done():
					case <-time.After(time.Second):
					}
					continue
				}
				for ev := range w.ResultChan() {
					if o, ok := ev.Object.(client.Object); ok && !names[o.GetName()] {
						continue
					}
					select {
					case out <- struct{}{}:
					default:
					}
				}
				w.Stop()
			}
		}()
	}
	return out
}

// NeedLeaderElection is false: every replica keeps the policies current.
func (i *Installer) NeedLeaderElection() bool { return false }
