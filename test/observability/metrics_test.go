package observability_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	sigsyaml "sigs.k8s.io/yaml"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/hack/devenv"
	"github.com/kubefence/kubefence/pkg/fence"
	"github.com/kubefence/kubefence/test/testenv"
)

const root = "../.."

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type elector struct {
	el   *fence.Elector
	stop func()
}

func startElector(t *testing.T, ns, lease, identity string, m *fence.Metrics) elector {
	t.Helper()
	el, err := fence.New(fence.Config{
		Client: k8sClient, Namespace: ns, Name: lease, Identity: identity, User: cluster.AdminUser,
		RenewInterval: 300 * time.Millisecond, Metrics: m, DisableReleaseOnCancel: lease == "crash",
		Callbacks: fence.Callbacks{OnStartedLeading: func(ctx context.Context, _ int64) { <-ctx.Done() }},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(suiteCtx)
	done := make(chan struct{})
	go func() { defer close(done); _ = el.Run(ctx) }()
	e := elector{el: el, stop: func() { cancel(); <-done }}
	t.Cleanup(e.stop)
	return e
}

func leading(t *testing.T, e elector) int64 {
	t.Helper()
	var tok int64
	eventually(t, e.el.Identity()+" leads", func() bool { n, ok := e.el.Token(); tok = n; return ok })
	return tok
}

func widget(ns, name string) *unstructured.Unstructured {
	u := testenv.Widget(ns, name)
	_ = unstructured.SetNestedField(u.Object, "init", "spec", "writer")
	return u
}

// newLease creates FencedLease ns/name of the given duration.
func newLease(t *testing.T, ns, name string, seconds int32) {
	t.Helper()
	if err := k8sClient.Create(suiteCtx, &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: seconds}}); err != nil {
		t.Fatal(err)
	}
}

// waiting waits until the second candidate, who, queued on ns/lease.
func waiting(t *testing.T, ns, lease, who string) {
	t.Helper()
	eventually(t, who+" waits", func() bool {
		l := &coordv1alpha1.FencedLease{}
		return k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: lease}, l) == nil && len(l.Spec.Requests) == 2
	})
}

