package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence/protocol"
)

// Event reasons and the reporting controller of operator actions.
const (
	EventOperatorRelease  = "OperatorRelease"
	EventOperatorHandover = "OperatorHandover"
	reportingController   = "kubectl-fence"
)

// patchAttempts bounds how often an action is retried when the lease changed
// between read and patch (a test operation failed).
const patchAttempts = 3

// patchLease reads the lease, builds a guarded JSON patch from it and applies
// it. When a test operation fails because the lease changed meanwhile, it
// reads again and rebuilds, so the preconditions are checked against the new
// state; it returns the lease as it was when the patch applied.
//
// With dryRun client it only reads and builds; with server the patch is sent
// as a server-side dry run.
func patchLease(ctx context.Context, c *clients, name, dryRun string, build func(*coordv1alpha1.FencedLease) (protocol.Patch, error)) (*coordv1alpha1.FencedLease, error) {
	var lastRV string
	var lastErr error
	for range patchAttempts {
		lease, err := c.getLease(ctx, name)
		if err != nil {
			return nil, err
		}
		if lastErr != nil && lease.ResourceVersion == lastRV {
			// Nothing changed, so the refusal was not a race: report it.
			return nil, lastErr
		}
		ops, err := build(lease)
		if err != nil {
			return nil, err
		}
		if dryRun == dryRunClient {
			return lease, nil
		}
		var opts []client.PatchOption
		if dryRun == dryRunServer {
			opts = append(opts, client.DryRunAll)
		}
		err = c.kube.Patch(ctx, lease.DeepCopy(), ops, opts...)
		if err == nil {
			return lease, nil
		}
		if !apierrors.IsInvalid(err) {
			return nil, err
		}
		lastRV, lastErr = lease.ResourceVersion, err
	}
	return nil, fmt.Errorf("fencedlease %s/%s kept changing; try again: %w", c.namespace, name, lastErr)
}

// actionHelp ends an operator action's help: who may act, what the write
// does, and the reason of the Event that records it.
func actionHelp(reason string) string {
	return `The FencedLease webhook lets a client change only its own request, so this
needs a member of the manager's lease-admin groups (--lease-admin-group,
default system:masters). The write carries the annotation
coordination.kubefence.io/revoked, and the controller grants the next request
only after the commit lag (1 s by default), once the revoked holder's admitted
writes have committed.
The action is recorded as an Event with reason ` + reason + "."
}

// actionExample is an operator action's examples: the command line, then its
// rehearsal.
func actionExample(cmdline string) string {
	return "  " + cmdline + ` -n jobs

  # Rehearse: the API server and the webhook judge the write, nothing changes
  ` + cmdline + " -n jobs --dry-run=server"
}

// actionOptions are an operator action's (release, handover): the
// holderIdentity it acts on and --dry-run.
type actionOptions struct {
	*rootOptions
	id     string
	dryRun dryRunFlag
}

// addFlags adds --dry-run and the required flag name that sets the identity,
// completed with the lease's requests (waitingOnly: the waiters only).
func (o *actionOptions) addFlags(cmd *cobra.Command, name, usage string, waitingOnly bool) {
	cmd.Flags().StringVar(&o.id, name, "", usage)
	_ = cmd.MarkFlagRequired(name)
	_ = cmd.RegisterFlagCompletionFunc(name, completeHolders(o.rootOptions, waitingOnly))
	o.dryRun.addFlag(cmd)
}

// operatorAction is release or handover: an operator's guarded JSON patch of
// one lease's requests, recorded as an Event.
type operatorAction struct {
	// reason and action of the Event.
	reason, action string
	// done completes "the lease was ..." when the Event cannot be recorded.
	done string
	// doing names the action in errors ("releasing ID from fencedlease NS/NAME").
	doing func(namespace string) string
	// build makes the patch from the lease as read.
	build func(*coordv1alpha1.FencedLease) (protocol.Patch, error)
	// outcome is what happened, from the lease as it was when the patch
	// applied and who acted: the line to print (after "fencedlease NS/NAME: ")
	// and the Event's note.
	outcome func(lease *coordv1alpha1.FencedLease, user string) (said, note string)
}

// act validates the dry-run flag, applies the action's patch to the lease
// name, and turns a refusal into advice. It prints what happened and, unless
// it was a dry run, records it as an Event; an Event it cannot record only
// gets a warning (the action is done).
func (o *rootOptions) act(ctx context.Context, name string, dryRun dryRunFlag, a operatorAction) error {
	if err := dryRun.validate(); err != nil {
		return err
	}
	c, err := o.clients()
	if err != nil {
		return err
	}
	user, _ := protocol.WhoAmI(ctx, c.kube) // "" when it cannot tell: only for Events and advice
	lease, err := patchLease(ctx, c, name, dryRun.value, a.build)
	if err != nil {
		return explainRefusal(a.doing(c.namespace), err, user)
	}
	said, note := a.outcome(lease, user)
	fmt.Fprintf(o.streams.Out, "fencedlease %s/%s: %s%s\n", c.namespace, name, said, dryRun.suffix())
	if dryRun.enabled() {
		return nil
	}
	if err := recordEvent(ctx, c, lease, metav1.NewMicroTime(o.clock.Now()), a.reason, a.action, note); err != nil {
		fmt.Fprintf(o.streams.ErrOut, "Warning: the lease was %s, but %v\n", a.done, err)
	}
	return nil
}

// explainRefusal turns a refused write into advice. The FencedLease webhook
// lets a client change only its own request; an operator action changes
// someone else's, so the operator must be a user the webhook trusts.
func explainRefusal(action string, err error, user string) error {
	if !apierrors.IsForbidden(err) {
		return fmt.Errorf("%s: %w", action, err)
	}
	who := "your user"
	if user != "" {
		who = user
	}
	return fmt.Errorf(`%s was refused: %w

Operator actions remove or reorder other clients' requests and revoke the
holder's tenure. The FencedLease admission webhook allows that to members of
the manager's lease-admin groups (--lease-admin-group, default
system:masters): add %s to one of them. (--controller-user also works, but
it is full controller power: it can write status and so mint grants.) If the
refusal comes from RBAC instead, you need "patch" on
fencedleases.coordination.kubefence.io`, action, err, who)
}

// recordEvent records an operator action as an events.k8s.io/v1 Event
// regarding the lease, beside the controller's own Events.
func recordEvent(ctx context.Context, c *clients, lease *coordv1alpha1.FencedLease, now metav1.MicroTime, reason, action, note string) error {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	if len(host) > 128 {
		host = host[:128]
	}
	ev := &eventsv1.Event{
		// Named as client-go's recorder names Events (the wall clock, not the
		// injected one, keeps names unique).
		ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", lease.Name, time.Now().UnixNano()), Namespace: lease.Namespace},
		EventTime:           now,
		ReportingController: reportingController,
		ReportingInstance:   host,
		Action:              action,
		Reason:              reason,
		Type:                corev1.EventTypeNormal,
		Note:                note,
		Regarding: corev1.ObjectReference{
			APIVersion:      coordv1alpha1.GroupVersion.String(),
			Kind:            "FencedLease",
			Namespace:       lease.Namespace,
			Name:            lease.Name,
			UID:             lease.UID,
			ResourceVersion: lease.ResourceVersion,
		},
	}
	if err := c.kube.Create(ctx, ev); err != nil {
		return fmt.Errorf("recording event: %w", err)
	}
	return nil
}

// operatorName names the operator in Event notes.
func operatorName(user string) string {
	if user == "" {
		return "an operator"
	}
	return "operator " + user
}
