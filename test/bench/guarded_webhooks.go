package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/test/testenv"
)

// The operator's webhooks, served by this process and wired by
// operator.Setup, and the allow-all baseline webhook.

// webhookServer is the in-process manager serving the admission webhooks.
type webhookServer struct {
	stop func()
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

	mgrOpts := testenv.WebhookManagerOptions(b.testEnv, b.scheme)
	mgrOpts.HealthProbeBindAddress = "0"
	mgr, err := ctrl.NewManager(b.cfg, mgrOpts)
	if err != nil {
		return nil, fmt.Errorf("creating the webhook manager: %w", err)
	}
	ws := &webhookServer{}
	// The operator's webhooks, as they ship.
	opts := testenv.Operator("", b.adminUser)
	opts.Reconciler = false
	if err := operator.Setup(mgr, opts); err != nil {
		return nil, err
	}
	mgr.GetWebhookServer().Register(allowAllPath, &webhook.Admission{Handler: admission.HandlerFunc(
		func(context.Context, admission.Request) admission.Response {
			ws.allowed.Add(1)
			return admission.Allowed("")
		})})
	ws.stop = startManager(ctx, "webhook manager", mgr)
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
