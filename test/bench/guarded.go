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
// patched by one client, one write of each kind per round in a rotating
// order, so that all kinds meet the same load. In webhook mode the guarded
// patches pass through the fencing webhook (served by this process, reading
// the lease live as shipped), and a third Widget's through an allow-all
// webhook (allowall.go); the unguarded ones match no webhook. Then policy mode
// (the fencing ValidatingAdmissionPolicy, no webhook), with one lease in the
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

// guardedPass is one pass of phase 4: its kinds of write (the unguarded one
// first, the guarded one last), the durations of each, and the target for
// the guarded write's p50 as a ratio of the unguarded one's.
type guardedPass struct {
	name     string
	kinds    []string
	writes   []func(context.Context, int) error
	d        [][]time.Duration
	failures int
	maxRatio float64
}

// guardedResult is phase 4.
type guardedResult struct {
	token      int64
	passes     []guardedPass
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
			fmt.Appendf(nil, `{"spec":{"writer":"%06d"}}`, i)))
	}
	// The other patches carry the same metadata the fenced client adds to
	// the guarded one, under keys the fencing webhook does not read.
	plainPatch := func(obj string) func(context.Context, int) error {
		return func(ctx context.Context, i int) error {
			return cl.Patch(ctx, widget(ns, obj), client.RawPatch(types.MergePatchType,
				fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"%d"},"labels":{%q:%q}},"spec":{"writer":"%06d"}}`,
					unguardedAnnotation, tok, unguardedLabel, name, i)))
		}
	}
	unguardedPatch := plainPatch("unguarded")
	if n := b.opts.baselineWrites; n > 0 {
		if err := b.installAllowAll(ctx, ns, name, tok); err != nil {
			return res, err
		}
		p := guardedPass{name: "webhook mode", kinds: []string{"unguarded", "allow-all webhook", "fencing webhook as shipped"},
			writes: []func(context.Context, int) error{unguardedPatch, plainPatch("allow-all"), guardedPatch}, maxRatio: 1.40}
		if err := b.guardedPass(ctx, n, &p, nil); err != nil {
			return res, err
		}
		res.passes = append(res.passes, p)
	}
	for i, prep := range []func() error{func() error { return b.switchToPolicy(ctx, cl, ns, name) }, func() error { return b.fillTable(ctx, ns) }} {
		if b.opts.policyWrites == 0 {
			break
		}
		if err := prep(); err != nil {
			return res, err
		}
		leases := []int{1, b.opts.policyTableLeases}[i]
		p := guardedPass{name: fmt.Sprintf("policy mode, %d lease(s) in the table", leases), kinds: []string{"unguarded", "guarded"},
			writes: []func(context.Context, int) error{unguardedPatch, guardedPatch}, maxRatio: 1.05}
		var profiled func()
		if b.opts.apiserverProfile != "" {
			profiled = func() { b.profileAPIServer(ctx, fmt.Sprintf("%s-policy-%d.pprof", b.opts.apiserverProfile, leases)) }
		}
		if err := b.guardedPass(ctx, b.opts.policyWrites, &p, profiled); err != nil {
			return res, err
		}
		res.passes = append(res.passes, p)
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

// guardedPass runs p: warm-up rounds, then n measured rounds, each one write
// of every kind in a rotating order; profile, if set, is called when the
// measured rounds start.
func (b *bench) guardedPass(ctx context.Context, n int, p *guardedPass, profile func()) error {
	fmt.Fprintf(os.Stderr, "bench: guarded writes, %s (%s): %d + %d warm-up rounds\n", p.name, strings.Join(p.kinds, ", "), n, guardedWarmup)
	p.d = make([][]time.Duration, len(p.kinds))
	for i := range guardedWarmup + n {
		if i == guardedWarmup && profile != nil {
			profile()
		}
		for k := range p.kinds {
			kind := (i + k) % len(p.kinds)
			start := time.Now()
			err := p.writes[kind](ctx, i)
			d := time.Since(start)
			switch {
			case err != nil && i < guardedWarmup:
				return fmt.Errorf("warm-up %s write: %w", p.kinds[kind], err)
			case err != nil:
				if err := tolerate(ctx, &p.failures, n, "write", i, err); err != nil {
					return err
				}
			case i >= guardedWarmup:
				p.d[kind] = append(p.d[kind], d)
			}
		}
	}
	return nil
}

// guardedConfigRows describe phase 4 in the configuration table.
func guardedConfigRows(o options) [][]string {
	return [][]string{
		{"guarded writes", fmt.Sprintf("per pass, %d warm-up then the measured rounds of merge patches (spec.writer), one write of each kind per round in a rotating order, one client: an unguarded Widget, a guarded one in the same namespace; lease %s/%s (%d s) held by one fence.Elector, guarded writes through its fenced client", guardedWarmup, guardedNamespace, guardedLease, guardedLeaseSecs)},
		{"guarded writes: passes", fmt.Sprintf("webhook mode: unguarded, allow-all webhook, fencing webhook as shipped (%d rounds; 0: skipped); policy mode with 1, then %d leases in the tenure table (%d rounds each; 0: skipped)", o.baselineWrites, o.policyTableLeases, o.policyWrites)},
	}
}

func (r *report) printGuarded(w io.Writer, b *bench) {
	g := r.guarded
	fmt.Fprintln(w, "## Guarded writes")
	fmt.Fprintln(w)
	rows := [][]string{{"pass", "write", "p50", "p99", "p50 overhead (ratio)", "p99 ratio", "samples", "target p50 ratio", "met"}}
	for _, p := range g.passes {
		up50, ok1 := quantile(p.d[0], 0.5)
		up99, ok2 := quantile(p.d[0], 0.99)
		for k, kind := range p.kinds {
			p50, okA := quantile(p.d[k], 0.5)
			p99, okB := quantile(p.d[k], 0.99)
			over, r99, target, met := "", "", "", ""
			if k > 0 && ok1 && ok2 && okA && okB && up50 > 0 && up99 > 0 {
				ratio := float64(p50) / float64(up50)
				over = fmt.Sprintf("%s (%.2f)", signedMS(p50-up50), ratio)
				r99 = fmt.Sprintf("%.2f", float64(p99)/float64(up99))
				if k == len(p.kinds)-1 {
					target, met = fmt.Sprintf("<= %.2f", p.maxRatio), yesNo(ratio <= p.maxRatio)
				}
			}
			rows = append(rows, []string{p.name, kind, q(p.d[k], 0.5), q(p.d[k], 0.99), over, r99, fmt.Sprint(len(p.d[k])), target, met})
		}
	}
	table(w, rows)
	fmt.Fprintln(w)
	for _, p := range g.passes {
		if p.failures > 0 {
			fmt.Fprintf(w, "%s: %d failed writes tolerated.\n", p.name, p.failures)
		}
	}
	holding := fmt.Sprintf("still leading with token %d at the end", g.tokenAfter)
	if !g.leading || g.tokenAfter != g.token {
		holding = fmt.Sprintf("NOT leading with the same token at the end (leading %v, token %d)", g.leading, g.tokenAfter)
	}
	fmt.Fprintf(w, "Lease %s/%s granted with token %d, %s.\n", guardedNamespace, guardedLease, g.token, holding)
	if b.opts.policyWrites > 0 {
		fmt.Fprintf(w, "The tenure table %s/%s held %d leases' entries, %d bytes of data (a ConfigMap's data may hold 1 MiB).\n", guardedNamespace, coordv1alpha1.TenureTableName, b.opts.policyTableLeases, b.policyTableBytes)
	}
	fmt.Fprintln(w, "Overhead and ratios are of the unguarded write's quantile in the same pass; quantiles are nearest-rank.")
}

func signedMS(d time.Duration) string {
	if d >= 0 {
		return "+" + ms(d)
	}
	return ms(d)
}
