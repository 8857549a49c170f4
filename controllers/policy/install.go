package policy

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// Objects are the policies and bindings of s, in the order they are applied.
func (s Settings) Objects() []client.Object {
	objs := []client.Object{s.TablePolicy(), s.TableBinding(), s.LeasePolicy(), s.LeaseBinding(), s.FencingPolicy(), s.GuardedBinding()}
	if b := s.RequiredBinding(); b != nil {
		objs = append(objs, b)
	}
	return objs
}

// Apply creates or updates the policies and bindings of s with server-side
// apply (field manager FieldManager, taking ownership of every field it sets).
func (s Settings) Apply(ctx context.Context, c client.Client) error {
	if err := s.Validate(); err != nil {
		return err
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
