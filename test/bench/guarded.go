package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/controllers/policy"
	"github.com/kubefence/kubefence/hack/devenv"
	"github.com/kubefence/kubefence/test/testenv"
)

// Phase 4: what fencing adds to a write of a guarded object.
//
// A Widget guarded by a FencedLease (label kubefence.io/lease, annotation
// kubefence.io/fencing-token) and an unguarded Widget in the same namespace are
// patched alternately by one client. The guarded patches pass through the
// fencing webhook (served by this process, reading the lease live as shipped);
// the unguarded ones match no webhook. Then the same in policy mode (the
// fencing ValidatingAdmissionPolicy, no webhook), with one lease in the
// namespace's tenure table and with many.

const (
	guardedNamespace = "guarded-writes"
	guardedLease     = "writer"
	guardedLeaseSecs = 60 // nothing expires during the phase
	guardedWarmup    = 100
	// Label and annotation of the unguarded Widget: the same shape and size of
	// metadata as the guard, under keys no webhook looks at.
	unguardedLabel      = "example.kubefence.io/lease"
	unguardedAnnotation = "example.kubefence.io/fencing-token"
)

type guardedPass struct {
	guarded, unguarded []time.Duration
	failures           int
}

// guardedResult is phase 4.
type guardedResult struct {
	token      int64
	webhook    guardedPass // the fencing webhook as shipped
	policy     guardedPass // policy mode, one lease in the tenure table
	policyFull guardedPass // policy mode, policyTableLeases leases in the table
	sideBySide sideBySide  // -baseline-writes
	tokenAfter int64
	leading    bool
}

func widget(ns, name string) *unstructured.Unstructured {
	u := testenv.Widget(ns, name)
	_ = unstructured.SetNestedField(u.Object, "init", "spec", "writer")
	return u
}

// startWebhooks installs config/webhook/{manifests,fencing}.yaml in the API
// server through envtest's WebhookInstallOptions and serves them, as
// operator.Setup wires them, from a manager in this process: the FencedLease
// validator and the fencing handlers. It is called only before the guarded
// phase (or the scale run), so that the lease phases run without webhooks;
// stop ends the manager.
func (b *bench) startWebhooks(ctx context.Context) (stop func(), err error) {
	root, err := devenv.ModuleRoot()
	if err != nil {
		return nil, err
	}
	wopts := &b.testEnv.WebhookInstallOptions
	// Start prepared a CA and a serving directory for no webhooks; replace them.
	if err := wopts.Cleanup(); err != nil {
		return nil, err
	}
	*wopts = envtest.WebhookInstallOptions{Paths: devenv.WebhookPaths(root)}
	if err := wopts.PrepWithoutInstalling(); err != nil {
		return nil, fmt.Errorf("preparing the webhooks: %w", err)
	}
	m, err := b.cluster.ServeOperator(ctx, b.cluster.Webhooks(), func(_ *rest.Config, opts *ctrl.Options) {
		opts.HealthProbeBindAddress = "0"
		b.registerAllowAll(opts.WebhookServer)
	})
	if err != nil {
		return nil, fmt.Errorf("serving the webhooks: %w", err)
	}
	stop = stopper("webhook manager", m)
	if err := wopts.Install(b.cfg); err != nil {
		stop()
		return nil, fmt.Errorf("installing the webhook configurations: %w", err)
	}
	return stop, nil
}

