package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence/protocol"
)

const releaseExample = "kubectl fence release my-lease --holder worker-0"

func newReleaseCmd(root *rootOptions) *cobra.Command {
	o := &actionOptions{rootOptions: root}
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

` + actionHelp(EventOperatorRelease),
		Example: actionExample(releaseExample),
	}, releaseExample, o.release)
	o.addFlags(cmd, "holder", "The holderIdentity whose request to remove (required).", false)
	return cmd
}

// release removes the request of o.id from the lease name.
func (o *actionOptions) release(ctx context.Context, name string) error {
	return o.act(ctx, name, o.dryRun, operatorAction{
		reason: EventOperatorRelease, action: "Release", done: "released",
		doing: func(ns string) string { return fmt.Sprintf("releasing %s from fencedlease %s/%s", o.id, ns, name) },
		build: func(l *coordv1alpha1.FencedLease) (protocol.Patch, error) { return protocol.ReleasePatch(l, o.id) },
		outcome: func(lease *coordv1alpha1.FencedLease, user string) (string, string) {
			said := "withdrew the waiting request of " + o.id
			if o.id == lease.Status.HolderIdentity {
				next := "nobody is waiting"
				if q := waiters(lease); len(q) > 0 {
					next = q[0].HolderIdentity + " is next"
				}
				said = fmt.Sprintf("released holder %s (token %d); %s", o.id, lease.Status.FencingToken, next)
			}
			return said, operatorName(user) + " " + said
		},
	})
}
