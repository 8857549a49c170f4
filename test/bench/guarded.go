package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/controllers/policy"
	"github.com/kubefence/kubefence/test/testenv"
)

// Phase 4: what the fencing webhook adds to a write of a guarded object.
//
// A Widget guarded by a FencedLease (label kubefence.io/lease, annotation
// kubefence.io/fencing-token) and an unguarded Widget in the same namespace are
// patched alternately by one client. The guarded patches pass through the
// fencing webhook (served by this process); the unguarded ones match no webhook.
// A second pass repeats this with the webhook reading the lease from the API
// server on every check instead of from its cache.

const (
	guardedNamespace = "guarded-writes"
	guardedLease     = "writer"
	guardedLeaseSecs = 60 // nothing expires during the phase
	guardedWarmup    = 100
	// checksMetric is the fencing webhook's decision-time histogram.
	checksMetric = "kubefence_fencing_check_seconds"
	// serverMetric is controller-runtime's time to serve one admission request
	// (decode the AdmissionReview, decide, encode the answer), by path.
	serverMetric = "controller_runtime_webhook_latency_seconds"
	// Label and annotation of the unguarded Widget: the same shape and size of
	// metadata as the guard, under keys no webhook looks at.
	unguardedLabel      = "example.kubefence.io/lease"
	unguardedAnnotation = "example.kubefence.io/fencing-token"
	// The allow-all baseline: a webhook at allowAllPath that admits every
	// write, configured like the fencing webhook, for Widgets with allowAllLabel.
	allowAllPath   = "/bench-allow-all"
	allowAllLabel  = "bench.kubefence.io/allow-all"
	allowAllConfig = "bench-allow-all"
)

type guardedPass struct {
	guarded, unguarded []time.Duration
	failures           int
	checks             histSnap        // decision-time histogram over the measured writes
	server             histSeries      // controller-runtime's serving time of /fence-guarded
	liveReads          []time.Duration // lease reads the handler sent to the API server (timed)
	fallbacks          int64           // reads through the handler's LiveLeases
	cacheReads         int64           // lease reads served by the cache
}

// guardedResult is phase 4.
type guardedResult struct {
	token      int64
	cached     guardedPass // before (main at 966f728): the decision's lease read served by the cache
	live       guardedPass // Leases = the API reader: a live read on every check
	allowAll   guardedPass // "guarded" = a Widget that only an allow-all webhook sees
	policy     guardedPass // policy mode: the fencing ValidatingAdmissionPolicy, no webhook, one lease in the table
	policyFull guardedPass // the same with policyTableLeases leases in the table
	policyBack guardedPass // and again with one lease (order A B A: the machine's drift shows)
	// barrier is, per grant of policy mode, the table write plus the
	// propagation barrier: what a hand-over adds over webhook mode.
	barrier []time.Duration
	// handoverWebhook and handoverPolicy are hand-over latencies (release to
	// the next holder's start) with the webhook-mode controller and then the
	// policy-mode one (table, barrier, status), side by side in this phase.
	handoverWebhook, handoverPolicy []time.Duration
	tokenAfter                      int64
	leading                         bool
}

func widget(ns, name string) *unstructured.Unstructured {
	u := testenv.Widget(ns, name)
	_ = unstructured.SetNestedField(u.Object, "init", "spec", "writer")
	return u
}

