package api_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	coordinationv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

var _ = Describe("FencedLease transition rules on update", func() {
	const name = "held"

	// Every spec starts from the same lease: identityBinding ServiceAccount, a
	// token floor of 10, and two requests (worker-a has renewed 5 times).
	BeforeEach(func() {
		l := newLease(name)
		l.Spec = coordinationv1alpha1.FencedLeaseSpec{
			IdentityBinding: coordinationv1alpha1.IdentityBindingServiceAccount,
			MinFencingToken: 10,
			Requests: []coordinationv1alpha1.LeaseRequest{
				{HolderIdentity: "worker-a", User: "alice", RenewSequence: 5},
				{HolderIdentity: "worker-b", User: "bob"},
			},
		}
		Expect(k8sClient.Create(ctx, l)).To(Succeed())
	})

	// update reads the lease as stored, lets mutate change its spec (unstructured,
	// so fields can be removed), and writes it back with an ordinary Update.
	update := func(mutate func(spec map[string]any)) error {
		u := getUnstructuredLease(name)
		mutate(u.Object["spec"].(map[string]any))
		return k8sClient.Update(ctx, u)
	}

	// requestAt returns spec.requests[i] for in-place changes.
	requestAt := func(spec map[string]any, i int) map[string]any {
		return spec["requests"].([]any)[i].(map[string]any)
	}

	DescribeTable("refuses a forbidden change, naming the field and the rule",
		func(mutate func(spec map[string]any), field, rule string) {
			before := getLease(name)

			expectInvalid(update(mutate), field, rule)

			after := getLease(name)
			Expect(after.Spec).To(Equal(before.Spec))
			Expect(after.ResourceVersion).To(Equal(before.ResourceVersion), "a refused update must not be stored")
		},

		Entry("identityBinding ServiceAccount -> Pod",
			func(spec map[string]any) { spec["identityBinding"] = "Pod" },
			"spec", "identityBinding is immutable"),
		Entry("identityBinding ServiceAccount -> None",
			func(spec map[string]any) { spec["identityBinding"] = "None" },
			"spec", "identityBinding is immutable"),
		Entry("identityBinding removed (it would default back to None)",
			func(spec map[string]any) { delete(spec, "identityBinding") },
			"spec", "identityBinding is immutable"),

		Entry("minFencingToken 10 -> 9",
			func(spec map[string]any) { spec["minFencingToken"] = int64(9) },
			"spec", "minFencingToken may only increase"),
		Entry("minFencingToken 10 -> 0",
			func(spec map[string]any) { spec["minFencingToken"] = int64(0) },
			"spec", "minFencingToken may only increase"),
		Entry("minFencingToken removed (what a typed client sends for 0)",
			func(spec map[string]any) { delete(spec, "minFencingToken") },
			"spec", "minFencingToken may only increase"),

		Entry("a request's user changed",
			func(spec map[string]any) { requestAt(spec, 0)["user"] = "mallory" },
			"spec.requests[0].user", "user is immutable"),
		Entry("a request's user changed while the queue is reordered",
			func(spec map[string]any) {
				reqs := spec["requests"].([]any)
				reqs[0], reqs[1] = reqs[1], reqs[0]
				reqs[1].(map[string]any)["user"] = "mallory"
			},
			"spec.requests[1].user", "user is immutable"),

		Entry("a request's renewSequence 5 -> 4",
			func(spec map[string]any) { requestAt(spec, 0)["renewSequence"] = int64(4) },
			"spec.requests[0].renewSequence", "renewSequence may only increase"),
		Entry("a request's renewSequence 5 -> 0",
			func(spec map[string]any) { requestAt(spec, 0)["renewSequence"] = int64(0) },
			"spec.requests[0].renewSequence", "renewSequence may only increase"),
		Entry("a request's renewSequence lowered while the queue is reordered",
			func(spec map[string]any) {
				reqs := spec["requests"].([]any)
				reqs[0], reqs[1] = reqs[1], reqs[0]
				reqs[1].(map[string]any)["renewSequence"] = int64(4)
			},
			"spec.requests[1].renewSequence", "renewSequence may only increase"),
		// API GAP, pending until the CRD is fixed: the rule "self >= oldSelf" sits on
		// renewSequence itself, and a transition rule on a scalar runs only when the
		// field is present in both the old and the new object. Removing it (which
		// is what a typed Go client sends for 0, through omitempty) lowers the
		// sequence to 0 unchecked. Fix: +kubebuilder:default=0 on renewSequence
		// (checked: this entry passes with that default in the CRD), or move the
		// rule up to LeaseRequest as
		// "!has(oldSelf.renewSequence) || (has(self.renewSequence) && self.renewSequence >= oldSelf.renewSequence)".
		Entry("a request's renewSequence removed (what a typed client sends for 0)",
			func(spec map[string]any) { delete(requestAt(spec, 0), "renewSequence") },
			"spec.requests[0].renewSequence", "renewSequence may only increase"),
	)

	DescribeTable("accepts an allowed change and stores it",
		func(mutate func(spec map[string]any), check func(spec coordinationv1alpha1.FencedLeaseSpec)) {
			Expect(update(mutate)).To(Succeed())
			check(getLease(name).Spec)
		},

		Entry("raising a request's renewSequence (a renewal)",
			func(spec map[string]any) { requestAt(spec, 0)["renewSequence"] = int64(6) },
			func(spec coordinationv1alpha1.FencedLeaseSpec) {
				Expect(spec.Requests[0].RenewSequence).To(Equal(int64(6)))
			}),
		Entry("raising a renewSequence from absent (0) to 1",
			func(spec map[string]any) { requestAt(spec, 1)["renewSequence"] = int64(1) },
			func(spec coordinationv1alpha1.FencedLeaseSpec) {
				Expect(spec.Requests[1].RenewSequence).To(Equal(int64(1)))
			}),
		Entry("raising minFencingToken (after an etcd restore)",
			func(spec map[string]any) { spec["minFencingToken"] = int64(1_000_000) },
			func(spec coordinationv1alpha1.FencedLeaseSpec) {
				Expect(spec.MinFencingToken).To(Equal(int64(1_000_000)))
			}),
		Entry("rewriting minFencingToken with the same value",
			func(spec map[string]any) { spec["minFencingToken"] = int64(10) },
			func(spec coordinationv1alpha1.FencedLeaseSpec) {
				Expect(spec.MinFencingToken).To(Equal(int64(10)))
			}),
		Entry("appending a request (a new waiter)",
			func(spec map[string]any) {
				spec["requests"] = append(spec["requests"].([]any), request("worker-c", "carol", 0))
			},
			func(spec coordinationv1alpha1.FencedLeaseSpec) {
				Expect(spec.Requests).To(HaveLen(3))
				Expect(spec.Requests[2]).To(Equal(coordinationv1alpha1.LeaseRequest{HolderIdentity: "worker-c", User: "carol"}))
			}),
		Entry("removing a request (a release)",
			func(spec map[string]any) { spec["requests"] = spec["requests"].([]any)[1:] },
			func(spec coordinationv1alpha1.FencedLeaseSpec) {
				Expect(spec.Requests).To(Equal([]coordinationv1alpha1.LeaseRequest{{HolderIdentity: "worker-b", User: "bob"}}))
			}),
		Entry("removing every request",
			func(spec map[string]any) { delete(spec, "requests") },
			func(spec coordinationv1alpha1.FencedLeaseSpec) {
				Expect(spec.Requests).To(BeEmpty())
			}),
		Entry("changing leaseDurationSeconds and lockDelaySeconds",
			func(spec map[string]any) {
				spec["leaseDurationSeconds"] = int64(60)
				spec["lockDelaySeconds"] = int64(30)
			},
			func(spec coordinationv1alpha1.FencedLeaseSpec) {
				Expect(spec.LeaseDurationSeconds).To(Equal(int32(60)))
				Expect(spec.LockDelaySeconds).To(Equal(int32(30)))
				Expect(spec.IdentityBinding).To(Equal(coordinationv1alpha1.IdentityBindingServiceAccount))
			}),
	)

	It("treats a holderIdentity withdrawn and re-added in a later write as a new request", func() {
		Expect(update(func(spec map[string]any) { spec["requests"] = spec["requests"].([]any)[1:] })).To(Succeed())
		Expect(update(func(spec map[string]any) {
			spec["requests"] = append(spec["requests"].([]any), request("worker-a", "mallory", 0))
		})).To(Succeed())

		Expect(getLease(name).Spec.Requests).To(Equal([]coordinationv1alpha1.LeaseRequest{
			{HolderIdentity: "worker-b", User: "bob"},
			{HolderIdentity: "worker-a", User: "mallory"},
		}))
	})

	It("lets minFencingToken be set on a lease created without one", func() {
		l := newLease("no-floor")
		Expect(k8sClient.Create(ctx, l)).To(Succeed())

		l.Spec.MinFencingToken = 7
		Expect(k8sClient.Update(ctx, l)).To(Succeed())
		Expect(getLease("no-floor").Spec.MinFencingToken).To(Equal(int64(7)))
	})
})
