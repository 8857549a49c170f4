package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

type describeOptions struct {
	*rootOptions
	output string
}

func newDescribeCmd(root *rootOptions) *cobra.Command {
	o := &describeOptions{rootOptions: root}
	cmd := &cobra.Command{
		Use:   "describe NAME",
		Short: "Explain one FencedLease: holder, waiters, history and guarded objects",
		Long: `Explain one FencedLease in depth: the holder with its token and times, the
previous holder and how its tenure ended, the waiting queue in grant order, the
lock-delay, the recent history from Events, and every guarded object (any kind
labelled kubefence.io/lease=NAME) with the token it carries: current, STALE
(older than the lease's token), AHEAD (newer than any token the lease has
issued: after an etcd restore, see 'kubectl fence raise-floor') or INVALID
(no token).

-o json|yaml prints the same as a FencedLeaseDescription object.`,
		Example: `  kubectl fence describe my-lease -n jobs
  kubectl fence describe my-lease -o json`,
		Args:              nameArg("describe", "kubectl fence describe my-lease"),
		ValidArgsFunction: completeLeaseNames(root),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(o.output, outputJSON, outputYAML); err != nil {
				return err
			}
			c, err := o.clients()
			if err != nil {
				return err
			}
			v, err := buildView(cmd.Context(), c, args[0], o.clock.Now())
			if err != nil {
				return err
			}
			for _, w := range v.Warnings {
				fmt.Fprintf(o.streams.ErrOut, "Warning: %s\n", w)
			}
			if o.output != outputTable {
				return printStructured(o.streams.Out, o.output, v)
			}
			return describe(o.streams.Out, v)
		},
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "Output format: json or yaml.")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{outputJSON, outputYAML}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// nameArg accepts exactly one lease NAME, and says how to find one when it is
// missing.
func nameArg(verb, example string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) == 1:
			return nil
		case len(args) == 0:
			return fmt.Errorf("%s needs the NAME of a FencedLease, as in %q; list the leases with 'kubectl fence get' (add -A for every namespace)", verb, example)
		default:
			return fmt.Errorf("%s takes one FencedLease NAME, got %d: %v", verb, len(args), args)
		}
	}
}
