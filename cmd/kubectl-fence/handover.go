package main

import (
	"fmt"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence/protocol"
)

type handoverOptions struct {
	*rootOptions
	to     string
	dryRun dryRunFlag
}

func newHandoverCmd(root *rootOptions) *cobra.Command {
	o := &handoverOptions{rootOptions: root}
	cmd := &cobra.Command{
		Use:   "handover NAME --to ID",
		Short: "Hand a FencedLease from its holder to a waiting client (operator action)",
		Long: `Move the request of --to to the front of the queue and remove the holder's
request, in one write. The controller then ends the holder's tenure as Released
(no lock-delay) and grants the lease to ID with a new, higher fencing token.
ID must already have requested the lease.

` + operatorActionHelp + `The action is recorded as an Event with reason OperatorHandover.`,
		Example: `  kubectl fence handover my-lease --to worker-2 -n jobs

  # Rehearse: the API server and the webhook judge the write, nothing changes
  kubectl fence handover my-lease --to worker-2 -n jobs --dry-run=server`,
		Args:              nameArg("handover", "kubectl fence handover my-lease --to worker-2"),
		ValidArgsFunction: completeLeaseNames(root),
		RunE:              func(cmd *cobra.Command, args []string) error { return o.run(cmd, args[0]) },
	}
	cmd.Flags().StringVar(&o.to, "to", "", "The waiting holderIdentity to hand the lease to (required).")
	_ = cmd.MarkFlagRequired("to")
	_ = cmd.RegisterFlagCompletionFunc("to", completeHolders(root, true))
	o.dryRun.addFlag(cmd)
	return cmd
}

func (o *handoverOptions) run(cmd *cobra.Command, name string) error {
	ctx := cmd.Context()
	c, lease, user, err := o.operatorAction(ctx, name, o.dryRun, func(ns string) string {
		return fmt.Sprintf("handing fencedlease %s/%s over to %s", ns, name, o.to)
	}, func(l *coordv1alpha1.FencedLease) (protocol.Patch, error) { return protocol.HandoverPatch(l, o.to) })
	if err != nil {
		return err
	}

	from, tok := lease.Status.HolderIdentity, lease.Status.FencingToken
	fmt.Fprintf(o.streams.Out, "fencedlease %s/%s: released holder %s (token %d); %s is next%s\n", c.namespace, name, from, tok, o.to, o.dryRun.suffix())
	if o.dryRun.enabled() {
		return nil
	}
	note := fmt.Sprintf("%s handed the lease over from %s (token %d) to %s", operatorName(user), from, tok, o.to)
	if err := recordEvent(ctx, c, lease, metav1.NewMicroTime(o.clock.Now()), EventOperatorHandover, "Handover", note); err != nil {
		fmt.Fprintf(o.streams.ErrOut, "Warning: the lease was handed over, but %v\n", err)
	}
	return nil
}
