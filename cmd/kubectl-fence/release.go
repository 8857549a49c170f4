package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence/protocol"
)

type releaseOptions struct {
	*rootOptions
	holder string
	dryRun dryRunFlag
}

func newReleaseCmd(root *rootOptions) *cobra.Command {
	o := &releaseOptions{rootOptions: root}
	cmd := leaseCommand(root, &cobra.Command{
		Use:   "release NAME --holder ID",
		Short: "Release a FencedLease on behalf of its holder (operator action)",
		Long: `Remove the request of --holder from the lease's queue. When ID holds the lease
the controller ends its tenure as Released (no lock-delay) and grants the next
waiting request; when ID is waiting, its request is withdrawn. --holder must
name the holder you mean, so that a lease that changed hands meanwhile is not
released by mistake.

The holder learns it lost the lease from its watch once the controller hands
over, or at its next renewal (a pkg/fence Elector then requests the lease again,
at the back of the queue). From this write on, its writes to guarded objects
are refused as stale (the fencing webhook reads the lease live).

` + operatorActionHelp + `The action is recorded as an Event with reason OperatorRelease.`,
		Example: `  kubectl fence release my-lease --holder worker-0 -n jobs

  # Rehearse: the API server and the webhook judge the write, nothing changes
  kubectl fence release my-lease --holder worker-0 -n jobs --dry-run=server`,
	}, "kubectl fence release my-lease --holder worker-0", o.run)
	addIdentityFlag(root, cmd, &o.holder, "holder", "The holderIdentity whose request to remove (required).", false)
	o.dryRun.addFlag(cmd)
	return cmd
}

func (o *releaseOptions) run(ctx context.Context, name string) error {
	return o.act(ctx, name, o.dryRun, operatorAction{
		reason: EventOperatorRelease, action: "Release", done: "released",
		doing: func(ns string) string { return fmt.Sprintf("releasing %s from fencedlease %s/%s", o.holder, ns, name) },
		build: func(l *coordv1alpha1.FencedLease) (protocol.Patch, error) { return protocol.ReleasePatch(l, o.holder) },
		outcome: func(lease *coordv1alpha1.FencedLease, user string) (string, string) {
			said := "withdrew the waiting request of " + o.holder
			if o.holder == lease.Status.HolderIdentity {
				next := "nobody is waiting"
				if q := waiters(lease); len(q) > 0 {
					next = q[0].HolderIdentity + " is next"
				}
				said = fmt.Sprintf("released holder %s (token %d); %s", o.holder, lease.Status.FencingToken, next)
			}
			return said, operatorName(user) + " " + said
		},
	})
}
