package main

import (
	"fmt"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	cmd := &cobra.Command{
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
		Args:              nameArg("release", "kubectl fence release my-lease --holder worker-0"),
		ValidArgsFunction: completeLeaseNames(root),
		RunE:              func(cmd *cobra.Command, args []string) error { return o.run(cmd, args[0]) },
	}
	cmd.Flags().StringVar(&o.holder, "holder", "", "The holderIdentity whose request to remove (required).")
	_ = cmd.MarkFlagRequired("holder")
	_ = cmd.RegisterFlagCompletionFunc("holder", completeHolders(root, false))
	o.dryRun.addFlag(cmd)
	return cmd
}

func (o *releaseOptions) run(cmd *cobra.Command, name string) error {
	ctx := cmd.Context()
	c, lease, user, err := o.operatorAction(ctx, name, o.dryRun, func(ns string) string {
		return fmt.Sprintf("releasing %s from fencedlease %s/%s", o.holder, ns, name)
	}, func(l *coordv1alpha1.FencedLease) (protocol.Patch, error) { return protocol.ReleasePatch(l, o.holder) })
	if err != nil {
		return err
	}

	var note, said string
	if o.holder == lease.Status.HolderIdentity {
		next := "nobody is waiting"
		if q := waiters(lease); len(q) > 0 {
			next = q[0].HolderIdentity + " is next"
		}
		note = fmt.Sprintf("%s released holder %s (token %d); %s", operatorName(user), o.holder, lease.Status.FencingToken, next)
		said = fmt.Sprintf("fencedlease %s/%s: released holder %s (token %d); %s", c.namespace, name, o.holder, lease.Status.FencingToken, next)
	} else {
		note = fmt.Sprintf("%s withdrew the waiting request of %s", operatorName(user), o.holder)
		said = fmt.Sprintf("fencedlease %s/%s: withdrew the waiting request of %s", c.namespace, name, o.holder)
	}
	fmt.Fprintln(o.streams.Out, said+o.dryRun.suffix())
	if o.dryRun.enabled() {
		return nil
	}
	if err := recordEvent(ctx, c, lease, metav1.NewMicroTime(o.clock.Now()), EventOperatorRelease, "Release", note); err != nil {
		fmt.Fprintf(o.streams.ErrOut, "Warning: the lease was released, but %v\n", err)
	}
	return nil
}