func (b *bench) guarded(ctx context.Context, ws *webhookServer) (guardedResult, error) {
	const ns, name = guardedNamespace, guardedLease
	var res guardedResult
	// Not labelled kubefence.io/fencing=required: the unguarded Widget matches no webhook.
	if err := b.createNamespace(ctx, ns); err != nil {
		return res, err
	}
	l := &coordv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: guardedLeaseSecs},
	}
	if err := b.admin.Create(ctx, l); err != nil {
		return res, fmt.Errorf("creating FencedLease %s/%s: %w", ns, name, err)
	}
	holder, err := b.startKF(ctx, ns, name, "writer-0")
	if err != nil {
		return res, err
	}
	defer holder.stop()
	if _, err := holder.waitStart(ctx, 30*time.Second); err != nil {
		return res, fmt.Errorf("the writer did not get the lease: %w", err)
	}
	tok, ok := holder.el.Token()
	if !ok {
		return res, errors.New("the writer leads but has no token")
	}
	res.token = tok

	// The writing client: its own connection, as the admin.
	wcfg := rest.CopyConfig(b.cfg)
	cl, err := client.New(wcfg, client.Options{Scheme: b.scheme})
	if err != nil {
		return res, err
	}
	// Warm the webhook's cache (the first Get starts the FencedLease informer)
	// and wait until it shows the grant, so that no check needs a live read.
	if err := waitFor(ctx, 30*time.Second, 10*time.Millisecond, "the webhook's cache to show the grant", func(ctx context.Context) (bool, error) {
		var cached coordv1alpha1.FencedLease
		if err := ws.cache.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &cached); err != nil {
			return false, err
		}
		return cached.Status.FencingToken == tok && cached.Status.HolderIdentity == holder.id, nil
	}); err != nil {
		return res, err
	}
	fc := holder.el.Client(cl)
	g := widget(ns, "guarded")
	if err := fc.Create(ctx, g); err != nil {
		return res, fmt.Errorf("creating the guarded Widget: %w", err)
	}
	u := widget(ns, "unguarded")
	u.SetLabels(map[string]string{unguardedLabel: name})
	u.SetAnnotations(map[string]string{unguardedAnnotation: fmt.Sprint(tok)})
	if err := cl.Create(ctx, u); err != nil {
		return res, fmt.Errorf("creating the unguarded Widget: %w", err)
	}

	// The API server picks up new webhook configurations asynchronously: wait
	// until a dry-run patch with a malformed token is refused.
	if err := waitFor(ctx, 30*time.Second, 50*time.Millisecond, "the fencing webhook to be called", func(ctx context.Context) (bool, error) {
		probe := widget(ns, "guarded")
		err := cl.Patch(ctx, probe, client.RawPatch(types.MergePatchType,
			fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"not-a-token"}}}`, coordv1alpha1.FencingTokenAnnotation)), client.DryRunAll)
		return apierrors.IsBadRequest(err) && strings.Contains(err.Error(), "fencing token"), nil
	}); err != nil {
		return res, err
	}

	guardedPatch := func(ctx context.Context, i int) error {
		return fc.Patch(ctx, widget(ns, "guarded"), client.RawPatch(types.MergePatchType,
			fmt.Appendf(nil, `{"spec":{"writer":"g-%06d"}}`, i)))
	}
	// plainPatch writes Widget obj with the admin's client, with the same
	// metadata the fenced client adds to the guarded patch; the writer is
	// prefix and the write's number.
	plainPatch := func(obj, prefix string) func(context.Context, int) error {
		return func(ctx context.Context, i int) error {
			return cl.Patch(ctx, widget(ns, obj), client.RawPatch(types.MergePatchType,
				fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"%d"},"labels":{%q:%q}},"spec":{"writer":"%s-%06d"}}`,
					unguardedAnnotation, tok, unguardedLabel, name, prefix, i)))
		}
	}
	unguardedPatch := plainPatch("unguarded", "u")

	fmt.Fprintf(os.Stderr, "bench: guarded writes, lease read from the cache: %d + %d warm-up pairs\n", b.opts.guardedWrites, guardedWarmup)
	if res.cached, err = b.guardedPass(ctx, ws, b.opts.guardedWrites, guardedPatch, unguardedPatch); err != nil {
		return res, err
	}
	if b.opts.allowAllWrites > 0 {
		if err := b.installAllowAll(ctx, ws, ns, name, tok); err != nil {
			return res, err
		}
		allowAllPatch := plainPatch("allow-all", "a")
		fmt.Fprintf(os.Stderr, "bench: baseline, a webhook that allows every write: %d + %d warm-up pairs\n", b.opts.allowAllWrites, guardedWarmup)
		if res.allowAll, err = b.guardedPass(ctx, ws, b.opts.allowAllWrites, allowAllPatch, unguardedPatch); err != nil {
			return res, err
		}
	}
	if b.opts.liveWrites > 0 {
		fmt.Fprintf(os.Stderr, "bench: guarded writes, lease read from the API server on every check: %d + %d warm-up pairs\n", b.opts.liveWrites, guardedWarmup)
		ws.leases.live.Store(true)
		res.live, err = b.guardedPass(ctx, ws, b.opts.liveWrites, guardedPatch, unguardedPatch)
		ws.leases.live.Store(false)
		if err != nil {
			return res, err
		}
	}
	if b.opts.policyWrites > 0 {
		if err := b.switchToPolicy(ctx, ns, name); err != nil {
			return res, err
		}
		fmt.Fprintf(os.Stderr, "bench: guarded writes in policy mode (no webhook): %d + %d warm-up pairs\n", b.opts.policyWrites, guardedWarmup)
		if res.policy, err = b.guardedPass(ctx, ws, b.opts.policyWrites, guardedPatch, unguardedPatch); err != nil {
			return res, err
		}
		if err := b.fillTable(ctx, ns); err != nil {
			return res, err
		}
		fmt.Fprintf(os.Stderr, "bench: guarded writes in policy mode, %d leases in the table: %d + %d warm-up pairs\n", b.opts.policyTableLeases, b.opts.policyWrites, guardedWarmup)
		if res.policyFull, err = b.guardedPass(ctx, ws, b.opts.policyWrites, guardedPatch, unguardedPatch); err != nil {
			return res, err
		}
		if err := b.trimTable(ctx, ns, name); err != nil {
			return res, err
		}
		fmt.Fprintf(os.Stderr, "bench: guarded writes in policy mode, one lease in the table again: %d + %d warm-up pairs\n", b.opts.policyWrites, guardedWarmup)
		if res.policyBack, err = b.guardedPass(ctx, ws, b.opts.policyWrites, guardedPatch, unguardedPatch); err != nil {
			return res, err
		}
		if res.barrier, err = b.barrierPass(ctx, ns); err != nil {
			return res, err
		}
		if b.opts.handovers > 0 {
			if res.handoverWebhook, res.handoverPolicy, err = b.handoversBothModes(ctx); err != nil {
				return res, err
			}
		}
	}
	res.tokenAfter, res.leading = holder.el.Token()
	return res, nil
}

