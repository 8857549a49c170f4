package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

type listOptions struct {
	*rootOptions
	allNamespaces bool
	selector      string
	output        string
}

func newListCmd(root *rootOptions) *cobra.Command {
	o := &listOptions{rootOptions: root}
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List FencedLeases with holder, token, time to expiry and waiters",
		Example: `  # Leases in the current namespace
  kubectl fence list

  # In every namespace, with the names of the waiting clients
  kubectl fence list -A -o wide

  # The raw objects
  kubectl fence list -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	cmd.Flags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "List leases in all namespaces.")
	cmd.Flags().StringVarP(&o.selector, "selector", "l", "", "Label selector to filter leases on.")
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "Output format: wide, json or yaml.")
	return cmd
}

func (o *listOptions) run(cmd *cobra.Command) error {
	if err := checkOutput(o.output, outputWide, outputJSON, outputYAML); err != nil {
		return err
	}
	sel, err := labels.Parse(o.selector)
	if err != nil {
		return fmt.Errorf("parsing selector: %w", err)
	}
	c, err := o.clients()
	if err != nil {
		return err
	}
	opts := []client.ListOption{client.MatchingLabelsSelector{Selector: sel}}
	if !o.allNamespaces {
		opts = append(opts, client.InNamespace(c.namespace))
	}
	var list coordv1alpha1.FencedLeaseList
	if err := c.kube.List(cmd.Context(), &list, opts...); err != nil {
		if meta.IsNoMatchError(err) {
			return errNotInstalled
		}
		return fmt.Errorf("listing fencedleases: %w", err)
	}

	switch o.output {
	case outputJSON, outputYAML:
		setListKinds(&list)
		return printStructured(o.streams.Out, o.output, &list)
	}
	if len(list.Items) == 0 {
		if o.allNamespaces {
			fmt.Fprintln(o.streams.ErrOut, "No fencedleases found.")
		} else {
			fmt.Fprintf(o.streams.ErrOut, "No fencedleases found in %s namespace.\n", c.namespace)
		}
		return nil
	}
	return o.printTable(list.Items)
}

// setListKinds fills in the apiVersion and kind the typed client leaves empty,
// so that the output can be decoded again, and drops managedFields as kubectl
// get does.
func setListKinds(list *coordv1alpha1.FencedLeaseList) {
	list.APIVersion = coordv1alpha1.GroupVersion.String()
	list.Kind = "FencedLeaseList"
	for i := range list.Items {
		setKind(&list.Items[i])
	}
}

// setKind prepares one lease for structured output.
func setKind(l *coordv1alpha1.FencedLease) {
	l.APIVersion = coordv1alpha1.GroupVersion.String()
	l.Kind = "FencedLease"
	l.ManagedFields = nil
}

func (o *listOptions) printTable(leases []coordv1alpha1.FencedLease) error {
	now := o.clock.Now()
	w := printers.GetNewTabWriter(o.streams.Out)
	header := []string{"NAME", "HOLDER", "TOKEN", "EXPIRES-IN", "TRANSITIONS", "WAITING", "LOCK-DELAY", "STATUS"}
	if o.allNamespaces {
		header = append([]string{"NAMESPACE"}, header...)
	}
	if o.output == outputWide {
		header = append(header, "WAITERS", "PREVIOUS")
	}
	fmt.Fprintln(w, strings.Join(header, "\t"))
	for i := range leases {
		l := &leases[i]
		queue := waiters(l)
		row := []string{
			l.Name,
			holder(l),
			token(l.Status.FencingToken),
			expiresIn(l, now),
			strconv.Itoa(int(l.Status.LeaseTransitions)),
			strconv.Itoa(len(queue)),
			lockDelay(l, now),
			heldReason(l),
		}
		if o.allNamespaces {
			row = append([]string{l.Namespace}, row...)
		}
		if o.output == outputWide {
			row = append(row, waiterNames(queue), previousShort(l))
		}
		fmt.Fprintln(w, strings.Join(row, "\t"))
	}
	return w.Flush()
}

// waiterNames lists the waiting identities in grant order: "b,c".
func waiterNames(queue []waiter) string {
	if len(queue) == 0 {
		return none
	}
	names := make([]string, len(queue))
	for i, w := range queue {
		names[i] = w.HolderIdentity
	}
	return strings.Join(names, ",")
}

// previousShort is the previous holder for a table cell: "a/7:Released".
func previousShort(l *coordv1alpha1.FencedLease) string {
	p := l.Status.PreviousHolder
	if p == nil {
		return none
	}
	return fmt.Sprintf("%s/%d:%s", p.HolderIdentity, p.FencingToken, p.Reason)
}
