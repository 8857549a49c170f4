package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	dto "github.com/prometheus/client_model/go"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/controllers/policy"
	"github.com/kubefence/kubefence/controllers/webhooks/fencing"
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

var widgetGVK = schema.GroupVersionKind{Group: "example.kubefence.io", Version: "v1", Kind: "Widget"}

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
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(mgrCtx); err != nil {
			fmt.Fprintln(os.Stderr, "bench: webhook manager:", err)
		}
	}()
	ws.stop = func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			fmt.Fprintln(os.Stderr, "bench: webhook manager did not stop within 30s")
		}
	}
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

// histSeries is one series of the decision-time histogram (or a difference of
// two gatherings of it).
type histSeries struct {
	count  uint64
	sum    float64
	bounds []float64 // upper bounds of the finite buckets
	cum    []uint64  // cumulative counts of those buckets
}

// histSnap is the histogram by its lease_read label.
type histSnap map[string]histSeries

// gatherHist reads the histogram name from controller-runtime's metrics
// registry, by the value of label.
func gatherHist(name, label string) (histSnap, error) {
	fams, err := crmetrics.Registry.Gather()
	if err != nil {
		return nil, err
	}
	out := histSnap{}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			value := ""
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label {
					value = lp.GetValue()
				}
			}
			out[value] = seriesOf(m.GetHistogram())
		}
	}
	return out, nil
}

// metricSnap is the two histograms the guarded phase reads.
type metricSnap struct{ checks, server histSnap }

func gatherMetrics() (metricSnap, error) {
	c, err := gatherHist(checksMetric, "lease_read")
	if err != nil {
		return metricSnap{}, err
	}
	s, err := gatherHist(serverMetric, "webhook")
	return metricSnap{checks: c, server: s}, err
}

func seriesOf(h *dto.Histogram) histSeries {
	s := histSeries{count: h.GetSampleCount(), sum: h.GetSampleSum()}
	for _, bk := range h.GetBucket() {
		if math.IsInf(bk.GetUpperBound(), 1) {
			continue
		}
		s.bounds = append(s.bounds, bk.GetUpperBound())
		s.cum = append(s.cum, bk.GetCumulativeCount())
	}
	return s
}

// sub is a - b, label by label.
func (a histSnap) sub(b histSnap) histSnap {
	out := histSnap{}
	for k, s := range a {
		o := b[k]
		d := histSeries{count: s.count - o.count, sum: s.sum - o.sum, bounds: s.bounds}
		for i := range s.cum {
			c := s.cum[i]
			if i < len(o.cum) {
				c -= o.cum[i]
			}
			d.cum = append(d.cum, c)
		}
		out[k] = d
	}
	return out
}

// total merges every label.
func (a histSnap) total() histSeries {
	var t histSeries
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s := a[k]
		t.count += s.count
		t.sum += s.sum
		if t.bounds == nil {
			t.bounds = s.bounds
			t.cum = make([]uint64, len(s.cum))
		}
		for i := range s.cum {
			if i < len(t.cum) {
				t.cum[i] += s.cum[i]
			}
		}
	}
	return t
}

func (s histSeries) mean() (time.Duration, bool) {
	if s.count == 0 {
		return 0, false
	}
	return time.Duration(s.sum / float64(s.count) * float64(time.Second)), true
}

// quantile interpolates linearly inside the bucket holding the q-quantile, as
// Prometheus' histogram_quantile does.
func (s histSeries) quantile(q float64) (time.Duration, bool) {
	if s.count == 0 || len(s.bounds) == 0 {
		return 0, false
	}
	rank := q * float64(s.count)
	lower, below := 0.0, uint64(0)
	for i, ub := range s.bounds {
		if float64(s.cum[i]) >= rank {
			in := s.cum[i] - below
			frac := 1.0
			if in > 0 {
				frac = (rank - float64(below)) / float64(in)
			}
			return time.Duration((lower + (ub-lower)*frac) * float64(time.Second)), true
		}
		lower, below = ub, s.cum[i]
	}
	// Beyond the largest finite bucket: report its bound.
	return time.Duration(s.bounds[len(s.bounds)-1] * float64(time.Second)), true
}

