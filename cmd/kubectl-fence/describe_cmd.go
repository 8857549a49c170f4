package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
)

type describeOptions struct {
	*rootOptions
	output objectOutputFlag
}

func newDescribeCmd(root *rootOptions) *cobra.Command {
	o := &describeOptions{rootOptions: root}
	cmd := leaseCommand(root, &cobra.Command{
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
	}, "kubectl fence describe my-lease", o.run)
	o.output.addFlag(cmd)
	return cmd
}

func (o *describeOptions) run(ctx context.Context, name string) error {
	if err := o.output.validate(); err != nil {
		return err
	}
	c, err := o.clients()
	if err != nil {
		return err
	}
	v, err := buildView(ctx, c, name, o.clock.Now())
	if err != nil {
		return err
	}
	for _, w := range v.Warnings {
		fmt.Fprintf(o.streams.ErrOut, "Warning: %s\n", w)
	}
	if o.output.structured() {
		return o.output.print(o.streams.Out, v)
	}
	return describe(o.streams.Out, v)
}
