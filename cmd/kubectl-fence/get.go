package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

type getOptions struct {
	*rootOptions
	output string
}

func newGetCmd(root *rootOptions) *cobra.Command {
	o := &getOptions{rootOptions: root}
	cmd := &cobra.Command{
		Use:     "get NAME",
		Aliases: []string{"describe"},
		Short:   "Show one FencedLease: holder, waiters, history and guarded objects",
		Long: `Show one FencedLease in depth: the holder with its token and times, the
previous holder and how its tenure ended, the waiting queue in grant order, the
lock-delay, the recent history from Events, and every guarded object (any kind
labelled kubefence.io/lease=NAME) with the token it carries: current, STALE
(older than the lease's token) or INVALID (no token).`,
		Example: `  kubectl fence get my-lease -n jobs
  kubectl fence describe my-lease -o json`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: cobra.NoFileCompletions,
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
	return cmd
}
