package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/clock"
)

// rootOptions is what every subcommand shares: the kubeconfig flags, the
// output streams and the clock that times to expiry are measured against.
type rootOptions struct {
	configFlags *genericclioptions.ConfigFlags
	streams     genericiooptions.IOStreams
	clock       clock.PassiveClock
}

// newRootCmd builds `kubectl fence`. Tests call it with buffers and a fake
// clock; main calls it with the process's streams and the real clock.
func newRootCmd(streams genericiooptions.IOStreams, clk clock.PassiveClock) *cobra.Command {
	o := &rootOptions{
		configFlags: genericclioptions.NewConfigFlags(true),
		streams:     streams,
		clock:       clk,
	}
	// The plugin keeps no disk cache (see clients), so --cache-dir would
	// do nothing: without a value, ConfigFlags does not offer it.
	o.configFlags.CacheDir = nil
	cmd := &cobra.Command{
		Use:   "kubectl-fence",
		Short: "Inspect and operate kubefence FencedLeases",
		Long: `Inspect and operate kubefence FencedLeases.

A FencedLease decides who may act, and its fencing token, checked by every
guarded object, makes sure a holder that lost the lease can change nothing.
This plugin shows who holds each lease, who waits, which guarded objects carry
which token, and the history of transitions; operators can release a holder or
hand the lease over to a waiting client, and raise a lease's token floor after
an etcd restore.`,
		Annotations: map[string]string{
			cobra.CommandDisplayNameAnnotation: "kubectl fence",
		},
		SilenceUsage:      true,
		SilenceErrors:     true,
		CompletionOptions: cobra.CompletionOptions{HiddenDefaultCmd: true},
	}
	cmd.SetIn(streams.In)
	cmd.SetOut(streams.Out)
	cmd.SetErr(streams.ErrOut)
	o.configFlags.AddFlags(cmd.PersistentFlags())
	_ = cmd.RegisterFlagCompletionFunc("namespace", completeNamespaces(o))
	_ = cmd.RegisterFlagCompletionFunc("context", completeContexts(o))

	cmd.AddCommand(
		newGetCmd(o),
		newDescribeCmd(o),
		newReleaseCmd(o),
		newHandoverCmd(o),
		newRaiseFloorCmd(o),
		newCheckCmd(o),
		newVersionCmd(o),
	)
	return cmd
}

// leaseCommand finishes cmd, a command on one FencedLease NAME: it takes
// exactly that argument (when it is missing, the error shows example),
// completes lease names, and runs run with the NAME.
func leaseCommand(root *rootOptions, cmd *cobra.Command, example string, run func(ctx context.Context, name string) error) *cobra.Command {
	cmd.Args = nameArg(cmd.Name(), example)
	cmd.ValidArgsFunction = completeLeaseNames(root)
	cmd.RunE = func(cmd *cobra.Command, args []string) error { return run(cmd.Context(), args[0]) }
	return cmd
}

// noArgsCommand finishes cmd, a command that takes no arguments and completes
// none, to run run.
func noArgsCommand(cmd *cobra.Command, run func(ctx context.Context) error) *cobra.Command {
	cmd.Args = cobra.NoArgs
	cmd.ValidArgsFunction = cobra.NoFileCompletions
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return run(cmd.Context()) }
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