// handoversBothModes runs phase 2's kubefence hand-overs with the
// webhook-mode controller, then restarts the controller in policy mode and
// runs them again: a grant then writes the tenure table, waits for the
// barrier and only then the status.
func (b *bench) handoversBothModes(ctx context.Context) (webhookMode, policyMode []time.Duration, err error) {
	fmt.Fprintf(os.Stderr, "bench: hand-over, webhook-mode controller: %d iterations\n", b.opts.handovers)
	h, err := b.kfHandoverIn(ctx, "handover-webhook-mode")
	if err != nil {
		return nil, nil, err
	}
	b.stopController()
	if err := b.runController(ctx, operator.EnforcementPolicy); err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(os.Stderr, "bench: hand-over, policy-mode controller (table + barrier + status): %d iterations\n", b.opts.handovers)
	p, err := b.kfHandoverIn(ctx, "handover-policy-mode")
	if err != nil {
		return nil, nil, err
	}
	return h.latency, p.latency, nil
}

// barrierGrants is how many grants the barrier pass times.
const barrierGrants = 200

// barrierPass times the first phase of policy mode's grant, barrierGrants
// times, on a lease of its own in the table: the entry's write (as
// policy.Tenures.Grant writes it) and policy.Barrier.Wait, with dry-run probes
// to the API server, until it refuses the previous token and accepts the new.
func (b *bench) barrierPass(ctx context.Context, ns string) ([]time.Duration, error) {
	table := &policy.Table{Reader: b.admin, Writer: b.admin}
	barrier := &policy.Barrier{Servers: policy.ConfiguredServer(b.cfg), Prober: &policy.DryRunProber{}}
	fmt.Fprintf(os.Stderr, "bench: policy mode, table write + propagation barrier: %d grants\n", barrierGrants)
	var out []time.Duration
	for i := range barrierGrants {
		prev, next := int64(100+i), int64(101+i)
		start := time.Now()
		if _, _, err := table.Update(ctx, ns, "barrier", func(policy.Entry, bool) (policy.Entry, bool) {
			return policy.Entry{Token: next, Held: true, User: b.adminUser, Attempt: fmt.Sprint(i)}, true
		}); err != nil {
			return out, err
		}
		if err := barrier.Wait(ctx, ns, "barrier", &prev, next); err != nil {
			return out, err
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

// switchToPolicy turns the cluster to policy mode for lease ns/name, as the
// operator with --enforcement=policy and config/components/policy do: the
// fencing webhook keeps only its /scale and eviction entries, the policies
// are applied, and the lease's tenure table entry is written from its status
// (policy.Tenures.Sync). It returns once the policy refuses a malformed token.
func (b *bench) switchToPolicy(ctx context.Context, ns, name string) error {
	var cfg admissionregistrationv1.ValidatingWebhookConfiguration
	if err := b.admin.Get(ctx, types.NamespacedName{Name: "fencing-webhook-configuration"}, &cfg); err != nil {
		return fmt.Errorf("reading the installed fencing webhook configuration: %w", err)
	}
	var keep []admissionregistrationv1.ValidatingWebhook
	for _, w := range cfg.Webhooks {
		if strings.HasPrefix(w.Name, "scale.") || strings.HasPrefix(w.Name, "eviction.") {
			keep = append(keep, w)
		}
	}
	cfg.Webhooks = keep
	if err := b.admin.Update(ctx, &cfg); err != nil {
		return fmt.Errorf("trimming the fencing webhook configuration to /scale and evictions: %w", err)
	}
	o := testenv.Operator(operatorNamespace, b.adminUser)
	o.Enforcement = operator.EnforcementPolicy
	o.RequiredKinds = []schema.GroupResource{{Group: testenv.WidgetGVK.Group, Resource: "widgets"}}
	if err := o.PolicySettings().Apply(ctx, b.admin); err != nil {
		return err
	}
	var l coordv1alpha1.FencedLease
	if err := b.admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &l); err != nil {
		return err
	}
	t := &policy.Tenures{Table: &policy.Table{Reader: b.admin, Writer: b.admin}, Leases: b.admin}
	if err := t.Sync(ctx, &l); err != nil {
		return fmt.Errorf("writing the tenure table: %w", err)
	}
	return waitFor(ctx, 30*time.Second, 50*time.Millisecond, "the fencing policy to decide", func(ctx context.Context) (bool, error) {
		err := b.admin.Patch(ctx, widget(ns, "guarded"), client.RawPatch(types.MergePatchType,
			fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"not-a-token"}}}`, coordv1alpha1.FencingTokenAnnotation)), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policy.FencingPolicyName+"'"), nil
	})
}

// trimTable leaves only lease's entry in the namespace's tenure table.
func (b *bench) trimTable(ctx context.Context, ns, lease string) error {
	var cm corev1.ConfigMap
	if err := b.admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: coordv1alpha1.TenureTableName}, &cm); err != nil {
		return err
	}
	cm.Data = map[string]string{lease: cm.Data[lease], policy.IncarnationKey: cm.Data[policy.IncarnationKey]}
	return b.admin.Update(ctx, &cm)
}

// fillTable makes the namespace's tenure table hold policyTableLeases
// leases: the others' entries, each with a holder, a service-account user
// and a token.
func (b *bench) fillTable(ctx context.Context, ns string) error {
	var cm corev1.ConfigMap
	if err := b.admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: coordv1alpha1.TenureTableName}, &cm); err != nil {
		return err
	}
	for i := 1; i < b.opts.policyTableLeases; i++ {
		cm.Data[fmt.Sprintf("lease-%05d", i)] = fmt.Sprintf("%d %d - system:serviceaccount:%s:writer-%05d", 1000+i, 1000+i, ns, i)
	}
	if err := b.admin.Update(ctx, &cm); err != nil {
		return fmt.Errorf("filling the tenure table with %d leases: %w", b.opts.policyTableLeases, err)
	}
	size := 0
	for k, v := range cm.Data {
		size += len(k) + len(v)
	}
	b.policyTableBytes = size
	return nil
}

// installAllowAll installs a validating webhook that admits every write of a
// Widget labelled allowAllLabel, served by this process at allowAllPath and
// configured like the fencing webhook (same server, TLS, timeout, failure
// policy), and creates such a Widget: the cost of any webhook at all.
func (b *bench) installAllowAll(ctx context.Context, ws *webhookServer, ns, lease string, tok int64) error {
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
		Rule: admissionregistrationv1.Rule{APIGroups: []string{testenv.WidgetGVK.Group}, APIVersions: []string{testenv.WidgetGVK.Version},
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
		before := ws.allowed.Load()
		if err := b.admin.Patch(ctx, widget(ns, "allow-all"), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"writer":"probe"}}`)), client.DryRunAll); err != nil {
			return false, err
		}
		return ws.allowed.Load() > before, nil
	})
}

