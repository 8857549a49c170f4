// Package fencedlease is the FencedLease reconciler: it grants, renews,
// expires and hands over leases on its own clock (invariants I1-I3 in
// docs/design.md).
//
// It owns:
//   - the reconcile loop (fencedlease_controller.go): read, decide, send the
//     decision's write (decision.apply) with an optimistic lock on the
//     resourceVersion it decided from, then report (metrics, Events, logs);
//   - the decision (decide.go), a pure function of the lease, the
//     controller's own observation of the holder, the stored epoch and the
//     clock, in named steps: the token base, the current tenure (ended by its
//     request, running on, expired), the grant to the next request, the
//     waiting list, the removal of the expired request. A decision carries
//     its whole write (apply), so neither the reconciler nor a test computes
//     one; each step has rows in decide_table_test.go's TestDecide, and
//     decide_test.go's simulator drives sequences of them;
//   - the expiry arithmetic (timing.go);
//   - the epoch store (epochstore.go), which carries the highest token of a
//     lease name across delete-then-recreate in ConfigMap shards.
//
// It imports only the API (api/v1alpha1), the clock contract
// (pkg/fence/timing), controllers/metrics, client-go, apimachinery and
// controller-runtime. It must not import the webhooks
// (controllers/webhooks/...), the assembly (controllers/operator), the rest
// of pkg/fence, or any test or hack package: what it shares with the webhooks
// is the wire contract in api/v1alpha1 and the clock contract.
package fencedlease