func (b *bench) guarded(ctx context.Context) (guardedResult, error) {
	const ns, name = guardedNamespace, guardedLease
	var res guardedResult
	// The namespace is not labelled kubefence.io/fencing=required: the
	// unguarded Widget matches no webhook.
	if err := b.createFencedLease(ctx, ns, name, guardedLeaseSecs); err != nil {
		return res, err
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
	cl, err := client.New(rest.CopyConfig(b.cfg), client.Options{Scheme: b.scheme})
	if err != nil {
		return res, err
	}
	fc := holder.el.Client(cl)
	if err := fc.Create(ctx, widget(ns, "guarded")); err != nil {
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
	if err := b.waitRefused(ctx, cl, "the fencing webhook", func(err error) bool {
		return apierrors.IsBadRequest(err) && strings.Contains(err.Error(), "fencing token")
	}); err != nil {
		return res, err
	}

	guardedPatch := func(ctx context.Context, i int) error {
		return fc.Patch(ctx, widget(ns, "guarded"), client.RawPatch(types.MergePatchType,
			fmt.Appendf(nil, `{"spec":{"writer":"g-%06d"}}`, i)))
	}
	// The unguarded patch carries the same metadata the fenced client adds
	// to the guarded one.
	unguardedPatch := func(ctx context.Context, i int) error {
		return cl.Patch(ctx, widget(ns, "unguarded"), client.RawPatch(types.MergePatchType,
			fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"%d"},"labels":{%q:%q}},"spec":{"writer":"u-%06d"}}`,
				unguardedAnnotation, tok, unguardedLabel, name, i)))
	}
	if n := b.opts.baselineWrites; n > 0 {
		if err := b.installAllowAll(ctx, ns, name, tok); err != nil {
			return res, err
		}
		allowAllPatch := func(ctx context.Context, i int) error {
			return cl.Patch(ctx, widget(ns, "allow-all"), client.RawPatch(types.MergePatchType,
				fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"%d"},"labels":{%q:%q}},"spec":{"writer":"a-%06d"}}`,
					unguardedAnnotation, tok, unguardedLabel, name, i)))
		}
		fmt.Fprintf(os.Stderr, "bench: guarded writes side by side (unguarded, allow-all, lease reader before and after): %d + %d warm-up rounds\n", n, guardedWarmup)
		if res.sideBySide, err = b.sideBySidePass(ctx, n, guardedPatch, unguardedPatch, allowAllPatch); err != nil {
			return res, err
		}
	}
	passes := []struct {
		says    string
		n       int
		into    *guardedPass
		prep    func() error
		profile string
	}{
		{"through the fencing webhook", b.opts.guardedWrites, &res.webhook, nil, ""},
		{"in policy mode, 1 lease in the table", b.opts.policyWrites, &res.policy, func() error { return b.switchToPolicy(ctx, cl, ns, name) }, "policy-1"},
		{fmt.Sprintf("in policy mode, %d leases in the table", b.opts.policyTableLeases), b.opts.policyWrites, &res.policyFull, func() error { return b.fillTable(ctx, ns) }, fmt.Sprintf("policy-%d", b.opts.policyTableLeases)},
	}
	for _, p := range passes {
		if p.n == 0 {
			break
		}
		if p.prep != nil {
			if err := p.prep(); err != nil {
				return res, err
			}
		}
		fmt.Fprintf(os.Stderr, "bench: guarded writes %s: %d + %d warm-up pairs\n", p.says, p.n, guardedWarmup)
		var profiled func()
		if p.profile != "" && b.opts.apiserverProfile != "" {
			profiled = func() { b.profileAPIServer(ctx, b.opts.apiserverProfile+"-"+p.profile+".pprof") }
		}
		if *p.into, err = b.guardedPass(ctx, p.n, guardedPatch, unguardedPatch, profiled); err != nil {
			return res, err
		}
	}
	res.tokenAfter, res.leading = holder.el.Token()
	return res, nil
}

