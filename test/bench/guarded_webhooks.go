package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/test/testenv"
)

// The fencing webhook the guarded-writes phase measures, served by this
// process and wired by operator.Setup, with a lease reader that can be
// switched to live reads, and the allow-all baseline webhook.

// leaseReader is the fencing handler's Leases reader: the manager's cache, or,
// while live is set, the API server (every check then reads the lease live).
// It counts the reads it serves and times the live ones.
type leaseReader struct {
	cache, api client.Reader
	live       atomic.Bool
	cacheGets  atomic.Int64

	mu       sync.Mutex
	apiReads []time.Duration
}

func (r *leaseReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if !r.live.Load() {
		r.cacheGets.Add(1)
		return r.cache.Get(ctx, key, obj, opts...)
	}
	start := time.Now()
	err := r.api.Get(ctx, key, obj, opts...)
	d := time.Since(start)
	r.mu.Lock()
	r.apiReads = append(r.apiReads, d)
	r.mu.Unlock()
	return err
}

func (r *leaseReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if r.live.Load() {
		return r.api.List(ctx, list, opts...)
	}
	return r.cache.List(ctx, list, opts...)
}

func (r *leaseReader) liveReads() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.apiReads...)
}

// countingReader counts the reads of the handler's LiveLeases reader (its own
// fall-back to the API server when a token or object is ahead of the cache).
type countingReader struct {
	client.Reader
	gets atomic.Int64
}

func (r *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.gets.Add(1)
	return r.Reader.Get(ctx, key, obj, opts...)
}

// webhookServer is the in-process manager serving the admission webhooks.
type webhookServer struct {
	leases   *leaseReader
	fallback *countingReader
	cache    client.Reader
	stop     func()
	// allowed counts the requests the allow-all webhook answered.
	allowed atomic.Int64
}

// startWebhooks installs config/webhook/{manifests,fencing}.yaml in the API
// server through envtest's WebhookInstallOptions and serves them from a
// manager in this process: the FencedLease validator and the three fencing
// handlers. It is called only before the guarded phase, so that the lease
// phases keep running without webhooks, as documented.
func (b *bench) startWebhooks(ctx context.Context) (*webhookServer, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	wopts := &b.testEnv.WebhookInstallOptions
	// Start prepared a CA and a serving directory for no webhooks; replace them.
	if err := wopts.Cleanup(); err != nil {
		return nil, err
	}
	*wopts = envtest.WebhookInstallOptions{Paths: testenv.WebhookPaths(root)}
	if err := wopts.PrepWithoutInstalling(); err != nil {
		return nil, fmt.Errorf("preparing the webhooks: %w", err)
	}

	mgrCtx, cancel := context.WithCancel(ctx)
	mgrOpts := testenv.WebhookManagerOptions(b.testEnv, b.scheme)
	mgrOpts.HealthProbeBindAddress = "0"
	mgr, err := ctrl.NewManager(b.cfg, mgrOpts)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("creating the webhook manager: %w", err)
	}
	ws := &webhookServer{
		leases:   &leaseReader{cache: mgr.GetClient(), api: mgr.GetAPIReader()},
		fallback: &countingReader{Reader: mgr.GetAPIReader()},
		cache:    mgr.GetClient(),
	}
	// The operator's webhooks, as they ship, reading leases through counters.
	opts := testenv.Operator("", b.adminUser)
	opts.Reconciler = false
	// The cached pass stands for the webhook before every decision read its
	// lease live (main at 966f728); the live pass is the webhook as shipped.
	opts.LeaseReader = ws.leases
	if err := operator.Setup(mgr, opts); err != nil {
		cancel()
		return nil, err
	}
	mgr.GetWebhookServer().Register(allowAllPath, &webhook.Admission{Handler: admission.HandlerFunc(
		func(context.Context, admission.Request) admission.Response {
			ws.allowed.Add(1)
			return admission.Allowed("")
		})})
	done := startManager(mgrCtx, "webhook manager", mgr)
	ws.stop = func() { stopManager("webhook manager", cancel, done) }
	if err := waitFor(ctx, 30*time.Second, 20*time.Millisecond, "the webhook server to start", func(context.Context) (bool, error) {
		return mgr.GetWebhookServer().StartedChecker()(nil) == nil, nil
	}); err != nil {
		ws.stop()
		return nil, err
	}
	if err := wopts.Install(b.cfg); err != nil {
		ws.stop()
		return nil, fmt.Errorf("installing the webhook configurations: %w", err)
	}
	return ws, nil
}
