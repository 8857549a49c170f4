package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

type getOptions struct {
	*rootOptions
	print         *printFlags
	allNamespaces bool
	selector      string
	watch         bool
	watchOnly     bool
}

func newGetCmd(root *rootOptions) *cobra.Command {
	o := &getOptions{rootOptions: root, print: newPrintFlags()}
	cmd := &cobra.Command{
		Use:     "get [NAME...]",
		Aliases: []string{"list", "ls"},
		Short:   "List FencedLeases with holder, token, time to expiry and waiters",
		Long: `List FencedLeases, or the ones named, as kubectl get does: a table with the
holder, its fencing token, the time left until the controller expires it, the
number of transitions and of waiting clients, the lock-delay and the Held
condition's reason (-o wide adds the waiters' names and the previous holder),
or the objects themselves with -o json|yaml|name|jsonpath=...|go-template=....

-w watches for changes and prints each changed lease as a new row. To explain
one lease in depth (queue, history, guarded objects), use
'kubectl fence describe NAME'. 'list' and 'ls' are aliases of get.`,
		Example: `  # Leases in the current namespace
  kubectl fence get

  # In every namespace, with the names of the waiting clients
  kubectl fence get -A -o wide

  # Watch a hand-over
  kubectl fence get job-a -n jobs -w

  # The holders, for scripts
  kubectl fence get -o jsonpath='{range .items[*]}{.metadata.name}={.status.holderIdentity}{"\n"}{end}'`,
		ValidArgsFunction: completeLeaseNames(root),
		RunE:              func(cmd *cobra.Command, args []string) error { return o.run(cmd.Context(), args) },
	}
	cmd.Flags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "List leases in all namespaces.")
	cmd.Flags().StringVarP(&o.selector, "selector", "l", "", "Label selector to filter leases on.")
	cmd.Flags().BoolVarP(&o.watch, "watch", "w", false, "After listing, watch for changes and print each changed lease.")
	cmd.Flags().BoolVar(&o.watchOnly, "watch-only", false, "Watch for changes without listing first.")
	o.print.addFlags(cmd)
	return cmd
}

