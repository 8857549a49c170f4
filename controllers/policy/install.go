package policy

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// Objects are the policies and bindings of s, in the order they are applied.
// s.Incarnation must be set (Apply sets it).
func (s Settings) Objects() []client.Object {
	objs := []client.Object{s.TablePolicy(), s.TableBinding(), s.LeasePolicy(), s.LeaseBinding(),
		s.TerminatingPolicy(), s.TerminatingBinding(), s.FencingPolicy(), s.GuardedBinding()}
	if b := s.RequiredBinding(); b != nil {
		objs = append(objs, b)
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
	if err := s.Validate(); err != nil {
		return err
	}
	if s.Incarnation == "" {
		inc, err := InstalledIncarnation(ctx, c)
		if err != nil && !errors.Is(err, ErrNoIncarnation) {
			return err
		}
		if inc == "" {
			inc = rand.Text()
		}
		s.Incarnation = inc
	}
	for _, o := range s.Objects() {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			return err
		}
		u := &unstructured.Unstructured{Object: m}
		unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
		unstructured.RemoveNestedField(u.Object, "status")
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s: %w", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), err)
		}
	}
	return nil
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
// RetryInterval until it succeeds (a manager runnable on every replica).
type Installer struct {
	Settings      Settings
	Client        client.Client
	RetryInterval time.Duration
}

// Start implements manager.Runnable.
func (i *Installer) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("policy")
	interval := i.RetryInterval
	if interval <= 0 {
		interval = 5 * time.Second
	}
	for {
		err := i.Settings.Apply(ctx, i.Client)
		if err == nil {
			log.Info("Fencing policies applied", "policy", FencingPolicyName, "table", TableName)
			return nil
		}
		log.Error(err, "Applying the fencing policies failed; retrying", "after", interval)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

// NeedLeaderElection is false: every replica keeps the policies current.
func (i *Installer) NeedLeaderElection() bool { return false }
