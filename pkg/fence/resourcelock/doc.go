// Package resourcelock lets client-go's tools/leaderelection elect over a
// FencedLease: Lock implements resourcelock.Interface, so existing
// leaderelection.RunOrDie code gains server-minted fencing tokens by swapping
// its lock.
//
// For controller-runtime managers use package
// github.com/kubefence/kubefence/pkg/fence/manager instead: it is the
// recommended path, and it keeps every guarantee of package fence. This
// package exists for plain client-go programs that already run
// leaderelection.RunOrDie and want tokens with a one-line change.
//
// # How the client-go model maps onto a FencedLease
//
// client-go's elector is client-side: it writes a LeaderElectionRecord with
// its own timestamps and decides on its own clock when a lease has expired. A
// FencedLease is server-side: the kubefence controller grants, expires and
// reassigns on its clock, and clients only append, renew and withdraw their
// own request in spec.requests. Lock translates honestly:
//
//   - Get returns a record that reflects the FencedLease status:
//     HolderIdentity, LeaseDurationSeconds, AcquireTime and RenewTime (the
//     controller's clock) and LeaderTransitions. Nothing in it comes from a
//     client. The raw record also carries the fencing token, so the elector
//     sees every grant and every controller-observed renewal as a change.
//   - Update (and Create, for a lease that appeared after Get) appends this
//     identity's request when it has none, or renews it: one JSON patch that
//     tests the request is exactly as last seen and raises its renewSequence.
//     The timestamps and duration in the elector's record are ignored.
//   - Update reports success only when the controller has granted this
//     identity (status.holderIdentity is this identity) and the patch's answer
//     still says so. While the request waits in the queue, Update returns an
//     error, so the elector keeps trying and never calls OnStartedLeading
//     before the grant.
//   - An Update that clears HolderIdentity (the elector's ReleaseOnCancel)
//     releases: it drops the token, so Client sends no new write, waits until
//     every write of Client in flight has returned, and only then withdraws
//     the request. The controller hands the lease to the next waiter at once,
//     so no write of the tenure commits after that grant. If a write returned
//     without an answer (it may still be admitted, and commit), the request
//     stays instead, renewed no more, and the controller expires the tenure.
//     client-go does not wait for OnStartedLeading to return before it
//     releases, so writes not sent through Client are not waited for. The
//     release has client-go's RenewDeadline: if the writes take longer, the
//     request stays and the controller expires the tenure instead.
//   - Update renews, and Token hands out the token of, only this Lock's own
//     request: the one it appended, as its own writes left it
//     (protocol.OwnRequest). A fresh Lock that finds a request of its identity
//     (another process's, or its previous process's after a restart) does not
//     renew it: Update returns ErrNotGranted until the controller expired and
//     removed it (or its maker withdrew it), then queues a request of its
//     own, which is granted a new token. If another process renews the Lock's
//     request, the Lock drops its token and leaves the request to it; a
//     release withdraws only the Lock's own request.
//   - Token returns the token of the current grant. It is valid until a local
//     deadline counted, like package fence, on the monotonic clock from the
//     moment the last successful renewal was sent: sent + L - SafetyMargin,
//     where L is the tenure's status.leaseDurationSeconds. Client returns a
//     fence.FencedClient that stamps that token on every write.
//
// # What differs from a coordination.k8s.io Lease
//
//   - The controller decides expiry. The elector's LeaseDuration,
//     RenewDeadline and RetryPeriod only decide how often it asks and when it
//     gives up; they are advisory. The lease duration that counts is
//     spec.leaseDurationSeconds of the FencedLease, chosen by whoever created
//     it.
//   - The elector cancels the OnStartedLeading context on its own schedule:
//     after RenewDeadline without a successful renewal, counted from when it
//     received the answer. That can be later than the controller's expiry, so
//     the context is NOT guaranteed to end before someone else is granted (the
//     guarantee package fence gives). With ReleaseOnCancel it is later still:
//     client-go cancels that context only after its release attempt, which can
//     take another RenewDeadline when the API server does not answer. Keep
//     RetryPeriod*1.2 + RenewDeadline (twice RenewDeadline with
//     ReleaseOnCancel) well below the FencedLease duration, and rely on Token
//     and fenced writes: Token turns false at the local deadline, so a
//     FencedClient refuses to send, and the kubefence webhook refuses a write
//     carrying a stale token anyway.
//   - Tokens come from the server. A renewal never changes the token. When the
//     lease is lost and granted to this identity again while the elector is
//     still inside its RenewDeadline, client-go treats the new grant as a
//     renewal (as it does with a plain Lease); Token then returns the new,
//     larger token. Read Token at every write (a FencedClient does).
//   - Waiting candidates queue only when the elector decides to try: when the
//     record shows no holder, or has not changed for a lease duration. So
//     there is no first-come-first-served order among client-go candidates and
//     hand-over waits for the next RetryPeriod; package fence queues at once and
//     learns of its grant from a watch.
//   - Create does not create the FencedLease: platform teams create it (its
//     duration and lock-delay are theirs to choose), and clients have no RBAC
//     to create one.
//   - A write refused as stale through Client makes the Lock refuse to renew
//     that token, so the elector stops within its RenewDeadline.
//
// It imports only api/, pkg/fence and pkg/fence/protocol among kubefence
// packages (with client-go), and must not import controllers/, cmd/ or any
// test or hack package: it is linked into users' controllers.
package resourcelock
