// Package v1alpha1 contains the FencedLease API of the coordination.kubefence.io group.
//
// It imports apimachinery only, so embedding these types in another program is cheap.
// +kubebuilder:object:generate=true
// +groupName=coordination.kubefence.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group version used to register these objects.
	GroupVersion = schema.GroupVersion{Group: "coordination.kubefence.io", Version: "v1alpha1"}

	// SchemeBuilder collects the functions that add these types to a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types in this group-version to the given scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion, &FencedLease{}, &FencedLeaseList{})
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
