// Package fencedlease is the FencedLease admission webhook (invariant I6 in
// docs/design.md): who may change which part of a FencedLease. Only the
// controller grants, expires and writes status; a client adds, renews
// (stamping renewTime, bounded by this webhook's clock) and withdraws only
// its own request; lease admins change settings and act as operators
// (release, hand-over) with the revoked annotation; clean-up users delete.
//
// It owns the validator (fencedlease_webhook.go), its pure rules and a fuzz
// test with a committed corpus. The rules' cases are one table,
// test/ruletable.LeaseRows, which TestLeaseRuleTable runs against this
// validator and against the policy's CEL rendering (controllers/policy) in
// process, and test/enforcement replays on a real API server in both modes.
// The cases about patch types, server-side apply and RBAC are in
// test/operator/admission_test.go.
//
// It imports only the API (api/v1alpha1), controllers/metrics, apimachinery
// and controller-runtime. It must not import the reconciler
// (controllers/fencedlease), the fencing webhook, the assembly
// (controllers/operator), pkg/fence, or any test or hack package.
package fencedlease
