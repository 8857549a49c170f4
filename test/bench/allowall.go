package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kubefence/kubefence/hack/devenv"
)

// The allow-all webhook of phase 4's webhook-mode pass: a write that only
// it sees is the floor of any validating webhook on this machine.

const (
	// The allow-all webhook: served by this process at allowAllPath,
	// configured like the fencing webhook, for Widgets with allowAllLabel.
	allowAllPath   = "/bench-allow-all"
	allowAllLabel  = "bench.kubefence.io/allow-all"
	allowAllConfig = "bench-allow-all"
)

// registerAllowAll serves the allow-all webhook on srv, counting its calls.
func (b *bench) registerAllowAll(srv webhook.Server) {
	srv.Register(allowAllPath, &webhook.Admission{Handler: admission.HandlerFunc(
		func(context.Context, admission.Request) admission.Response {
			b.allowed.Add(1)
			return admission.Allowed("")
		})})
}

// installAllowAll installs a validating webhook that admits every write of
// a Widget labelled allowAllLabel, configured like the fencing webhook (same
// server, TLS, timeout, failure policy), and creates such a Widget.
func (b *bench) installAllowAll(ctx context.Context, ns, lease string, tok int64) error {
	var fencingCfg admissionregistrationv1.ValidatingWebhookConfiguration
	if err := b.admin.Get(ctx, types.NamespacedName{Name: "fencing-webhook-configuration"}, &fencingCfg); err != nil {
		return fmt.Errorf("reading the installed fencing webhook configuration: %w", err)
	}
	var guarded *admissionregistrationv1.ValidatingWebhook
	for i := range fencingCfg.Webhooks {
		if fencingCfg.Webhooks[i].Name == "guarded.fencing.kubefence.io" {
			guarded = &fencingCfg.Webhooks[i]
		}
	}
	if guarded == nil || guarded.ClientConfig.URL == nil {
		return errors.New("the installed fencing configuration has no guarded webhook with a URL")
	}
	u, err := url.Parse(*guarded.ClientConfig.URL)
	if err != nil {
		return err
	}
	u.Path = allowAllPath
	wh := guarded.DeepCopy()
	wh.Name = "allow-all.bench.kubefence.io"
	wh.ClientConfig.URL = ptr.To(u.String())
	wh.ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{allowAllLabel: "true"}}
	wh.MatchConditions = nil
	wh.Rules = []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{devenv.WidgetGVK.Group}, APIVersions: []string{devenv.WidgetGVK.Version},
			Resources: []string{"widgets"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
	}}
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: allowAllConfig},
		Webhooks:   []admissionregistrationv1.ValidatingWebhook{*wh},
	}
	if err := b.admin.Create(ctx, cfg); err != nil {
		return fmt.Errorf("installing the allow-all webhook: %w", err)
	}
	a := widget(ns, "allow-all")
	a.SetLabels(map[string]string{allowAllLabel: "true", unguardedLabel: lease})
	a.SetAnnotations(map[string]string{unguardedAnnotation: fmt.Sprint(tok)})
	if err := b.admin.Create(ctx, a); err != nil {
		return fmt.Errorf("creating the allow-all Widget: %w", err)
	}
	// The API server picks the configuration up asynchronously.
	return waitFor(ctx, 30*time.Second, 50*time.Millisecond, "the allow-all webhook to be called", func(ctx context.Context) (bool, error) {
		before := b.allowed.Load()
		if err := b.admin.Patch(ctx, widget(ns, "allow-all"), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"writer":"probe"}}`)), client.DryRunAll); err != nil {
			return false, err
		}
		return b.allowed.Load() > before, nil
	})
}
