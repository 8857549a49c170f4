package main

import (
	"context"
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

// completionClients builds clients for a completion, or nil.
func (o *rootOptions) completionClients(cmd *cobra.Command) (*clients, context.Context, context.CancelFunc) {
	c, err := o.clients()
	if err != nil {
		return nil, nil, nil
	}
	parent := cmd.Context()
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithTimeout(parent, completionTimeout)
	return c, ctx, cancel
}

// completeLeaseNames completes FencedLease names in the namespace of -n (or
// the context's), leaving out those already given.
func completeLeaseNames(o *rootOptions) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if cmd.Name() != "get" && len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		c, ctx, cancel := o.completionClients(cmd)
		if c == nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer cancel()
		var list coordv1alpha1.FencedLeaseList
		if err := c.kube.List(ctx, &list, client.InNamespace(c.namespace)); err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []string
		for _, l := range list.Items {
			if strings.HasPrefix(l.Name, toComplete) && !slices.Contains(args, l.Name) {
				out = append(out, l.Name)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
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
		c, ctx, cancel := o.completionClients(cmd)
		if c == nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer cancel()
		var l coordv1alpha1.FencedLease
		if err := c.kube.Get(ctx, client.ObjectKey{Namespace: c.namespace, Name: args[0]}, &l); err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var ids []string
		if h := l.Status.HolderIdentity; h != "" && !waitingOnly && coordv1alpha1.RequestIndex(l.Spec.Requests, h) >= 0 {
			ids = append(ids, h)
		}
		for _, w := range waiters(&l) {
			ids = append(ids, w.HolderIdentity)
		}
		var out []string
		for _, id := range ids {
			if strings.HasPrefix(id, toComplete) {
				out = append(out, id)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeNamespaces completes -n with the cluster's namespaces.
func completeNamespaces(o *rootOptions) cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		c, ctx, cancel := o.completionClients(cmd)
		if c == nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer cancel()
		var list corev1.NamespaceList
		if err := c.kube.List(ctx, &list); err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []string
		for _, ns := range list.Items {
			if strings.HasPrefix(ns.Name, toComplete) {
				out = append(out, ns.Name)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeContexts completes --context with the kubeconfig's contexts.
func completeContexts(o *rootOptions) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		raw, err := o.configFlags.ToRawKubeConfigLoader().RawConfig()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []string
		for name := range raw.Contexts {
			if strings.HasPrefix(name, toComplete) {
				out = append(out, name)
			}
		}
		slices.Sort(out)
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
