package testenv

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Record watches the objects of list (opts select them) through c and keeps
// every version the API server reports added or modified, as view sees it
// (objects view declines are skipped). It returns a copy of what it kept so
// far, each time it is called, and stop, which ends the watch.
func Record[T any](ctx context.Context, c client.WithWatch, list client.ObjectList, view func(runtime.Object) (T, bool), opts ...client.ListOption) (seen func() []T, stop func(), err error) {
	w, err := c.Watch(ctx, list, opts...)
	if err != nil {
		return nil, nil, err
	}
	var mu sync.Mutex
	var kept []T
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			if v, ok := view(ev.Object); ok {
				mu.Lock()
				kept = append(kept, v)
				mu.Unlock()
			}
		}
	}()
	return func() []T {
		mu.Lock()
		defer mu.Unlock()
		return append([]T(nil), kept...)
	}, w.Stop, nil
}
