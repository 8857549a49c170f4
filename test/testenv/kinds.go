package testenv

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// WidgetGVK is the guarded example kind the suites, the demo, the benchmark
// and the workers write: example.kubefence.io/v1 Widget (test/crds), with
// spec.entries and spec.writer, and status and scale subresources.
var WidgetGVK = schema.GroupVersionKind{Group: "example.kubefence.io", Version: "v1", Kind: "Widget"}

// FixedToken is a fence.TokenSource that always offers one token: the token a
// writer took when it checked its lease (or held once), stamped as is so that
// only the API server, through the fencing webhook, decides whether it is
// stale.
type FixedToken int64

// Token returns t, always as current.
func (t FixedToken) Token() (int64, bool) { return int64(t), true }

// Widget is an empty Widget named ns/name: a reference to get into, or the
// start of one to create.
func Widget(ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(WidgetGVK)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}
