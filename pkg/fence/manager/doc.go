// Package manager gives a controller-runtime Manager fenced leader election in
// one line: a FencedLease elects the leader, and the manager's fenced client
// stamps every reconciler write with the leader's token.
//
//	mgr, err := manager.New(cfg, ctrl.Options{Scheme: scheme},
//		manager.LeaseOptions{Namespace: "team-a", Name: "widget-controller"})
//	...
//	r := &WidgetReconciler{Client: mgr.GetFencedClient()}
//	err = ctrl.NewControllerManagedBy(mgr).For(&Widget{}).Complete(r)
//	...
//	err = mgr.Start(ctx) // returns ErrLeaseLost when the lease is lost
//
// # Guarantees
//
//   - Runnables that need leader election (controllers, and any runnable that
//     does not say otherwise, as in controller-runtime) start only after the
//     kubefence controller granted this identity the lease, and their context
//     is the tenure's context from package fence: it is cancelled before the
//     controller can expire the lease, counted on the local monotonic clock from
//     the moment the last renewal was sent.
//   - Writes through GetFencedClient carry the current token (or are not sent
//     when there is none), so a replica that lost the lease while paused cannot
//     change guarded objects: the kubefence webhook refuses its writes.
//   - When the tenure ends for any reason other than Start's context ending,
//     the leader-election runnables are stopped and Start returns an error
//     wrapping ErrLeaseLost. The process should exit (Kubernetes restarts it),
//     as with controller-runtime's "leader election lost": controllers cannot
//     be started twice.
//   - On a normal stop the leader-election runnables are stopped and waited for
//     (up to GracefulShutdownTimeout) before the request is withdrawn, so the
//     next replica is granted at once, after this one stopped writing.
//
// # Why not controller-runtime's LeaderElectionResourceLockInterface
//
// controller-runtime accepts a custom client-go resourcelock.Interface, and
// package resourcelock provides one backed by a FencedLease. Plugged in there
// it is safe (writes are fenced, and runnables start only after the grant),
// but it loses guarantees this package keeps:
//
//   - controller-runtime runs leader-election runnables with the manager's
//     internal context, not the elector's, and learns of a loss only when
//     client-go's renew loop gives up: RenewDeadline after the last successful
//     renewal, counted from when the answer arrived and with the client's own
//     durations. The FencedLease's duration is chosen by whoever created it;
//     reconcilers can keep running after the controller has granted someone
//     else (their writes are refused, but their other effects are not).
//   - A client-go candidate queues only when the lease looks free or stale to
//     it, so there is no FIFO order and hand-over waits for retry periods;
//     package fence queues at once and learns of its grant from a watch.
//   - A stale refusal cannot end the tenure before RenewDeadline.
//
// So this Manager switches controller-runtime's own leader election off and
// runs a fence.Elector as a runnable that needs no leader election. Its Add
// keeps the runnables that need leader election to itself, starts them with
// the tenure's context when the lease is granted, and stops the manager when
// the tenure ends. Because the tenure's context is the one package fence
// guarantees, the leader-election runnables stop before anyone else can
// start.
//
// # Non-guarantees
//
//   - Runnables added to the embedded manager directly, and controllers built
//     with NeedLeaderElection set to false, run on every replica; writes through
//     GetFencedClient from them are refused locally while the replica does not
//     lead (fence.ErrNotLeading).
//   - GetClient is not fenced: only writes through GetFencedClient carry the
//     token and the guard label. Use it for every write to a guarded kind.
//   - GetFencedClient fences objects in the lease's namespace
//     (LeaseOptions.Namespace) only. The guard label names a FencedLease in
//     the object's own namespace, so a token stamped on an object elsewhere
//     would be checked against another lease of the same name, and on a
//     cluster-scoped object by none (admission refuses the guard there). Such
//     writes are refused locally with fence.ErrUnfenceable, before anything
//     is sent. A controller that also writes into other namespaces or
//     cluster-scoped objects writes those with GetClient, unfenced, or with
//     the client of a lease in each namespace (docs/user-guide.md).
//
// It imports only api/ and pkg/fence among kubefence packages (with
// controller-runtime), and must not import controllers/, cmd/ or any test or
// hack package: it is linked into users' controllers.
package manager
