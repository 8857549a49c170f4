package api_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	coordinationv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// leaseGVK is the FencedLease kind, for unstructured objects.
var leaseGVK = coordinationv1alpha1.GroupVersion.WithKind("FencedLease")

// newLease returns a typed FencedLease named name in the spec's namespace.
func newLease(name string) *coordinationv1alpha1.FencedLease {
	return &coordinationv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
	}
}

// newUnstructuredLease returns a FencedLease named name in the spec's namespace
// with exactly the given spec: unstructured, so that it can carry values the
// typed struct cannot (zero values dropped by omitempty, wrong types, numbers
// overflowing int32, absent fields).
func newUnstructuredLease(name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetGroupVersionKind(leaseGVK)
	u.SetName(name)
	u.SetNamespace(namespace)
	if spec != nil {
		u.Object["spec"] = spec
	}
	return u
}

// getUnstructuredLease reads a FencedLease as the API server stores it, so that an
// absent field is told apart from a zero one.
func getUnstructuredLease(name string) *unstructured.Unstructured {
	GinkgoHelper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(leaseGVK)
	Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, u)).To(Succeed())
	return u
}

// getLease reads a typed FencedLease.
func getLease(name string) *coordinationv1alpha1.FencedLease {
	GinkgoHelper()
	l := &coordinationv1alpha1.FencedLease{}
	Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, l)).To(Succeed())
	return l
}

// request is one spec.requests item in unstructured form.
func request(holderIdentity, user string, renewSequence int64) map[string]any {
	return map[string]any{
		"holderIdentity": holderIdentity,
		"user":           user,
		"renewSequence":  renewSequence,
	}
}

// expectInvalid asserts that err is the API server's 422 Invalid, and that its
// message names every one of the given fragments (the field path and the rule).
func expectInvalid(err error, fragments ...string) {
	GinkgoHelper()
	Expect(err).To(HaveOccurred(), "the API server accepted the object")
	Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want an Invalid (422) error, got %T: %v", err, err)
	GinkgoWriter.Printf("refused: %v\n", err)
	for _, f := range fragments {
		Expect(err.Error()).To(ContainSubstring(f))
	}
}
