package api_test

import (
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	coordinationv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

var _ = Describe("FencedLease defaults", func() {
	It("accepts the sample from config/samples and fills in the defaults it omits", func() {
		raw, err := os.ReadFile(filepath.Join("..", "..", "config", "samples", "coordination_v1alpha1_fencedlease.yaml"))
		Expect(err).NotTo(HaveOccurred())

		sample := &coordinationv1alpha1.FencedLease{}
		// Strict: a field the types do not know is a broken sample, not one to prune.
		Expect(yaml.UnmarshalStrict(raw, sample)).To(Succeed())
		Expect(sample.GroupVersionKind()).To(Equal(leaseGVK))
		Expect(sample.Spec.IdentityBinding).To(BeEmpty(), "the sample is meant to rely on the identityBinding default")

		Expect(k8sClient.Create(ctx, sample)).To(Succeed())
		DeferCleanup(func() { Expect(k8sClient.Delete(ctx, sample)).To(Succeed()) })

		got := &coordinationv1alpha1.FencedLease{}
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: sample.Namespace, Name: sample.Name}, got)).To(Succeed())
		Expect(got.Spec.LeaseDurationSeconds).To(Equal(int32(15)))
		Expect(got.Spec.LockDelaySeconds).To(Equal(int32(5)))
		Expect(got.Spec.IdentityBinding).To(Equal(coordinationv1alpha1.IdentityBindingNone))
		Expect(got.Spec.MinFencingToken).To(BeZero())
		Expect(got.Spec.Requests).To(BeEmpty())
		Expect(got.Status).To(Equal(coordinationv1alpha1.FencedLeaseStatus{}))
	})

	It("stores leaseDurationSeconds 15, lockDelaySeconds 0 and identityBinding None when the spec omits them", func() {
		// Unstructured, so that "stored as 0" is told apart from "absent".
		Expect(k8sClient.Create(ctx, newUnstructuredLease("empty-spec", map[string]any{}))).To(Succeed())

		spec := getUnstructuredLease("empty-spec").Object["spec"]
		Expect(spec).To(Equal(map[string]any{
			"leaseDurationSeconds": int64(15),
			"lockDelaySeconds":     int64(0),
			"identityBinding":      "None",
		}))
	})

	It("defaults a typed Go client's zero values the same way (omitempty drops them)", func() {
		Expect(k8sClient.Create(ctx, newLease("typed-zero"))).To(Succeed())

		got := getLease("typed-zero")
		Expect(got.Spec).To(Equal(coordinationv1alpha1.FencedLeaseSpec{
			LeaseDurationSeconds: 15,
			LockDelaySeconds:     0,
			IdentityBinding:      coordinationv1alpha1.IdentityBindingNone,
		}))
	})

	It("keeps values that are set, rather than defaulting them", func() {
		l := newLease("explicit")
		l.Spec = coordinationv1alpha1.FencedLeaseSpec{
			LeaseDurationSeconds: 40,
			LockDelaySeconds:     20,
			IdentityBinding:      coordinationv1alpha1.IdentityBindingPod,
			MinFencingToken:      1000,
			Requests:             []coordinationv1alpha1.LeaseRequest{{HolderIdentity: "worker-a", User: "alice", RenewSequence: 3}},
		}
		want := l.Spec.DeepCopy()
		Expect(k8sClient.Create(ctx, l)).To(Succeed())

		Expect(getLease("explicit").Spec).To(Equal(*want))
	})

	It("accepts every bound exactly at its limit", func() {
		requests := make([]any, 0, 64)
		// 64 requests: the first with a 128-character identity using every
		// allowed character class, and a 512-character user.
		longID := "a0._:-" + strings.Repeat("b", 128-7) + "9"
		Expect(longID).To(HaveLen(128))
		requests = append(requests, request(longID, strings.Repeat("u", 512), 0))
		for i := 1; i < 64; i++ {
			requests = append(requests, request("w"+strings.Repeat("x", i), "user", int64(i)))
		}
		u := newUnstructuredLease("at-limits", map[string]any{
			"leaseDurationSeconds": int64(3600),
			"lockDelaySeconds":     int64(3600),
			"identityBinding":      "ServiceAccount",
			"minFencingToken":      int64(4611686018427387904),
			"requests":             requests,
		})
		Expect(k8sClient.Create(ctx, u)).To(Succeed())

		got := getLease("at-limits")
		Expect(got.Spec.LeaseDurationSeconds).To(Equal(int32(3600)))
		Expect(got.Spec.LockDelaySeconds).To(Equal(int32(3600)))
		Expect(got.Spec.MinFencingToken).To(Equal(int64(4611686018427387904)))
		Expect(got.Spec.Requests).To(HaveLen(64))
		Expect(got.Spec.Requests[0].HolderIdentity).To(Equal(longID))

		Expect(k8sClient.Create(ctx, newUnstructuredLease("at-lower-limits", map[string]any{
			"leaseDurationSeconds": int64(1),
			"requests":             []any{request("a", "u", 0)},
		}))).To(Succeed())
		Expect(getLease("at-lower-limits").Spec.LeaseDurationSeconds).To(Equal(int32(1)))
	})

	// API GAP, pending until the CRD is fixed: spec is optional and has no default
	// of its own, and structural defaulting only fills fields of objects that
	// exist. A FencedLease sent without a spec (e.g. a manifest with metadata only)
	// is stored with no spec at all: no leaseDurationSeconds, lockDelaySeconds or
	// identityBinding. Worse, the spec-level transition rules need oldSelf, so the
	// first update that adds a spec may set identityBinding to anything (the
	// effective None becomes Pod, unchecked). Fix: +kubebuilder:default={} on
	// FencedLease.Spec (checked: this spec passes with that default in the CRD).
	It("defaults a FencedLease sent without any spec, and keeps its identityBinding immutable", func() {
		Expect(k8sClient.Create(ctx, newUnstructuredLease("no-spec", nil))).To(Succeed())
		Expect(getUnstructuredLease("no-spec").Object["spec"]).To(Equal(map[string]any{
			"leaseDurationSeconds": int64(15),
			"lockDelaySeconds":     int64(0),
			"identityBinding":      "None",
		}))

		u := getUnstructuredLease("no-spec")
		u.Object["spec"] = map[string]any{"identityBinding": "Pod"}
		expectInvalid(k8sClient.Update(ctx, u), "spec", "identityBinding is immutable")
	})

	It("prunes fields the schema does not know", func() {
		u := newUnstructuredLease("unknown-field", map[string]any{"tokenOverride": int64(7)})
		Expect(k8sClient.Create(ctx, u)).To(Succeed())

		_, found, err := unstructured.NestedFieldNoCopy(getUnstructuredLease("unknown-field").Object, "spec", "tokenOverride")
		Expect(err).NotTo(HaveOccurred())
		Expect(found).To(BeFalse())
	})
})
