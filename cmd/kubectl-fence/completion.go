package main

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// Completion asks the API server, as kubectl's own completion does; through
// kubectl it arrives via kubectl_complete-fence, which runs
// `kubectl-fence __complete ARGS...`. A completion never prints an error: an
// unreachable server just completes nothing.

// completionTimeout bounds one completion's API calls, so a TAB never hangs.
const completionTimeout = 5 * time.Second

// completeFromServer offers the names list returns that start with
// toComplete; list runs with clients for the command line's kubeconfig and a
// context bounded by completionTimeout. When the clients cannot be built or
// list fails, it offers nothing.
func (o *rootOptions) completeFromServer(cmd *cobra.Command, toComplete string, list func(ctx context.Context, c *clients) ([]string, error)) ([]string, cobra.ShellCompDirective) {
	c, err := o.clients()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	parent := cmd.Context()
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithTimeout(parent, completionTimeout)
	defer cancel()
	names, err := list(ctx, c)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return withPrefix(names, toComplete), cobra.ShellCompDirectiveNoFileComp
}

// withPrefix is the names that start with prefix, in order.
func withPrefix(names []string, prefix string) []string {
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	return out
}

// completeLeaseNames completes FencedLease names in the namespace of -n (or
// the context's), leaving out those already given.
func completeLeaseNames(o *rootOptions) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if cmd.Name() != "get" && len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return o.completeFromServer(cmd, toComplete, func(ctx context.Context, c *clients) ([]string, error) {
			var list coordv1alpha1.FencedLeaseList
			if err := c.kube.List(ctx, &list, client.InNamespace(c.namespace)); err != nil {
				return nil, err
			}
			var names []string
			for _, l := range list.Items {
				if !slices.Contains(args, l.Name) {
					names = append(names, l.Name)
				}
			}
			return names, nil
		})
	}
}

// completeHolders completes the holderIdentities with a request on the lease
// named by the first argument: the holder first, then the waiters in grant
// order. waitingOnly leaves the holder out (for handover --to).
func completeHolders(o *rootOptions, waitingOnly bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) == 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return o.completeFromServer(cmd, toComplete, func(ctx context.Context, c *clients) ([]string, error) {
			var l coordv1alpha1.FencedLease
			if err := c.kube.Get(ctx, client.ObjectKey{Namespace: c.namespace, Name: args[0]}, &l); err != nil {
				return nil, err
			}
			var ids []string
			if h := l.Status.HolderIdentity; h != "" && !waitingOnly && coordv1alpha1.RequestIndex(l.Spec.Requests, h) >= 0 {
				ids = append(ids, h)
			}
			for _, w := range waiters(&l) {
				ids = append(ids, w.HolderIdentity)
			}
			return ids, nil
		})
	}
}

// completeNamespaces completes -n with the cluster's namespaces.
func completeNamespaces(o *rootOptions) cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		return o.completeFromServer(cmd, toComplete, func(ctx context.Context, c *clients) ([]string, error) {
			var list corev1.NamespaceList
			if err := c.kube.List(ctx, &list); err != nil {
				return nil, err
			}
			var names []string
			for _, ns := range list.Items {
				names = append(names, ns.Name)
			}
			return names, nil
		})
	}
}

// completeContexts completes --context with the kubeconfig's contexts.
func completeContexts(o *rootOptions) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		raw, err := o.configFlags.ToRawKubeConfigLoader().RawConfig()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		out := withPrefix(slices.Collect(maps.Keys(raw.Contexts)), toComplete)
		slices.Sort(out)
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
