package api_test

import (
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
)

// holderPattern is the holderIdentity pattern as the API server quotes it.
const holderPattern = `should match '^[a-z0-9]([a-z0-9._:-]*[a-z0-9])?$'`

var _ = Describe("FencedLease schema validation on create", func() {
	DescribeTable("refuses an invalid field, naming the field and the rule",
		func(spec map[string]any, field string, rules ...string) {
			err := k8sClient.Create(ctx, newUnstructuredLease("invalid", spec))
			expectInvalid(err, append([]string{field}, rules...)...)

			// Nothing was stored.
			got := newUnstructuredLease("invalid", nil)
			err = k8sClient.Get(ctx, types.NamespacedName{Namespace: namespace, Name: "invalid"}, got)
			Expect(apierrors.IsNotFound(err)).To(BeTrue(), "want NotFound, got %v", err)
		},

		bounds("leaseDurationSeconds", 1, 3600),
		Entry("leaseDurationSeconds -1",
			map[string]any{"leaseDurationSeconds": int64(-1)},
			"spec.leaseDurationSeconds", "should be greater than or equal to 1"),
		Entry("leaseDurationSeconds 99999999999 (overflows int32)",
			map[string]any{"leaseDurationSeconds": int64(99999999999)},
			"spec.leaseDurationSeconds", "should be less than or equal to 3600", "must be of type integer with format int32"),
		Entry("leaseDurationSeconds as a string",
			map[string]any{"leaseDurationSeconds": "15s"},
			"spec.leaseDurationSeconds", `must be of type integer`),

		bounds("lockDelaySeconds", 0, 3600),

		Entry("identityBinding Bogus",
			map[string]any{"identityBinding": "Bogus"},
			"spec.identityBinding", `Unsupported value: "Bogus": supported values: "None", "ServiceAccount", "Pod"`),
		Entry("identityBinding in the wrong case",
			map[string]any{"identityBinding": "pod"},
			"spec.identityBinding", `Unsupported value: "pod"`),

		// At most 2^62: tokens above it could overflow int64.
		bounds("minFencingToken", 0, 4611686018427387904),

		Entry("requests: holderIdentity empty",
			map[string]any{"requests": []any{request("", "alice", 0)}},
			"spec.requests[0].holderIdentity", "should be at least 1 chars long"),
		Entry("requests: holderIdentity missing",
			map[string]any{"requests": []any{map[string]any{"user": "alice"}}},
			"spec.requests[0].holderIdentity", "Required value"),
		Entry("requests: holderIdentity 129 characters",
			map[string]any{"requests": []any{request(strings.Repeat("a", 129), "alice", 0)}},
			"spec.requests[0].holderIdentity", "may not be more than 128"),
		badHolderIdentities(),
		Entry("requests: user empty",
			map[string]any{"requests": []any{request("worker-a", "", 0)}},
			"spec.requests[0].user", "should be at least 1 chars long"),
		Entry("requests: user missing",
			map[string]any{"requests": []any{map[string]any{"holderIdentity": "worker-a"}}},
			"spec.requests[0].user", "Required value"),
		Entry("requests: user 513 characters",
			map[string]any{"requests": []any{request("worker-a", strings.Repeat("u", 513), 0)}},
			"spec.requests[0].user", "may not be more than 512"),
		Entry("requests: renewSequence -1",
			map[string]any{"requests": []any{request("worker-a", "alice", -1)}},
			"spec.requests[0].renewSequence", "should be greater than or equal to 0"),
		Entry("requests: the second item is checked too",
			map[string]any{"requests": []any{request("worker-a", "alice", 0), request("Worker-B", "bob", 0)}},
			"spec.requests[1].holderIdentity", holderPattern),
		Entry("requests: 65 items (more than 64)",
			map[string]any{"requests": manyRequests(65)},
			"spec.requests", "must have at most 64 items"),
		Entry("requests: duplicate holderIdentity (list-map key)",
			map[string]any{"requests": []any{request("worker-a", "alice", 0), request("worker-a", "mallory", 0)}},
			"spec.requests[1]", "Duplicate value"),
	)
})

// bounds are the entries of an integer field's range [min, max]: min-1 and
// max+1, each refused naming the field and the bound it breaks.
func bounds(field string, minimum, maximum int64) []TableEntry {
	return []TableEntry{
		Entry(fmt.Sprintf("%s %d", field, minimum-1), map[string]any{field: minimum - 1},
			"spec."+field, fmt.Sprintf("should be greater than or equal to %d", minimum)),
		Entry(fmt.Sprintf("%s %d", field, maximum+1), map[string]any{field: maximum + 1},
			"spec."+field, fmt.Sprintf("should be less than or equal to %d", maximum)),
	}
}

// badHolderIdentities are one entry per way a request's holderIdentity can
// fail the DNS-subdomain pattern.
func badHolderIdentities() []TableEntry {
	var entries []TableEntry
	for _, c := range []struct{ how, id string }{
		{"with uppercase", "Worker-A"},
		{"with a space", "worker a"},
		{"starting with '-'", "-worker"},
		{"ending with '.'", "worker."},
		{"with '/'", "jobs/worker"},
	} {
		entries = append(entries, Entry("requests: holderIdentity "+c.how,
			map[string]any{"requests": []any{request(c.id, "alice", 0)}},
			"spec.requests[0].holderIdentity", holderPattern))
	}
	return entries
}

// manyRequests returns n valid, distinct requests.
func manyRequests(n int) []any {
	out := make([]any, 0, n)
	for i := range n {
		out = append(out, request(fmt.Sprintf("worker-%d", i), "alice", 0))
	}
	return out
}
