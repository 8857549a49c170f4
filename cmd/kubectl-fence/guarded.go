package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// listWorkers bounds the parallel list calls, one per kind.
const listWorkers = 8

// guardedObject is an object whose kubefence.io/lease label names the lease.
type guardedObject struct {
	// APIVersion and Kind of the object.
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Name of the object (in the lease's namespace).
	Name string `json:"name"`
	// Token is the object's kubefence.io/fencing-token annotation, as written.
	Token string `json:"token,omitempty"`
	// State is current, STALE, AHEAD or INVALID against the lease's token.
	State string `json:"state"`

	uid types.UID
}

// kindName prints the kind as kubectl does: Widget.example.kubefence.io, or
// ConfigMap for the core group.
func (g guardedObject) kindName() string {
	gv, err := schema.ParseGroupVersion(g.APIVersion)
	if err != nil || gv.Group == "" {
		return g.Kind
	}
	return g.Kind + "." + gv.Group
}

// kindResource is one listable kind found by discovery.
type kindResource struct {
	gvr  schema.GroupVersionResource
	kind string
}

// guardedObjects finds the objects guarded by the lease: discovery names every
// namespaced kind that can be listed (at its preferred version), and each is
// listed, metadata only, with the guard label selector. Kinds that cannot be
// listed (forbidden, or an unavailable aggregated API) become warnings: the
// rest of the answer is still worth having.
func guardedObjects(ctx context.Context, c *clients, lease *coordv1alpha1.FencedLease) ([]guardedObject, []string, error) {
	kinds, warnings, err := listableKinds(c.discovery)
	if err != nil {
		return nil, nil, err
	}
	sel := labels.Set{coordv1alpha1.GuardLeaseLabel: lease.Name}.String()

	results := make([][]guardedObject, len(kinds))
	errs := make([]error, len(kinds))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(listWorkers, len(kinds)) {
		wg.Go(func() {
			for i := range next {
				results[i], errs[i] = listGuarded(ctx, c, kinds[i], lease, sel)
			}
		})
	}
	for i := range kinds {
		next <- i
	}
	close(next)
	wg.Wait()

	var out []guardedObject
	seen := map[types.UID]bool{}
	for i := range kinds {
		if errs[i] != nil {
			warnings = append(warnings, fmt.Sprintf("cannot list %s: %v", kinds[i].gvr.GroupResource(), errs[i]))
			continue
		}
		// A kind served by two groups (core and events.k8s.io Events) lists
		// the same objects twice; the first group wins.
		for _, g := range results[i] {
			if !seen[g.uid] {
				seen[g.uid] = true
				out = append(out, g)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if a, b := out[i].kindName(), out[j].kindName(); a != b {
			return a < b
		}
		return out[i].Name < out[j].Name
	})
	return out, warnings, nil
}

// listableKinds returns the namespaced resources that support list, at their
// preferred versions, without subresources.
func listableKinds(d discovery.DiscoveryInterface) ([]kindResource, []string, error) {
	var warnings []string
	lists, err := d.ServerPreferredNamespacedResources()
	if err != nil {
		if !discovery.IsGroupDiscoveryFailedError(err) || len(lists) == 0 {
			return nil, nil, fmt.Errorf("discovering resource kinds: %w", err)
		}
		warnings = append(warnings, fmt.Sprintf("some API groups could not be discovered, so their objects are not shown: %v", err))
	}
	var kinds []kindResource
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") {
				continue
			}
			kinds = append(kinds, kindResource{gvr: gv.WithResource(r.Name), kind: r.Kind})
		}
	}
	return kinds, warnings, nil
}

// listGuarded lists one kind's objects carrying the guard label, page by page.
func listGuarded(ctx context.Context, c *clients, k kindResource, lease *coordv1alpha1.FencedLease, sel string) ([]guardedObject, error) {
	var out []guardedObject
	opts := metav1.ListOptions{LabelSelector: sel, Limit: 500}
	for {
		list, err := c.metadata.Resource(k.gvr).Namespace(lease.Namespace).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		for _, item := range list.Items {
			tok, ok := item.Annotations[coordv1alpha1.FencingTokenAnnotation]
			out = append(out, guardedObject{
				APIVersion: k.gvr.GroupVersion().String(),
				Kind:       k.kind,
				Name:       item.Name,
				Token:      tok,
				State:      tokenState(tok, ok, lease.Status.FencingToken),
				uid:        item.UID,
			})
		}
		if list.Continue == "" {
			return out, nil
		}
		opts.Continue = list.Continue
	}
}