// driveTraffic grants a lease, renews it, hands it over, and has the old
// holder's token refused as stale n times through the real webhooks; lets
// the holder of another lease crash, so that its lease expires and is taken
// over; and has a FencedLease write refused.
func driveTraffic(t *testing.T, clientMetrics *fence.Metrics, n int) (ns string) {
	t.Helper()
	ns = "observe"
	if err := k8sClient.Create(suiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	newLease(t, ns, "job", 5)
	alice := startElector(t, ns, "job", "alice", clientMetrics)
	na := leading(t, alice)
	if err := alice.el.Client(k8sClient).Create(suiteCtx, widget(ns, "w")); err != nil {
		t.Fatal(err)
	}
	// A few renewals (every 300 ms).
	time.Sleep(time.Second)

	bob := startElector(t, ns, "job", "bob", nil)
	waiting(t, ns, "job", "bob")
	if err := alice.el.Release(suiteCtx); err != nil {
		t.Fatal(err)
	}
	nb := leading(t, bob)
	if nb <= na {
		t.Fatalf("bob's token %d is not above alice's %d", nb, na)
	}
	fb := bob.el.Client(k8sClient)
	w := widget(ns, "w")
	if err := k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(w), w); err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(w.Object, "bob", "spec", "writer")
	if err := fb.Update(suiteCtx, w); err != nil {
		t.Fatal(err)
	}

	// A holder that crashes (no release): its 1 s lease expires and the
	// waiting candidate takes over.
	newLease(t, ns, "crash", 1)
	carol := startElector(t, ns, "crash", "carol", nil)
	nc := leading(t, carol)
	dave := startElector(t, ns, "crash", "dave", nil)
	waiting(t, ns, "crash", "dave")
	carol.stop()
	if nd := leading(t, dave); nd <= nc {
		t.Fatalf("dave's token %d after the takeover is not above carol's %d", nd, nc)
	}

	// Someone who is not the controller writes a lease's status: refused.
	mallory, err := cluster.Env.AddUser(envtest.User{Name: "mallory", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	mc, err := client.New(mallory.Config(), client.Options{Scheme: cluster.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	// The holder renews meanwhile: retry on a conflict until the webhook judges it.
	for attempt := 0; ; attempt++ {
		l := &coordv1alpha1.FencedLease{}
		if err := k8sClient.Get(suiteCtx, client.ObjectKey{Namespace: ns, Name: "job"}, l); err != nil {
			t.Fatal(err)
		}
		l.Status.HolderIdentity = "mallory"
		err := mc.Status().Update(suiteCtx, l)
		if err == nil {
			t.Fatal("a status write by someone who is not the controller was accepted")
		}
		if apierrors.IsForbidden(err) {
			break
		}
		if !apierrors.IsConflict(err) || attempt > 20 {
			t.Fatalf("a status write by someone who is not the controller: %v, want refused by the webhook", err)
		}
	}

	stale := fence.NewFencedClient(k8sClient, "job", devenv.FixedToken(na), fence.ClientConfig{Metrics: clientMetrics})
	for i := range n {
		if err := k8sClient.Get(suiteCtx, client.ObjectKeyFromObject(w), w); err != nil {
			t.Fatal(err)
		}
		_ = unstructured.SetNestedField(w.Object, fmt.Sprintf("alice-%d", i), "spec", "writer")
		if err := stale.Update(suiteCtx, w); !fence.IsStale(err) {
			t.Fatalf("alice's write with token %d after bob's %d: %v, want a stale refusal", na, nb, err)
		}
	}
	return ns
}

// names adds the names PromQL can use for the families: a histogram's
// _bucket, _sum and _count, a summary's _sum and _count.
func names(into map[string]string, source string, families []*dto.MetricFamily) {
	for _, f := range families {
		n := f.GetName()
		into[n] = source
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				into[n+s] = source
			}
		case dto.MetricType_SUMMARY:
			for _, s := range []string{"_sum", "_count"} {
				into[n+s] = source
			}
		}
	}
}

// scrapeAPIServer reads kube-apiserver's /metrics as the admin.
func scrapeAPIServer(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(suiteCtx)
	if err != nil {
		t.Fatalf("GET /metrics of kube-apiserver: %v", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("parsing kube-apiserver's /metrics: %v", err)
	}
	return fams
}

func values(fams map[string]*dto.MetricFamily) []*dto.MetricFamily {
	var out []*dto.MetricFamily
	for _, f := range fams {
		out = append(out, f)
	}
	return out
}

// sample returns the value of the series of family f whose labels include
// want (a counter's or gauge's value, a histogram's count), summed.
func sample(fams []*dto.MetricFamily, f string, want map[string]string) (float64, bool) {
	var sum float64
	found := false
	for _, fam := range fams {
		if fam.GetName() != f {
			continue
		}
	series:
		for _, m := range fam.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue series
				}
			}
			found = true
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			case m.Histogram != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum, found
}

var (
	quoted     = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	matchers   = regexp.MustCompile(`\{[^}]*\}`)
	ranges     = regexp.MustCompile(`\[[^\]]*\]`)
	grouping   = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	variables  = regexp.MustCompile(`\$\{?\w+\}?`)
	identifier = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	keywords   = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
		"bool": true, "and": true, "or": true, "unless": true, "offset": true, "inf": true, "nan": true, "Inf": true, "NaN": true}
)

// metricNames returns the metric names a PromQL expression uses: identifiers
// outside strings, label matchers, ranges and grouping clauses that are not
// functions (followed by "("), keywords, numbers or Grafana variables.
func metricNames(expr string) []string {
	e := quoted.ReplaceAllString(expr, " ")
	e = matchers.ReplaceAllString(e, " ")
	e = ranges.ReplaceAllString(e, " ")
	e = grouping.ReplaceAllString(e, " ")
	e = variables.ReplaceAllString(e, " ")
	var out []string
	for _, loc := range identifier.FindAllStringIndex(e, -1) {
		name := e[loc[0]:loc[1]]
		if keywords[name] {
			continue
		}
		if loc[0] > 0 && (e[loc[0]-1] >= '0' && e[loc[0]-1] <= '9' || e[loc[0]-1] == '.') {
			continue // a number's exponent or unit (1e3, 5m)
		}
		if rest := strings.TrimLeft(e[loc[1]:], " \t\n"); strings.HasPrefix(rest, "(") {
			continue // a function or an aggregation
		}
		out = append(out, name)
	}
	return out
}

type rule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	Annotations map[string]string `json:"annotations"`
}