// waitRefused waits until a dry-run patch of the guarded Widget with a
// malformed token is refused as refused tells: the API server calls what was
// just installed.
func (b *bench) waitRefused(ctx context.Context, cl client.Client, what string, refused func(error) bool) error {
	return waitFor(ctx, 30*time.Second, 50*time.Millisecond, what+" to decide", func(ctx context.Context) (bool, error) {
		err := cl.Patch(ctx, widget(guardedNamespace, "guarded"), client.RawPatch(types.MergePatchType,
			fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"not-a-token"}}}`, coordv1alpha1.FencingTokenAnnotation)), client.DryRunAll)
		return err != nil && refused(err), nil
	})
}

// switchToPolicy turns the cluster to policy mode for lease ns/name, as the
// operator with --enforcement=policy and config/components/policy do: the
// fencing webhooks become the component's (/scale and evictions), the policies
// are applied, and the lease's tenure table entry is written from its status
// (policy.Tenures.Sync). It returns once the policy refuses a malformed token.
func (b *bench) switchToPolicy(ctx context.Context, cl client.Client, ns, name string) error {
	// The fencing webhooks policy mode ships (config/components/policy),
	// served where the installed ones are.
	root, err := devenv.ModuleRoot()
	if err != nil {
		return err
	}
	shipped, err := testenv.PolicyModeFencingWebhooks(root)
	if err != nil {
		return err
	}
	var cfg admissionregistrationv1.ValidatingWebhookConfiguration
	if err := b.admin.Get(ctx, types.NamespacedName{Name: shipped.Name}, &cfg); err != nil {
		return fmt.Errorf("reading the installed fencing webhook configuration: %w", err)
	}
	for i, w := range shipped.Webhooks {
		j := slices.IndexFunc(cfg.Webhooks, func(x admissionregistrationv1.ValidatingWebhook) bool { return x.Name == w.Name })
		if j < 0 {
			return fmt.Errorf("policy mode's fencing webhook %s is not installed", w.Name)
		}
		shipped.Webhooks[i].ClientConfig = cfg.Webhooks[j].ClientConfig
	}
	cfg.Webhooks = shipped.Webhooks
	if err := b.admin.Update(ctx, &cfg); err != nil {
		return fmt.Errorf("installing policy mode's fencing webhooks: %w", err)
	}
	o := b.cluster.Operator()
	o.Enforcement = operator.EnforcementPolicy
	o.RequiredKinds = []schema.GroupResource{{Group: devenv.WidgetGVK.Group, Resource: "widgets"}}
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
	return b.waitRefused(ctx, cl, "the fencing policy", func(err error) bool {
		return strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policy.FencingPolicyName+"'")
	})
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
		policy.SetEntryOf(&cm, fmt.Sprintf("lease-%05d", i), fmt.Sprintf("%d %d - system:serviceaccount:%s:writer-%05d", 1000+i, 1000+i, ns, i))
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

// profileAPIServer starts taking a CPU profile of the kube-apiserver
// (/debug/pprof/profile, 5 s) and writes it to path when it is done.
func (b *bench) profileAPIServer(ctx context.Context, path string) {
	go func() {
		c, err := kubernetes.NewForConfig(b.cfg)
		if err == nil {
			var raw []byte
			raw, err = c.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", "5").DoRaw(ctx)
			if err == nil {
				err = os.WriteFile(path, raw, 0o644)
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: profiling the kube-apiserver into %s: %v\n", path, err)
			return
		}
		fmt.Fprintf(os.Stderr, "bench: the kube-apiserver's CPU profile is in %s\n", path)
	}()
}

// guardedPass sends warm-up pairs, then n measured pairs (guarded first);
// profile, if set, is called when the measured pairs start.
func (b *bench) guardedPass(ctx context.Context, n int, guardedPatch, unguardedPatch func(context.Context, int) error, profile func()) (guardedPass, error) {
	var p guardedPass
	for i := range guardedWarmup {
		if err := guardedPatch(ctx, i); err != nil {
			return p, fmt.Errorf("warm-up guarded patch: %w", err)
		}
		if err := unguardedPatch(ctx, i); err != nil {
			return p, fmt.Errorf("warm-up unguarded patch: %w", err)
		}
	}
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
	if profile != nil {
		profile()
	}
	for i := range n {
		if err := timed(guardedPatch, guardedWarmup+i, &p.guarded); err != nil {
			return p, err
		}
		if err := timed(unguardedPatch, guardedWarmup+i, &p.unguarded); err != nil {
			return p, err
		}
	}
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

func signedMS(d time.Duration) string {
	if d >= 0 {
		return "+" + ms(d)
	}
	return ms(d)
}

// guardedConfigRows describe phase 4 in the configuration table.
func guardedConfigRows(o options) [][]string {
	return [][]string{
		{"guarded writes", fmt.Sprintf("per pass, %d warm-up then the measured pairs of merge patches (spec.writer): a guarded Widget, then an unguarded one in the same namespace, one client, sequential; lease %s/%s (%d s) held by one fence.Elector, guarded writes through its fenced client", guardedWarmup, guardedNamespace, guardedLease, guardedLeaseSecs)},
		{"guarded writes: passes", fmt.Sprintf("fencing webhook as shipped (%d pairs); side by side: unguarded, allow-all webhook, lease reader of 73a2e0a and today's (%d rounds; 0: skipped); policy mode with 1, then %d leases in the tenure table (%d pairs each; 0: skipped)", o.guardedWrites, o.baselineWrites, o.policyTableLeases, o.policyWrites)},
	}
}

func (r *report) printGuarded(w io.Writer, b *bench) {
	g := r.guarded
	fmt.Fprintln(w, "## Guarded writes")
	fmt.Fprintln(w)

	// One row per pass; the targets: a webhook within 1.25x at p50 and +5 ms
	// at p99, policy mode within 1.05x and +1 ms.
	row := func(name string, p guardedPass, maxRatio float64, maxP99 time.Duration) []string {
		gp50, ok1 := quantile(p.guarded, 0.5)
		up50, ok2 := quantile(p.unguarded, 0.5)
		gp99, ok3 := quantile(p.guarded, 0.99)
		up99, ok4 := quantile(p.unguarded, 0.99)
		p50, p99, met := "n/a", "n/a", "n/a"
		if ok1 && ok2 && ok3 && ok4 && up50 > 0 {
			ratio := float64(gp50) / float64(up50)
			p50 = fmt.Sprintf("%s (%.2f)", signedMS(gp50-up50), ratio)
			p99 = signedMS(gp99 - up99)
			met = fmt.Sprintf("%s / %s", yesNo(ratio <= maxRatio), yesNo(gp99-up99 < maxP99))
		}
		pair := "n/a"
		if diffs := pairDiffs(p); len(diffs) > 0 {
			pair = q(diffs, 0.5) + " / " + q(diffs, 0.99)
		}
		return []string{name, q(p.guarded, 0.5), q(p.unguarded, 0.5), p50, p99, pair,
			fmt.Sprintf("%d (%d)", len(p.guarded), p.failures), fmt.Sprintf("<= %.2f / < %s", maxRatio, ms(maxP99)), met}
	}
	rows := [][]string{{"pass", "guarded p50", "unguarded p50", "p50 overhead (ratio)", "p99 overhead", "per pair p50 / p99", "samples (failed)", "target ratio / p99", "met"}}
	rows = append(rows, row("fencing webhook (as shipped)", g.webhook, 1.25, 5*time.Millisecond))
	if b.opts.policyWrites > 0 {
		rows = append(rows,
			row("policy mode, 1 lease in the table", g.policy, 1.05, time.Millisecond),
			row(fmt.Sprintf("policy mode, %d leases in the table", b.opts.policyTableLeases), g.policyFull, 1.05, time.Millisecond))
	}
	table(w, rows)
	fmt.Fprintln(w)
	if b.opts.baselineWrites > 0 {
		r.printSideBySide(w, b)
	}

	holding := fmt.Sprintf("still leading with token %d at the end", g.tokenAfter)
	if !g.leading || g.tokenAfter != g.token {
		holding = fmt.Sprintf("NOT leading with the same token at the end (leading %v, token %d)", g.leading, g.tokenAfter)
	}
	fmt.Fprintf(w, "Lease %s/%s granted with token %d, %s.\n", guardedNamespace, guardedLease, g.token, holding)
	if b.opts.policyWrites > 0 {
		fmt.Fprintf(w, "The tenure table %s/%s held %d leases' entries, %d bytes of data (a ConfigMap's data may hold 1 MiB).\n", guardedNamespace, coordv1alpha1.TenureTableName, b.opts.policyTableLeases, b.policyTableBytes)
	}
	fmt.Fprintln(w, "Overhead = guarded - unguarded at the same quantile; ratio = guarded p50 / unguarded p50; quantiles are nearest-rank.")
}