// guardedPass is one series of interleaved guarded and unguarded patches.
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
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(widgetGVK)
	u.SetNamespace(ns)
	u.SetName(name)
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
	unguardedPatch := func(ctx context.Context, i int) error {
		// The same metadata the fenced client adds to the guarded patch.
		return cl.Patch(ctx, widget(ns, "unguarded"), client.RawPatch(types.MergePatchType,
			fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"%d"},"labels":{%q:%q}},"spec":{"writer":"u-%06d"}}`,
				unguardedAnnotation, tok, unguardedLabel, name, i)))
	}

	fmt.Fprintf(os.Stderr, "bench: guarded writes, lease read from the cache: %d + %d warm-up pairs\n", b.opts.guardedWrites, guardedWarmup)
	if res.cached, err = b.guardedPass(ctx, ws, b.opts.guardedWrites, guardedPatch, unguardedPatch); err != nil {
		return res, err
	}
	if b.opts.allowAllWrites > 0 {
		if err := b.installAllowAll(ctx, ws, ns, name, tok); err != nil {
			return res, err
		}
		allowAllPatch := func(ctx context.Context, i int) error {
			return cl.Patch(ctx, widget(ns, "allow-all"), client.RawPatch(types.MergePatchType,
				fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"%d"},"labels":{%q:%q}},"spec":{"writer":"a-%06d"}}`,
					unguardedAnnotation, tok, unguardedLabel, name, i)))
		}
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
	barrier := &policy.Barrier{Servers: policy.ServersFrom(b.admin, b.cfg), Prober: &policy.DryRunProber{}}
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
	o.RequiredKinds = []schema.GroupResource{{Group: widgetGVK.Group, Resource: "widgets"}}
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
	if err := b.admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: policy.TableName}, &cm); err != nil {
		return err
	}
	cm.Data = map[string]string{lease: cm.Data[lease]}
	return b.admin.Update(ctx, &cm)
}

