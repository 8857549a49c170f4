package main

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// The version and kind of describe's -o json|yaml, so that scripts can tell
// when its schema changes.
const (
	viewAPIVersion = "kubectl-fence.kubefence.io/v1alpha1"
	viewKind       = "FencedLeaseDescription"
)

// leaseView is everything `kubectl fence describe` knows about one lease; -o
// json and -o yaml print it as is.
type leaseView struct {
	// APIVersion and Kind name the schema (viewAPIVersion, viewKind).
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// ObservedAt is the time the times left were measured against.
	ObservedAt metav1.MicroTime `json:"observedAt"`
	// ExpiresIn is the holder's time to expiry ("4.2s", "expired", "-").
	ExpiresIn string `json:"expiresIn"`
	// LockDelayActive is true while the lease is quarantined after an expiry.
	LockDelayActive bool `json:"lockDelayActive"`
	// Waiting are the requests other than the holder's, in grant order.
	Waiting []waiter `json:"waiting"`
	// History are the most recent Events regarding the lease, oldest first.
	History []historyEntry `json:"history"`
	// Guarded are the objects whose kubefence.io/lease label names the lease.
	Guarded []guardedObject `json:"guarded"`
	// Warnings name what could not be looked at (kinds that cannot be listed).
	Warnings []string `json:"warnings,omitempty"`
	// Lease is the FencedLease itself.
	Lease *coordv1alpha1.FencedLease `json:"lease"`
}

// buildView reads the lease, its Events and its guarded objects.
func buildView(ctx context.Context, c *clients, name string, now time.Time) (*leaseView, error) {
	lease, err := c.getLease(ctx, name)
	if err != nil {
		return nil, err
	}
	setKind(lease)
	v := &leaseView{
		APIVersion:      viewAPIVersion,
		Kind:            viewKind,
		ObservedAt:      metav1.NewMicroTime(now),
		ExpiresIn:       expiresIn(lease, now),
		LockDelayActive: lockDelayActive(lease, now),
		Waiting:         waiters(lease),
		Lease:           lease,
	}
	if v.History, err = history(ctx, c, name); err != nil {
		return nil, err
	}
	if v.Guarded, v.Warnings, err = guardedObjects(ctx, c, lease); err != nil {
		return nil, err
	}
	// Empty, not null, in JSON: "nobody waits" and "no objects" are answers.
	if v.Waiting == nil {
		v.Waiting = []waiter{}
	}
	if v.History == nil {
		v.History = []historyEntry{}
	}
	if v.Guarded == nil {
		v.Guarded = []guardedObject{}
	}
	return v, nil
}

// setKind prepares one lease for structured output: the apiVersion and kind
// the typed client leaves empty, and no managedFields (as kubectl get).
func setKind(l *coordv1alpha1.FencedLease) {
	l.APIVersion = coordv1alpha1.GroupVersion.String()
	l.Kind = "FencedLease"
	l.ManagedFields = nil
}
