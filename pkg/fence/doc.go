// Package fence is the kubefence client helper: it acquires, renews and
// releases a FencedLease for one holder identity, and hands the holder the
// lease's fencing token.
//
// It is modelled on client-go's tools/leaderelection, with what that package
// cannot give: the token comes from the server and increases with every grant,
// expiry is decided by the kubefence controller on its own clock (never a
// client timestamp), waiting candidates learn of their grant from a watch, and a
// voluntary release hands the lease over at once (unless a write of the tenure
// ended without an answer: then the tenure expires, see Writes.Quiesce).
//
// # Guarantees
//
//   - The context passed to OnStartedLeading is cancelled before the controller
//     can expire the lease. The helper counts its deadline on the local monotonic
//     clock from the moment it sent its last successful renewal; the controller
//     counts the lease duration (plus a drift allowance) from the moment it
//     observed that renewal, which is later. So an honest holder stops before
//     anyone else can start, whatever the network delay; and, with clocks
//     within the operator's skew, before the fencing webhook stops accepting
//     its token (pkg/fence/timing).
//   - A renewal is one API write (a JSON patch of the holder's own request), and it
//     never changes the token.
//   - OnStoppedLeading runs whenever OnStartedLeading ran, on every exit path.
//   - The token handed to OnStartedLeading is the one the server granted; a
//     renewal succeeds only if the server's answer still names this identity with
//     that token.
//   - Two Electors with one identity, in two processes, do not lead one
//     tenure together: an Elector leads, renews and withdraws only the request it appended itself,
//     as its own writes left it (protocol.OwnRequest). A new Elector that finds
//     a request of its identity (another process's, or its previous process's
//     after a restart) waits until the controller expired and removed it, or
//     its maker withdrew it, and queues its own: a new tenure, a new token. An
//     Elector whose request another process renews steps down and leaves the
//     request to it. Run called again on the same Elector continues a tenure
//     it kept (DisableReleaseOnCancel).
//
// # Non-guarantees
//
//   - The helper cannot stop code that is already running: a process paused past
//     its deadline (GC, SIGSTOP, a suspended VM) resumes believing it still leads
//     until it notices the cancelled context. That is what fencing is for: every
//     write to a guarded object must carry the token, and the kubefence webhook
//     refuses writes whose token is stale. Effects outside guarded objects
//     (e-mails, external APIs, reads) are not protected.
//   - If the kubefence controller is down, nobody is granted or expired: the
//     current holder's context is still cancelled at its deadline if it cannot
//     renew, but nobody else takes over until the controller returns.
//
// # Layout
//
// The requests this package writes (who-am-I, the renew and withdraw patches)
// are built by pkg/fence/protocol, which the client-go lock
// (pkg/fence/resourcelock) and kubectl fence use too; the names on the wire
// are in api/v1alpha1. pkg/fence imports only those two kubefence packages,
// never an operator package (controllers/...), test or hack.
package fence