// fillTable makes the namespace's tenure table hold policyTableLeases
// leases: the others' entries, each with a holder, a service-account user
// and a token.
func (b *bench) fillTable(ctx context.Context, ns string) error {
	var cm corev1.ConfigMap
	if err := b.admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: policy.TableName}, &cm); err != nil {
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
		Rule: admissionregistrationv1.Rule{APIGroups: []string{widgetGVK.Group}, APIVersions: []string{widgetGVK.Version},
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
	p.server = after.server.sub(before.server)[fencing.PathGuarded]
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

func msOK(d time.Duration, ok bool) string {
	if !ok {
		return "n/a"
	}
	return ms(d)
}

// fineMS prints sub-millisecond durations with two decimals.
func fineMS(d time.Duration, ok bool) string {
	if !ok {
		return "n/a"
	}
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

func signedMS(d time.Duration) string {
	if d >= 0 {
		return "+" + ms(d)
	}
	return ms(d)
}

// guardedConfigRows describe phase 4 in the configuration table.
func guardedConfigRows(o options) [][]string {
	live := "skipped (-live-writes 0)"
	if o.liveWrites > 0 {
		live = fmt.Sprintf("%d pairs, same Widgets, the handler's Leases reader switched to the API reader", o.liveWrites)
	}
	allowAll := "skipped (-allow-all-writes 0)"
	if o.allowAllWrites > 0 {
		allowAll = fmt.Sprintf("%d pairs: a Widget seen only by a webhook that allows everything (%s), interleaved with the unguarded Widget", o.allowAllWrites, allowAllPath)
	}
	policyPass := "skipped (-policy-writes 0)"
	if o.policyWrites > 0 {
		policyPass = fmt.Sprintf("%d pairs, same Widgets, last: the fencing webhook trimmed to /scale and evictions, the operator's policies applied and the lease's tenure table written (policy mode); then as many with %d leases' entries in the namespace's table, then as many with one again", o.policyWrites, o.policyTableLeases)
	}
	return [][]string{
		{"guarded writes", fmt.Sprintf("%d merge patches (spec.writer) to a guarded Widget, interleaved with %d to an unguarded Widget in the same namespace, one client, sequential, after %d warm-up pairs", o.guardedWrites, o.guardedWrites, guardedWarmup)},
		{"guarded writes: lease", fmt.Sprintf("FencedLease %s/%s, %d s, held by one fence.Elector; writes through its fenced client (Elector.Client)", guardedNamespace, guardedLease, guardedLeaseSecs)},
		{"guarded writes: webhooks", "config/webhook/manifests.yaml and fencing.yaml installed by envtest before this phase, served in this process (FencedLease validator + fencing handlers, Skew fencing.DefaultSkew)"},
		{"guarded writes: live-read pass", live},
		{"guarded writes: allow-all pass", allowAll},
		{"guarded writes: policy pass", policyPass},
	}
}

func (r *report) printGuarded(w io.Writer, b *bench) {
	g := r.guarded
	fmt.Fprintln(w, "## Guarded writes (fencing webhook)")
	fmt.Fprintln(w)

	passRows := func(prefix string, p guardedPass, targetNote string, maxRatio float64, maxP99 time.Duration) [][]string {
		gp50, ok1 := quantile(p.guarded, 0.5)
		up50, ok2 := quantile(p.unguarded, 0.5)
		gp99, ok3 := quantile(p.guarded, 0.99)
		up99, ok4 := quantile(p.unguarded, 0.99)
		gm, ok5 := mean(p.guarded)
		um, ok6 := mean(p.unguarded)
		ratioCell, ratioMet, p99Cell, p99Met, meanCell := "n/a", "n/a", "n/a", "n/a", "n/a"
		if ok1 && ok2 && up50 > 0 {
			r := float64(gp50) / float64(up50)
			ratioCell = fmt.Sprintf("%s (ratio %.2f)", signedMS(gp50-up50), r)
			ratioMet = yesNo(r <= maxRatio)
		}
		if ok3 && ok4 {
			p99Cell = signedMS(gp99 - up99)
			p99Met = yesNo(gp99-up99 < maxP99)
		}
		if ok5 && ok6 {
			meanCell = signedMS(gm - um)
		}
		target50, target99 := fmt.Sprintf("%sp50 ratio <= %.2f", targetNote, maxRatio), fmt.Sprintf("%sp99 overhead < %s", targetNote, ms(maxP99))
		if targetNote != "" {
			ratioMet, p99Met = "("+ratioMet+")", "("+p99Met+")"
		}
		diffs := pairDiffs(p)
		d50, _ := quantile(diffs, 0.5)
		d99, _ := quantile(diffs, 0.99)
		pairCell, pairMet := "n/a", ""
		if len(diffs) > 0 {
			pairCell = signedMS(d50) + " / " + signedMS(d99)
			pairMet = yesNo(d99 < maxP99)
			if targetNote != "" {
				pairMet = "(" + pairMet + ")"
			}
		}
		return [][]string{
			{prefix + "patch latency, p50", msOK(gp50, ok1), msOK(up50, ok2), ratioCell, target50, ratioMet},
			{prefix + "patch latency, p99", msOK(gp99, ok3), msOK(up99, ok4), p99Cell, target99, p99Met},
			{prefix + "patch latency, mean", msOK(gm, ok5), msOK(um, ok6), meanCell, "", ""},
			{prefix + "patch latency, max", q(p.guarded, 1), q(p.unguarded, 1), "", "", ""},
			{prefix + "per pair, guarded - unguarded, p50 / p99", "", "", pairCell, target99 + " (paired)", pairMet},
			{prefix + "samples (failed)", fmt.Sprintf("%d (%d)", len(p.guarded), p.failures), fmt.Sprint(len(p.unguarded)), "", "", ""},
		}
	}
	rows := [][]string{{"measure", "guarded Widget (webhook)", "unguarded Widget (no webhook)", "overhead", "target", "met"}}
	rows = append(rows, passRows("", g.cached, "", 1.25, 5*time.Millisecond)...)
	if b.opts.allowAllWrites > 0 {
		rows = append(rows, passRows("allow-all webhook: ", g.allowAll, "(any webhook) ", 1.25, 5*time.Millisecond)...)
	}
	if b.opts.liveWrites > 0 {
		rows = append(rows, passRows("live lease read (as shipped): ", g.live, "(hot-path target) ", 1.25, 5*time.Millisecond)...)
	}
	if b.opts.policyWrites > 0 {
		rows = append(rows, passRows("policy mode (no webhook), 1 lease in the table: ", g.policy, "", 1.05, time.Millisecond)...)
		rows = append(rows, passRows(fmt.Sprintf("policy mode (no webhook), %d leases in the table: ", b.opts.policyTableLeases), g.policyFull, "", 1.05, time.Millisecond)...)
		rows = append(rows, passRows("policy mode (no webhook), 1 lease in the table again: ", g.policyBack, "", 1.05, time.Millisecond)...)
	}
	table(w, rows)
	fmt.Fprintln(w)

	checkCol := func(p guardedPass) []string {
		t := p.checks.total()
		p50, ok50 := t.quantile(0.5)
		p99, ok99 := t.quantile(0.99)
		mn, okm := t.mean()
		sm, oks := p.server.mean()
		live := "none"
		if len(p.liveReads) > 0 {
			live = fmt.Sprintf("%s / %s", q(p.liveReads, 0.5), q(p.liveReads, 0.99))
		}
		return []string{
			fmt.Sprint(t.count),
			fmt.Sprint(p.checks["none"].count),
			fmt.Sprint(p.checks["api"].count),
			fmt.Sprint(p.cacheReads),
			fmt.Sprintf("%d (+%d fall-backs)", len(p.liveReads), p.fallbacks),
			fineMS(p50, ok50),
			fineMS(p99, ok99),
			fineMS(mn, okm),
			fmt.Sprintf("%s (%d requests)", fineMS(sm, oks), p.server.count),
			live,
		}
	}
	names := []string{
		"checks recorded during the measured writes",
		`... of which lease_read="none" (the object alone decided)`,
		`... of which lease_read="api"`,
		"lease reads served by the cache (counted by the bench)",
		"lease reads sent to the API server (counted by the bench; single flight)",
		"decision time, p50 (histogram, interpolated)",
		"decision time, p99 (histogram, interpolated)",
		"decision time, mean (sum / count)",
		"serving time of " + fencing.PathGuarded + ", mean (" + serverMetric + ")",
		"live lease read round trip, p50 / p99",
	}
	c1 := checkCol(g.cached)
	header := []string{"fencing webhook (" + checksMetric + ")", "lease from the cache (before: 966f728's hot path)"}
	var c2 []string
	if b.opts.liveWrites > 0 {
		header = append(header, "lease from the API server on every check (as shipped)")
		c2 = checkCol(g.live)
	}
	rows = [][]string{header}
	for i, n := range names {
		r := []string{n, c1[i]}
		if c2 != nil {
			r = append(r, c2[i])
		}
		rows = append(rows, r)
	}
	table(w, rows)
	fmt.Fprintln(w)
	holding := fmt.Sprintf("still leading with token %d at the end", g.tokenAfter)
	if !g.leading || g.tokenAfter != g.token {
		holding = fmt.Sprintf("NOT leading with the same token at the end (leading %v, token %d)", g.leading, g.tokenAfter)
	}
	fmt.Fprintf(w, "Guarded writes: lease %s/%s granted with token %d, %s.\n", guardedNamespace, guardedLease, g.token, holding)
	if b.opts.policyWrites > 0 {
		fmt.Fprintf(w, "Policy mode, what a grant adds (table write + propagation barrier, %d grants, one API server): p50 %s, p99 %s, max %s.\n",
			len(g.barrier), q(g.barrier, 0.5), q(g.barrier, 0.99), q(g.barrier, 1))
		if len(g.handoverPolicy) > 0 {
			fmt.Fprintf(w, "Hand-over after a voluntary release, same phase, one API server: webhook-mode controller p50 %s, p99 %s (%d); policy-mode controller (table + barrier + status) p50 %s, p99 %s (%d).\n",
				q(g.handoverWebhook, 0.5), q(g.handoverWebhook, 0.99), len(g.handoverWebhook), q(g.handoverPolicy, 0.5), q(g.handoverPolicy, 0.99), len(g.handoverPolicy))
		}
		fmt.Fprintf(w, "Policy mode: the tenure table %s/%s held %d leases' entries, %d bytes of data (a ConfigMap's data may hold 1 MiB).\n", guardedNamespace, policy.TableName, b.opts.policyTableLeases, b.policyTableBytes)
	}
	fmt.Fprintln(w, "Overhead = guarded - unguarded at the same quantile; ratio = guarded p50 / unguarded p50. Quantiles of the patch latencies are nearest-rank.")
	fmt.Fprintln(w, "Decision time is the handler's own time (kubefence_fencing_check_seconds), without TLS, HTTP and AdmissionReview decoding; its quantiles are interpolated in exponential buckets (x2 from 50 us).")
	if b.opts.allowAllWrites > 0 {
		gp50, ok1 := quantile(g.cached.guarded, 0.5)
		ap50, ok2 := quantile(g.allowAll.guarded, 0.5)
		up50, ok3 := quantile(g.allowAll.unguarded, 0.5)
		if ok1 && ok2 && ok3 {
			fmt.Fprintf(w, "The allow-all rows replace the guarded Widget with one that only a webhook admitting every write sees (same server, TLS, timeout and failure policy as the fencing webhook): the cost of calling any validating webhook, %s at p50. kubefence's own share of the guarded overhead is guarded - allow-all: %s at p50 (different passes, so only indicative).\n",
				signedMS(ap50-up50), signedMS(gp50-ap50))
		}
	}
	fmt.Fprintln(w, "Serving time adds controller-runtime's decoding of the AdmissionReview and encoding of the answer (its buckets grow x10, so only the mean is shown); the rest of the overhead is the API server's side: encoding the review, TLS over loopback, and waiting for a CPU.")
	if b.opts.liveWrites > 0 {
		fmt.Fprintln(w, `Both passes run the shipped handler (single-flight LeaseReader); the first gives it the manager's cache as its reader, which stands for the webhook before every decision read the lease live. The first row block is that "before", the live block is what ships.`)
	}
}