func alertRules(t *testing.T) []rule {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "config", "prometheus", "prometheus_rule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var pr struct {
		Spec struct {
			Groups []struct {
				Rules []rule `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := sigsyaml.Unmarshal(data, &pr); err != nil {
		t.Fatal(err)
	}
	var out []rule
	for _, g := range pr.Spec.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

type panel struct {
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// dashboardQueries returns the queries of every panel (rows included) and
// of the template variables, by where they are.
func dashboardQueries(t *testing.T) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "config", "prometheus", "grafana_dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("grafana_dashboard.json: %v", err)
	}
	out := map[string][]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out["panel "+p.Title] = append(out["panel "+p.Title], tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		q := ""
		switch x := v.Query.(type) {
		case string:
			q = x
		case map[string]any:
			q, _ = x["query"].(string)
		}
		if strings.Contains(q, "(") { // label_values(metric, label)
			q = q[strings.Index(q, "(")+1:]
			q = strings.SplitN(q, ",", 2)[0]
			out["variable "+v.Name] = append(out["variable "+v.Name], q)
		}
	}
	return out
}

// anchors are the GitHub anchors of the headings of a Markdown file.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	inCode := false
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		out[strings.ReplaceAll(drop.ReplaceAllString(h, ""), " ", "-")] = true
	}
	return out
}

func TestMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`sum by (lease_namespace, lease) (rate(kubefence_stale_writes_rejected_total{lease!=""}[5m])) > 0`:                                                                              {"kubefence_stale_writes_rejected_total"},
		`histogram_quantile(0.99, sum by (le, name) (rate(apiserver_admission_webhook_admission_duration_seconds_bucket{name=~".*fencing\\.kubefence\\.io"}[$__rate_interval]))) > 1e3`: {"apiserver_admission_webhook_admission_duration_seconds_bucket"},
		`(kubefence_webhook_certificate_expiry_timestamp_seconds > 0) - time() < 7 * 86400`:                                                                                             {"kubefence_webhook_certificate_expiry_timestamp_seconds"},
		`max(leader_election_master_status{name="x"}) or on() vector(0)`:                                                                                                                {"leader_election_master_status"},
		`a / ignoring(reason) group_left b unless c offset 5m`:                                                                                                                          {"a", "b", "c"},
	} {
		got := metricNames(expr)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("metricNames(%q) = %v, want %v", expr, got, want)
		}
	}
}

// TestAlertsAndDashboardUseRealMetrics drives traffic through the real
// webhooks and checks that every metric each alert and each dashboard panel
// uses is served by kube-apiserver, the operator or pkg/fence's client
// metrics; and that every alert links to a runbook in docs/operations.md.
func TestAlertsAndDashboardUseRealMetrics(t *testing.T) {
	testenv.SkipIfShort(t)
	clientReg := prometheus.NewRegistry()
	clientMetrics, err := fence.NewMetrics(clientReg)
	if err != nil {
		t.Fatal(err)
	}
	const staleWrites = 3
	ns := driveTraffic(t, clientMetrics, staleWrites)

	// controller-runtime's leader election reports this replica as leader.
	var operator []*dto.MetricFamily
	eventually(t, "leader_election_master_status says the manager leads", func() bool {
		operator, err = crmetrics.Registry.Gather()
		v, ok := sample(operator, "leader_election_master_status", map[string]string{"name": coordv1alpha1.LeaderElectionID})
		return err == nil && ok && v == 1
	})
	clientFams, err := clientReg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	apiserver := scrapeAPIServer(t)

	// The traffic is in the metrics.
	for _, c := range []struct {
		fams   []*dto.MetricFamily
		name   string
		labels map[string]string
		min    float64
	}{
		{operator, "kubefence_stale_writes_rejected_total", map[string]string{"lease_namespace": ns, "lease": "job", "operation": "UPDATE"}, staleWrites},
		{operator, "kubefence_lease_acquisitions_total", map[string]string{"lease_namespace": ns, "lease": "job"}, 2},
		{operator, "kubefence_lease_renewals_total", map[string]string{"lease_namespace": ns, "lease": "job"}, 2},
		{operator, "kubefence_lease_expiries_total", map[string]string{"lease_namespace": ns, "lease": "crash"}, 1},
		{operator, "kubefence_lease_takeovers_total", map[string]string{"lease_namespace": ns, "lease": "crash"}, 1},
		{operator, "kubefence_lease_writes_refused_total", map[string]string{"reason": "status"}, 1},
		{clientFams, "kubefence_client_stale_refusals_total", map[string]string{"lease_namespace": ns, "lease": "job"}, staleWrites},
		{clientFams, "kubefence_client_renewal_duration_seconds", map[string]string{"lease_namespace": ns, "lease": "job", "result": fence.RenewalOK}, 2},
		{clientFams, "kubefence_client_fencing_token", map[string]string{"lease_namespace": ns, "lease": "job"}, 1},
		{clientFams, "kubefence_client_write_duration_seconds", map[string]string{"lease_namespace": ns, "lease": "job", "result": fence.WriteOK}, 1},
		{values(apiserver), "apiserver_admission_webhook_rejection_count", map[string]string{"name": "guarded.fencing.kubefence.io", "error_type": "no_error"}, staleWrites},
		{values(apiserver), "apiserver_admission_webhook_admission_duration_seconds", map[string]string{"name": "guarded.fencing.kubefence.io"}, staleWrites},
	} {
		if v, ok := sample(c.fams, c.name, c.labels); !ok || v < c.min {
			t.Errorf("%s%v = %v (found %v), want at least %v", c.name, c.labels, v, ok, c.min)
		}
	}
	if v, _ := sample(clientFams, "kubefence_client_leading", map[string]string{"lease_namespace": ns, "lease": "job"}); v != 0 {
		t.Errorf("kubefence_client_leading of alice, who released, is %v, want 0", v)
	}

	served := map[string]string{}
	names(served, "kube-apiserver /metrics", values(apiserver))
	names(served, "operator (controller-runtime metrics.Registry)", operator)
	names(served, "pkg/fence client metrics", clientFams)

	check := func(where, expr string) int {
		used := metricNames(expr)
		if len(used) == 0 {
			t.Errorf("%s: no metric found in %q", where, expr)
		}
		for _, n := range used {
			if _, ok := served[n]; ok {
				continue
			}
			t.Errorf("%s uses %s, which nothing serves", where, n)
		}
		return len(used)
	}

	ops := anchors(t, filepath.Join(root, "docs", "operations.md"))
	rules := alertRules(t)
	if len(rules) < 6 {
		t.Fatalf("prometheus_rule.yaml has %d alerts, want at least 6", len(rules))
	}
	used := 0
	for _, r := range rules {
		used += check("alert "+r.Alert, r.Expr)
		url := r.Annotations["runbook_url"]
		_, anchor, ok := strings.Cut(url, "docs/operations.md#")
		switch {
		case !ok:
			t.Errorf("alert %s: runbook_url %q does not point at a section of docs/operations.md", r.Alert, url)
		case !ops[anchor]:
			t.Errorf("alert %s: runbook_url %q: docs/operations.md has no heading with anchor %q", r.Alert, url, anchor)
		}
	}
	queries := dashboardQueries(t)
	if len(queries) < 10 {
		t.Fatalf("the dashboard has %d panels and variables with queries, want at least 10", len(queries))
	}
	var where []string
	for w := range queries {
		where = append(where, w)
	}
	sort.Strings(where)
	for _, w := range where {
		for _, q := range queries[w] {
			used += check("dashboard "+w, q)
		}
	}
	t.Logf("%d metric uses checked in %d alerts and %d dashboard queries", used, len(rules), len(queries))
}