// guardedPass sends warm-up pairs, then n measured pairs (guarded first).
func (b *bench) guardedPass(ctx context.Context, ws *webhookServer, n int, guardedPatch, unguardedPatch func(context.Context, int) error) (guardedPass, error) {
	var p guardedPass
	for i := range guardedWarmup {
		if err := guardedPatch(ctx, i); err != nil {
			return p, fmt.Errorf("warm-up guarded patch: %w", err)
		}
		if err := unguardedPatch(ctx, i); err != nil {
			return p, fmt.Errorf("warm-up unguarded patch: %w", err)
		}
	}
	before, err := gatherMetrics()
	if err != nil {
		return p, err
	}
	live0, fb0, cache0 := len(ws.leases.liveReads()), ws.fallback.gets.Load(), ws.leases.cacheGets.Load()
	timed := func(f func(context.Context, int) error, i int, into *[]time.Duration) error {
		start := time.Now()
		err := f(ctx, i)
		d := time.Since(start)
		if err != nil {
			return tolerate(ctx, &p.failures, n, "write", i, err)
		}
		*into = append(*into, d)
		return nil
	}
	for i := range n {
		if err := timed(guardedPatch, guardedWarmup+i, &p.guarded); err != nil {
			return p, err
		}
		if err := timed(unguardedPatch, guardedWarmup+i, &p.unguarded); err != nil {
			return p, err
		}
	}
	after, err := gatherMetrics()
	if err != nil {
		return p, err
	}
	p.checks = after.checks.sub(before.checks)
	p.server = after.server.sub(before.server)[coordv1alpha1.FencingGuardedPath]
	p.liveReads = ws.leases.liveReads()[live0:]
	p.fallbacks = ws.fallback.gets.Load() - fb0
	p.cacheReads = ws.leases.cacheGets.Load() - cache0
	return p, nil
}

// pairDiffs is guarded[i] - unguarded[i] for the pairs where both succeeded
// (the series are aligned when no write failed).
func pairDiffs(p guardedPass) []time.Duration {
	if p.failures > 0 {
		return nil
	}
	n := min(len(p.guarded), len(p.unguarded))
	out := make([]time.Duration, n)
	for i := range n {
		out[i] = p.guarded[i] - p.unguarded[i]
	}
	return out
}

func mean(ds []time.Duration) (time.Duration, bool) {
	if len(ds) == 0 {
		return 0, false
	}
	var s time.Duration
	for _, d := range ds {
		s += d
	}
	return s / time.Duration(len(ds)), true
}
