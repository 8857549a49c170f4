package api_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordinationv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// expireAt is a fixed, far-future expiry, so printed values are predictable.
var expireAt = metav1.NewMicroTime(time.Date(2030, time.January, 2, 3, 4, 5, 0, time.UTC))

// grantedStatus is a status as the controller would write it for a grant to
// worker-a with token 42, after three transitions.
func grantedStatus() coordinationv1alpha1.FencedLeaseStatus {
	acquired := metav1.NewMicroTime(time.Date(2030, time.January, 2, 3, 3, 0, 0, time.UTC))
	st := coordinationv1alpha1.FencedLeaseStatus{
		HolderIdentity:       "worker-a",
		HolderUser:           "system:serviceaccount:jobs:worker",
		FencingToken:         42,
		TokenBase:            40,
		LeaseDurationSeconds: 15,
		AcquireTime:          &acquired,
		RenewTime:            &acquired,
		ExpireTime:           &expireAt,
		RenewSequence:        5,
		LeaseTransitions:     3,
		ObservedGeneration:   2,
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type:    coordinationv1alpha1.ConditionHeld,
		Status:  metav1.ConditionTrue,
		Reason:  coordinationv1alpha1.ReasonGranted,
		Message: "granted to worker-a",
	})
	return st
}

// forgedStatus is what a client without status rights might try to write.
func forgedStatus() coordinationv1alpha1.FencedLeaseStatus {
	return coordinationv1alpha1.FencedLeaseStatus{HolderIdentity: "mallory", FencingToken: 99, LeaseTransitions: 7}
}

var _ = Describe("FencedLease status subresource", func() {
	It("ignores a status sent with the create", func() {
		l := newLease("forged-create")
		l.Status = forgedStatus()
		Expect(k8sClient.Create(ctx, l)).To(Succeed())

		Expect(getLease("forged-create").Status).To(Equal(coordinationv1alpha1.FencedLeaseStatus{}))
	})

	It("ignores status changes in an update of the main resource, but applies its spec changes", func() {
		Expect(k8sClient.Create(ctx, newLease("forged-update"))).To(Succeed())

		l := getLease("forged-update")
		l.Spec.LeaseDurationSeconds = 20
		l.Status = forgedStatus()
		Expect(k8sClient.Update(ctx, l)).To(Succeed())

		got := getLease("forged-update")
		Expect(got.Spec.LeaseDurationSeconds).To(Equal(int32(20)), "the spec half of the update must land")
		Expect(got.Status).To(Equal(coordinationv1alpha1.FencedLeaseStatus{}))
	})

	It("ignores status in a merge patch of the main resource", func() {
		Expect(k8sClient.Create(ctx, newLease("forged-patch"))).To(Succeed())

		patch := []byte(`{"status":{"holderIdentity":"mallory","fencingToken":99}}`)
		Expect(k8sClient.Patch(ctx, newLease("forged-patch"), client.RawPatch(types.MergePatchType, patch))).To(Succeed())

		Expect(getLease("forged-patch").Status).To(Equal(coordinationv1alpha1.FencedLeaseStatus{}))
	})

	It("stores status written through the status subresource, which the main resource then cannot overwrite", func() {
		Expect(k8sClient.Create(ctx, newLease("granted"))).To(Succeed())

		l := getLease("granted")
		l.Status = grantedStatus()
		want := l.Status.DeepCopy()
		Expect(k8sClient.Status().Update(ctx, l)).To(Succeed())

		got := getLease("granted")
		Expect(got.Status.HolderIdentity).To(Equal("worker-a"))
		Expect(got.Status.HolderUser).To(Equal("system:serviceaccount:jobs:worker"), "holderUser is in the CRD's schema, not pruned")
		Expect(got.Status.FencingToken).To(Equal(int64(42)))
		Expect(got.Status.LeaseTransitions).To(Equal(int32(3)))
		Expect(got.Status.ExpireTime.Equal(&expireAt)).To(BeTrue(), "expireTime: got %v", got.Status.ExpireTime)
		Expect(meta.IsStatusConditionTrue(got.Status.Conditions, coordinationv1alpha1.ConditionHeld)).To(BeTrue())
		Expect(got.Status.Conditions[0].Reason).To(Equal(coordinationv1alpha1.ReasonGranted))

		By("an update of the main resource carrying another status")
		got.Status = forgedStatus()
		Expect(k8sClient.Update(ctx, got)).To(Succeed())
		after := getLease("granted")
		Expect(after.Status.HolderIdentity).To(Equal(want.HolderIdentity))
		Expect(after.Status.FencingToken).To(Equal(want.FencingToken))
		Expect(after.Status.LeaseTransitions).To(Equal(want.LeaseTransitions))
	})

	It("ignores spec changes sent through the status subresource", func() {
		l := newLease("status-only")
		l.Spec.LeaseDurationSeconds = 30
		Expect(k8sClient.Create(ctx, l)).To(Succeed())

		l = getLease("status-only")
		l.Spec.LeaseDurationSeconds = 99
		l.Spec.Requests = []coordinationv1alpha1.LeaseRequest{{HolderIdentity: "mallory", User: "mallory"}}
		l.Status = grantedStatus()
		Expect(k8sClient.Status().Update(ctx, l)).To(Succeed())

		got := getLease("status-only")
		Expect(got.Spec.LeaseDurationSeconds).To(Equal(int32(30)))
		Expect(got.Spec.Requests).To(BeEmpty())
		Expect(got.Status.HolderIdentity).To(Equal("worker-a"))
	})

	It("bumps metadata.generation on spec writes only, never on status writes", func() {
		// Tokens are minted from metadata.generation, so status writes (grants,
		// renewal acknowledgements) must not move it.
		Expect(k8sClient.Create(ctx, newLease("generation"))).To(Succeed())
		l := getLease("generation")
		Expect(l.Generation).To(Equal(int64(1)))

		l.Status = grantedStatus()
		Expect(k8sClient.Status().Update(ctx, l)).To(Succeed())
		l = getLease("generation")
		Expect(l.Generation).To(Equal(int64(1)))

		l.Spec.Requests = []coordinationv1alpha1.LeaseRequest{{HolderIdentity: "worker-a", User: "alice"}}
		Expect(k8sClient.Update(ctx, l)).To(Succeed())
		l = getLease("generation")
		Expect(l.Generation).To(Equal(int64(2)))

		l.Spec.Requests[0].RenewSequence = 1
		Expect(k8sClient.Update(ctx, l)).To(Succeed())
		Expect(getLease("generation").Generation).To(Equal(int64(3)), "a renewal is a spec write")

		By("an update that changes only the status, through the main resource")
		l = getLease("generation")
		l.Status = forgedStatus()
		Expect(k8sClient.Update(ctx, l)).To(Succeed())
		Expect(getLease("generation").Generation).To(Equal(int64(3)))
	})

	It("validates status written through the subresource", func() {
		Expect(k8sClient.Create(ctx, newLease("bad-status"))).To(Succeed())

		l := getLease("bad-status")
		l.Status.FencingToken = -1
		expectInvalid(k8sClient.Status().Update(ctx, l), "status.fencingToken", "should be greater than or equal to 0")
	})
})
