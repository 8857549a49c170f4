// Package explorer is kubefence's protocol explorer: an explicit-state,
// breadth-first exploration of a model of one FencedLease whose steps run the
// production rules, checked against the promise's invariants.
//
// What runs is the shipped code, called with the model's clocks:
//   - the controller's decision and the write it produces
//     (controllers/fencedlease: Decide, Step.Write, Step.Remember: one pass
//     of the reconcile loop);
//   - the fencing webhook's admission handler (controllers/webhooks/fencing:
//     Handler.Handle, with its live lease reader reading the model's lease and
//     a fake clock that moves while the read is under way: the decision, the
//     cut-off, the expiry bound and the slow-decision refusal);
//   - the FencedLease webhook's rules for every lease write
//     (controllers/webhooks/fencedlease: FencedLeaseValidator);
//   - the client's renew and withdraw patches and an operator's release and
//     hand-over (pkg/fence/protocol), the client's local deadline (pkg/fence
//     Config.Deadline), the interleaving its write gate allows, and what its
//     release does after a write without an answer (pkg/fence Writes, each
//     asked once by a probe: gate.go);
//   - heartbeat renewals (heartbeat.go): the controller's live read of the
//     heartbeat when Step.NeedsLiveHeartbeat asks for it, its
//     HeartbeatTracker's sighting rule, and the fencing webhook's read of the
//     heartbeat's renewTime; the client's heartbeat update is a separate
//     object's write, in flight until it commits (possibly after the
//     controller's last look), counted for its deadline as pkg/fence's
//     Elector counts it.
//
// Each of findings 1, 2 and 4a of the 2026-12-01 safety review, and the gap
// the explorer found itself (a write given up on admitted again, closed
// since: f-readmit), and each of the heartbeat expiry's rules (hb-lagged:
// heartbeatLagged's wait; hb-live: the live read before the removal), is
// found with its fix undone in the shipped code:
// hack/explorer-revert.sh applies testdata/revert/<finding>.patch to a copy
// of the tree and runs the test that passes here (make explorer-reverts).
//
// The environment is the model's: clients (honest electors and, where a
// configuration says so, a malicious user choosing any identity), the API
// server (optimistic concurrency, generation, JSON patch tests, admission
// inside the compare-and-swap of a guarded object), clock offsets between
// parties, the webhook's decision delay, the delay from admission to commit,
// the controller's reaction delay, its cache, and its restarts.
//
// Invariants, judged on the model's ground truth (which request instance was
// granted which token, and the commit order):
//   - stale-commit: no write with token t commits after the commit that ended
//     t's tenure or granted a larger token;
//   - not-holder: no tokenless write commits unless its writer owns the
//     tenure that is live at the commit;
//   - live-refused: an honest holder inside its own deadline, whose tenure is
//     live, is not refused as stale, nor expired by the controller.
//
// A counterexample is the shortest (breadth-first) sequence of steps; it is
// printed as a numbered trace. See docs/design.md ("How the protocol is
// checked") and docs/reliability.md ("Protocol explorer") for the bounds and
// what is not modelled.
//
// It imports the API, the controller, the two webhooks and pkg/fence; nothing
// imports it.
package explorer
