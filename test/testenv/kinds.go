package testenv

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/hack/devenv"
)

// Widget is an empty Widget (devenv.WidgetGVK, the guarded example kind) named ns/name: a reference to get into, or the
// start of one to create.
func Widget(ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(devenv.WidgetGVK)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// GuardedWidget is a Widget named ns/name to create, written by writer
// (spec.writer, and spec.replicas 1) and, if lease is not empty, guarded by
// that FencedLease (the guard label) with token (the token annotation, if
// token is not empty).
func GuardedWidget(ns, name, lease, token, writer string) *unstructured.Unstructured {
	u := Widget(ns, name)
	if lease != "" {
		u.SetLabels(map[string]string{coordv1alpha1.GuardLeaseLabel: lease})
	}
	if token != "" {
		u.SetAnnotations(map[string]string{coordv1alpha1.FencingTokenAnnotation: token})
	}
	_ = unstructured.SetNestedField(u.Object, writer, "spec", "writer")
	_ = unstructured.SetNestedField(u.Object, int64(1), "spec", "replicas")
	return u
}
