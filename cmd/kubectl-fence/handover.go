package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence/protocol"
)

const handoverExample = "kubectl fence handover my-lease --to worker-2"

func newHandoverCmd(root *rootOptions) *cobra.Command {
	o := &actionOptions{rootOptions: root}
	cmd := leaseCommand(root, &cobra.Command{
		Use:   "handover NAME --to ID",
		Short: "Hand a FencedLease from its holder to a waiting client (operator action)",
		Long: `Move the request of --to to the front of the queue and remove the holder's
request, in one write. The controller then ends the holder's tenure as Released
(no lock-delay) and grants the lease to ID with a new, higher fencing token.
ID must already have requested the lease.

` + actionHelp(EventOperatorHandover),
		Example: actionExample(handoverExample),
	}, handoverExample, o.handover)
	o.addFlags(cmd, "to", "The waiting holderIdentity to hand the lease to (required).", true)
	return cmd
}

// handover hands the lease name over to o.id.
func (o *actionOptions) handover(ctx context.Context, name string) error {
	return o.act(ctx, name, o.dryRun, operatorAction{
		reason: EventOperatorHandover, action: "Handover", done: "handed over",
		doing: func(ns string) string { return fmt.Sprintf("handing fencedlease %s/%s over to %s", ns, name, o.id) },
		build: func(l *coordv1alpha1.FencedLease) (protocol.Patch, error) { return protocol.HandoverPatch(l, o.id) },
		outcome: func(lease *coordv1alpha1.FencedLease, user string) (string, string) {
			from, tok := lease.Status.HolderIdentity, lease.Status.FencingToken
			return fmt.Sprintf("released holder %s (token %d); %s is next", from, tok, o.id),
				fmt.Sprintf("%s handed the lease over from %s (token %d) to %s", operatorName(user), from, tok, o.id)
		},
	})
}
