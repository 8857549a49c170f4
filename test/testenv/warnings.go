package testenv

import (
	"context"
	"sync"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Warnings records the admission warnings a client was given (Cluster.Warned).
// It is safe for concurrent use.
type Warnings struct {
	mu   sync.Mutex
	msgs []string
}

// HandleWarningHeaderWithContext records a warning (rest.WarningHandlerWithContext).
func (w *Warnings) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, text)
}

// All are the warnings so far, in the order they came.
func (w *Warnings) All() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.msgs...)
}

// Warned is a client acting as cfg (a user's, say) that records the warnings
// it is given instead of logging them.
func (c *Cluster) Warned(cfg *rest.Config) (client.WithWatch, *Warnings, error) {
	w := &Warnings{}
	cfg = rest.CopyConfig(cfg)
	cfg.WarningHandler, cfg.WarningHandlerWithContext = nil, w
	cl, err := client.NewWithWatch(cfg, client.Options{Scheme: c.Scheme})
	return cl, w, err
}
