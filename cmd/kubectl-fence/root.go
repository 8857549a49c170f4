package main

import (
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