func (o *getOptions) run(ctx context.Context, names []string) error {
	if o.allNamespaces && len(names) > 0 {
		return errors.New("a lease cannot be retrieved by name across all namespaces: drop -A, or drop the NAME and filter with -l")
	}
	if o.selector != "" && len(names) > 0 {
		return errors.New("name and -l cannot both be given: use one to choose leases")
	}
	if (o.watch || o.watchOnly) && len(names) > 1 {
		return errors.New("-w watches all leases or one by name, not several names")
	}
	sel, err := labels.Parse(o.selector)
	if err != nil {
		return fmt.Errorf("parsing selector %q: %w", o.selector, err)
	}
	pr, err := o.print.toPrinter(o.allNamespaces)
	if err != nil {
		return err
	}
	c, err := o.clients()
	if err != nil {
		return err
	}
	opts := []client.ListOption{client.MatchingLabelsSelector{Selector: sel}}
	if !o.allNamespaces {
		opts = append(opts, client.InNamespace(c.namespace))
	}
	if len(names) == 1 {
		opts = append(opts, client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", names[0])})
	}

	var resourceVersion string
	if o.watchOnly {
		// A watch without a resourceVersion starts with every existing
		// lease; --watch-only starts after them, from a list's version.
		var list coordv1alpha1.FencedLeaseList
		if err := c.kube.List(ctx, &list, append(opts, client.Limit(1))...); err != nil {
			return listError(err)
		}
		resourceVersion = list.ResourceVersion
	} else if resourceVersion, err = o.list(ctx, c, pr, names, opts); err != nil {
		return err
	}
	if !o.watch && !o.watchOnly {
		return nil
	}
	return o.watchLeases(ctx, c, pr, resourceVersion, opts)
}

// list prints the leases and returns the resourceVersion a watch goes on from.
func (o *getOptions) list(ctx context.Context, c *clients, pr printers.ResourcePrinter, names []string, opts []client.ListOption) (string, error) {
	var list coordv1alpha1.FencedLeaseList
	if len(names) > 0 && !o.watch {
		// Each by name, in the order given, and an error for a missing one
		// after printing the others (as kubectl get does).
		var missing error
		for _, name := range names {
			l, err := c.getLease(ctx, name)
			if err != nil {
				if missing == nil {
					missing = err
				}
				continue
			}
			list.Items = append(list.Items, *l)
		}
		if len(list.Items) > 0 {
			var obj runtime.Object = &list
			if len(names) == 1 && !o.print.isTable() {
				obj = &list.Items[0]
			}
			if err := o.printObj(pr, obj); err != nil {
				return "", err
			}
		}
		return "", missing
	}
	if err := c.kube.List(ctx, &list, opts...); err != nil {
		return "", listError(err)
	}
	if len(names) == 1 && len(list.Items) == 0 {
		return "", fmt.Errorf("fencedlease %q not found in namespace %q", names[0], c.namespace)
	}
	if len(list.Items) == 0 && o.print.isTable() {
		if o.allNamespaces {
			fmt.Fprintln(o.streams.ErrOut, "No fencedleases found.")
		} else {
			fmt.Fprintf(o.streams.ErrOut, "No fencedleases found in %s namespace.\n", c.namespace)
		}
		return list.ResourceVersion, nil
	}
	return list.ResourceVersion, o.printObj(pr, &list)
}

// printObj prints leases: a table of them, or the objects.
func (o *getOptions) printObj(pr printers.ResourcePrinter, obj runtime.Object) error {
	if o.print.isTable() {
		var items []coordv1alpha1.FencedLease
		switch v := obj.(type) {
		case *coordv1alpha1.FencedLeaseList:
			items = v.Items
		case *coordv1alpha1.FencedLease:
			items = []coordv1alpha1.FencedLease{*v}
		}
		obj = leaseTable(items, o.clock.Now())
	} else {
		var err error
		if obj, err = forPrinting(obj); err != nil {
			return err
		}
	}
	return pr.PrintObj(obj, o.streams.Out)
}

// forPrinting turns leases into what kubectl's printers expect: unstructured
// objects with apiVersion and kind on the list and on every item (the name
// printer refuses typed lists; the typed client leaves kinds empty), without
// managedFields.
func forPrinting(obj runtime.Object) (runtime.Object, error) {
	switch v := obj.(type) {
	case *coordv1alpha1.FencedLeaseList:
		v.APIVersion, v.Kind = coordv1alpha1.GroupVersion.String(), "FencedLeaseList"
		list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": v.APIVersion, "kind": v.Kind, "metadata": map[string]any{"resourceVersion": v.ResourceVersion}}}
		for i := range v.Items {
			item, err := forPrinting(&v.Items[i])
			if err != nil {
				return nil, err
			}
			list.Items = append(list.Items, *item.(*unstructured.Unstructured))
		}
		return list, nil
	case *coordv1alpha1.FencedLease:
		setKind(v)
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(v)
		if err != nil {
			return nil, fmt.Errorf("encoding fencedlease %s/%s: %w", v.Namespace, v.Name, err)
		}
		return &unstructured.Unstructured{Object: u}, nil
	}
	return obj, nil
}

// watchLeases prints every change from resourceVersion on ("" is "now")
// until ctx ends, watching again when the server closes the watch.
func (o *getOptions) watchLeases(ctx context.Context, c *clients, pr printers.ResourcePrinter, resourceVersion string, opts []client.ListOption) error {
	for {
		w, err := c.kube.Watch(ctx, &coordv1alpha1.FencedLeaseList{}, append(opts, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: resourceVersion, AllowWatchBookmarks: true}})...)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("watching fencedleases: %w", listError(err))
		}
		rv, err := o.drain(ctx, w, pr)
		w.Stop()
		if err != nil || ctx.Err() != nil {
			return err
		}
		if rv != "" {
			resourceVersion = rv
		}
	}
}

// drain prints a watch's events until it ends, returning the last
// resourceVersion seen.
func (o *getOptions) drain(ctx context.Context, w watch.Interface, pr printers.ResourcePrinter) (string, error) {
	rv := ""
	for {
		select {
		case <-ctx.Done():
			return rv, nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return rv, nil
			}
			switch ev.Type {
			case watch.Error:
				err := apierrors.FromObject(ev.Object)
				if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
					return "", fmt.Errorf("the watch fell too far behind (%v): run the command again", err)
				}
				return rv, fmt.Errorf("watching fencedleases: %w", err)
			case watch.Bookmark:
				if m, err := meta.Accessor(ev.Object); err == nil {
					rv = m.GetResourceVersion()
				}
				continue
			}
			l, ok := ev.Object.(*coordv1alpha1.FencedLease)
			if !ok {
				continue
			}
			rv = l.ResourceVersion
			if err := o.printObj(pr, l); err != nil {
				return rv, err
			}
		}
	}
}

// listError explains the errors of a list or watch.
func listError(err error) error {
	if meta.IsNoMatchError(err) {
		return errNotInstalled
	}
	return fmt.Errorf("listing fencedleases: %w", err)
}
