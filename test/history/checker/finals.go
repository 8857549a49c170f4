package checker

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

var widgetListGVK = schema.GroupVersionKind{Group: "example.kubefence.io", Version: "v1", Kind: "WidgetList"}

// ReadFinals lists the Widgets of namespace after every worker stopped: their
// entries, lease and token annotation, with the read's times relative to
// start (the workers' --start).
func ReadFinals(ctx context.Context, c client.Reader, namespace string, start time.Time) ([]Final, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(widgetListGVK)
	invoke := time.Since(start).Nanoseconds()
	if err := c.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing widgets: %w", err)
	}
	complete := time.Since(start).Nanoseconds()
	var finals []Final
	for _, u := range list.Items {
		if strings.HasPrefix(u.GetName(), SyncName) {
			continue // CommitRecorder.Sync's
		}
		entries, _, _ := unstructured.NestedStringSlice(u.Object, "spec", "entries")
		f := Final{Object: u.GetName(), Lease: u.GetLabels()[coordv1alpha1.GuardLeaseLabel], Exists: true, Entries: entries,
			Invoke: invoke, Complete: complete}
		if tok, ok := u.GetAnnotations()[coordv1alpha1.FencingTokenAnnotation]; ok {
			n, err := strconv.ParseInt(tok, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("widget %s: token annotation %q: %w", u.GetName(), tok, err)
			}
			f.Token, f.HasToken = n, true
		}
		finals = append(finals, f)
	}
	return finals, nil
}
