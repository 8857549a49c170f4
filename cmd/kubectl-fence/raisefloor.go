package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// maxMinFencingToken is the CRD's maximum for spec.minFencingToken (2^62).
const maxMinFencingToken int64 = 1 << 62

// defaultMargin is how far above the highest token seen raise-floor sets the
// floor by default: tokens issued after the last look (or after a backup) are
// covered, and 2^62 stays out of reach.
const defaultMargin int64 = 1_000_000

type raiseFloorOptions struct {
	*rootOptions
	margin int64
	known  int64
	dryRun dryRunFlag
}

func newRaiseFloorCmd(root *rootOptions) *cobra.Command {
	o := &raiseFloorOptions{rootOptions: root}
	cmd := leaseCommand(root, &cobra.Command{
		Use:   "raise-floor NAME",
		Short: "Raise spec.minFencingToken above every token a lease or its guarded objects have seen",
		Long: `Set the lease's spec.minFencingToken (the floor every later grant's token is
above) to the highest token the lease and its guarded objects have seen, plus
--margin. The tokens looked at are status.fencingToken, status.tokenBase,
spec.minFencingToken, the previous holder's token, the
kubefence.io/fencing-token annotation of every object labelled
kubefence.io/lease=NAME (any kind, in the lease's namespace), and --known for a
token known from elsewhere (for example Prometheus's
max_over_time(kubefence_lease_fencing_token[30d]), which an etcd restore does
not roll back).

This is step 2 of the etcd restore runbook (docs/operations.md): a restore
rolls tokens back, and guarded objects may carry tokens the restored lease
would issue again. The floor only goes up: it counts among the tokens seen, so
every run raises it by --margin at least. The FencedLease webhook lets only lease admins (--lease-admin-group) and
controller users change it.

The current tenure keeps its token until it ends; end it with
'kubectl fence release NAME --holder HOLDER' so the next grant is above the floor.`,
		Example: `  kubectl fence raise-floor job-a -n jobs

  # See the floor it would set, without writing
  kubectl fence raise-floor job-a -n jobs --dry-run=server

  # Include the highest token Prometheus saw
  kubectl fence raise-floor job-a -n jobs --known 1043000`,
	}, "kubectl fence raise-floor my-lease", o.run)
	cmd.Flags().Int64Var(&o.margin, "margin", defaultMargin, "How far above the highest token seen to set the floor.")
	cmd.Flags().Int64Var(&o.known, "known", 0, "A token known to have been issued for this lease from elsewhere (Prometheus, logs); included in the maximum.")
	o.dryRun.addFlag(cmd)
	return cmd
}

// tokenSource is where the highest token was seen.
type tokenSource struct {
	token int64
	where string
}

func (o *raiseFloorOptions) run(ctx context.Context, name string) error {
	if err := o.dryRun.validate(); err != nil {
		return err
	}
	if o.margin < 1 {
		return fmt.Errorf("--margin must be at least 1 (the floor must be above the highest token seen), got %d", o.margin)
	}
	if o.known < 0 {
		return fmt.Errorf("--known must be a token (0 or more), got %d", o.known)
	}
	c, err := o.clients()
	if err != nil {
		return err
	}
	lease, err := c.getLease(ctx, name)
	if err != nil {
		return err
	}
	guarded, warnings, err := guardedObjects(ctx, c, lease)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		fmt.Fprintf(o.streams.ErrOut, "Warning: %s; their tokens are not included\n", w)
	}

	for range patchAttempts {
		highest := highestToken(lease, guarded, o.known)
		if highest.token > maxMinFencingToken-o.margin {
			return fmt.Errorf("the floor %d + margin %d would exceed the maximum minFencingToken 2^62 (%d): use a smaller --margin", highest.token, o.margin, maxMinFencingToken)
		}
		floor := highest.token + o.margin
		// floor is above spec.minFencingToken (counted in highest), so the
		// write raises it, as the API requires.
		old := lease.Spec.MinFencingToken
		err = o.patch(ctx, c, lease, floor)
		if err == nil {
			fmt.Fprintf(o.streams.Out, "fencedlease %s/%s: spec.minFencingToken raised from %d to %d (highest token seen: %d, %s; margin %d)%s\n",
				c.namespace, name, old, floor, highest.token, highest.where, o.margin, o.dryRun.suffix())
			if h := lease.Status.HolderIdentity; h != "" {
				fmt.Fprintf(o.streams.Out, "The current tenure (%s, token %d) keeps its token until it ends; end it with: kubectl fence release %s -n %s --holder %s\n",
					h, lease.Status.FencingToken, name, c.namespace, h)
			}
			return nil
		}
		if !apierrors.IsConflict(err) {
			return explainFloorRefusal(c, name, err)
		}
		// The lease changed meanwhile (a renewal, a grant): read it again.
		if lease, err = c.getLease(ctx, name); err != nil {
			return err
		}
	}
	return fmt.Errorf("fencedlease %s/%s kept changing while raising its floor; try again: %w", c.namespace, name, err)
}

// patch sets spec.minFencingToken, only on the lease as read (optimistic lock
// on its resourceVersion).
func (o *raiseFloorOptions) patch(ctx context.Context, c *clients, lease *coordv1alpha1.FencedLease, floor int64) error {
	if o.dryRun.value == dryRunClient {
		return nil
	}
	updated := lease.DeepCopy()
	updated.Spec.MinFencingToken = floor
	var opts []client.PatchOption
	if o.dryRun.value == dryRunServer {
		opts = append(opts, client.DryRunAll)
	}
	return c.kube.Patch(ctx, updated, client.MergeFromWithOptions(lease, client.MergeFromWithOptimisticLock{}), opts...)
}

// highestToken is the highest token the lease and its guarded objects have
// seen, and where.
func highestToken(lease *coordv1alpha1.FencedLease, guarded []guardedObject, known int64) tokenSource {
	best := tokenSource{token: 0, where: "no token issued yet"}
	consider := func(t int64, where string) {
		if t > best.token {
			best = tokenSource{token: t, where: where}
		}
	}
	consider(lease.Status.FencingToken, "status.fencingToken")
	consider(lease.Status.TokenBase, "status.tokenBase")
	consider(lease.Spec.MinFencingToken, "spec.minFencingToken")
	if p := lease.Status.PreviousHolder; p != nil {
		consider(p.FencingToken, "status.previousHolder.fencingToken")
	}
	for _, g := range guarded {
		if t, err := strconv.ParseInt(g.Token, 10, 64); err == nil && t >= 0 {
			consider(t, "on "+g.kindName()+" "+g.Name)
		}
	}
	consider(known, "--known")
	return best
}

// explainFloorRefusal tells who may change a lease's settings.
func explainFloorRefusal(c *clients, name string, err error) error {
	if apierrors.IsForbidden(err) {
		return fmt.Errorf(`raising the floor of fencedlease %s/%s was refused: %w

The FencedLease webhook lets only lease admins (the manager's
--lease-admin-group, default system:masters) and controller users
(--controller-user) change spec.minFencingToken; RBAC needs "patch" on
fencedleases.coordination.kubefence.io`, c.namespace, name, err)
	}
	return fmt.Errorf("raising the floor of fencedlease %s/%s: %w", c.namespace, name, err)
}
