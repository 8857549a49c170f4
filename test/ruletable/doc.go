// Package ruletable holds the one case table of each admission rule that
// kubefence enforces with two back ends, and what checks a back end's
// answer against a row:
//
//   - the fencing rule (FencingRows): Go in controllers/webhooks/fencing
//     (Decide, behind the fencing webhooks), CEL in the
//     ValidatingAdmissionPolicy kubefence-fencing (controllers/policy,
//     policy.go);
//   - the FencedLease rules, I6 (LeaseRows): Go in
//     controllers/webhooks/fencedlease (FencedLeaseValidator), CEL in the
//     policy kubefence-fencedleases (controllers/policy, leasepolicy.go).
//
// A row describes the input (operation, subresource, the stored and the
// written object, the requester, the lease's state) and the verdict both
// modes give (allowed, or the refusal's class and a fragment of its
// message). Where the back ends legitimately differ (the webhook reads the
// lease live and applies its clock, the policy reads the tenure table; the
// messages differ) the row says so (Webhook, Policy and Why; WebhookMsg and
// PolicyMsg), and the check holds each mode to exactly its own verdict.
//
// Three runners read the same rows:
//
//   - the Go back end in process (webhook mode) and
//   - the CEL back end in process (policy mode), both through test/inprocess
//     (the API server's own admission code around the operator's handlers
//     and generated policies): TestFencingRuleTable and the differential
//     FuzzDecide in controllers/webhooks/fencing, TestLeaseRuleTable in
//     controllers/webhooks/fencedlease (go test -short, make test-unit);
//   - both modes on a real API server: test/enforcement TestFencingTable
//     (runFencingRows, runLeaseRows), but for the rows marked UnitOnly,
//     which say why.
//
// It imports the production packages it names and test/inprocess; no
// production package may import it.
package ruletable
