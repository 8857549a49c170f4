package main

import (
	"context"
	"errors"
	"fmt"
	"io"
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

// The side-by-side pass of phase 4 (-baseline-writes): in every round one
// write of each kind, in a rotating order, so that all kinds meet the same
// load: an unguarded write; a write that only an allow-all webhook sees
// (the floor of any webhook); and a guarded write as shipped (the figures of
// the lease reader before f9c59ca beside it are in docs/benchmarks.md, from
// a pass that served that reader too; git show f9c59ca has it).

const (
	// The allow-all webhook: served by this process at allowAllPath,
	// configured like the fencing webhook, for Widgets with allowAllLabel.
	allowAllPath   = "/bench-allow-all"
	allowAllLabel  = "bench.kubefence.io/allow-all"
	allowAllConfig = "bench-allow-all"
)

// sideBySide is the side-by-side pass.
type sideBySide struct {
	unguarded, allowAll, shipped []time.Duration
	failures                     int
}

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

// sideBySidePass runs warm-up rounds, then n measured rounds.
func (b *bench) sideBySidePass(ctx context.Context, n int, guardedPatch, unguardedPatch, allowAllPatch func(context.Context, int) error) (sideBySide, error) {
	var p sideBySide
	kinds := []struct {
		write func(context.Context, int) error
		into  *[]time.Duration
	}{
		{unguardedPatch, &p.unguarded},
		{allowAllPatch, &p.allowAll},
		{guardedPatch, &p.shipped},
	}
	for i := range guardedWarmup + n {
		for k := range kinds {
			kind := kinds[(i+k)%len(kinds)]
			start := time.Now()
			err := kind.write(ctx, i)
			d := time.Since(start)
			if err != nil {
				if err := tolerate(ctx, &p.failures, n, "write", i, err); err != nil {
					return p, err
				}
				continue
			}
			if i >= guardedWarmup {
				*kind.into = append(*kind.into, d)
			}
		}
	}
	return p, nil
}

// printSideBySide prints the side-by-side pass.
func (r *report) printSideBySide(w io.Writer, b *bench) {
	p := r.guarded.sideBySide
	fmt.Fprintf(w, "Side by side, %d rounds (each round one write of each kind, rotating order; %d warm-up rounds first):\n\n", len(p.unguarded), guardedWarmup)
	up50, ok1 := quantile(p.unguarded, 0.5)
	up99, ok2 := quantile(p.unguarded, 0.99)
	row := func(name string, d []time.Duration) []string {
		p50, okA := quantile(d, 0.5)
		p99, okB := quantile(d, 0.99)
		r50, r99 := "n/a", "n/a"
		if ok1 && ok2 && okA && okB && up50 > 0 && up99 > 0 {
			r50 = fmt.Sprintf("%.2f", float64(p50)/float64(up50))
			r99 = fmt.Sprintf("%.2f", float64(p99)/float64(up99))
		}
		return []string{name, q(d, 0.5), q(d, 0.99), r50, r99, fmt.Sprint(len(d))}
	}
	table(w, [][]string{
		{"write", "p50", "p99", "p50 ratio", "p99 ratio", "samples"},
		row("unguarded", p.unguarded),
		row("allow-all webhook", p.allowAll),
		row("fencing webhook as shipped", p.shipped),
	})
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Failed writes tolerated: %d. Ratios are of the unguarded write's quantile in the same rounds.\n\n", p.failures)
}
