package main

// Reading metrics: the servers' own (kube-apiserver's and etcd's /metrics,
// this process's Prometheus registries), and arithmetic on histograms.

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

type families map[string]*dto.MetricFamily

// get fetches path from the envtest kube-apiserver (as the admin) or, with
// etcd set, from etcd's client URL.
func (b *bench) get(ctx context.Context, path string, etcd bool) (*http.Response, error) {
	hc, base := http.DefaultClient, strings.TrimSuffix(b.cfg.Host, "/")
	if etcd {
		base = strings.TrimSuffix(b.testEnv.ControlPlane.Etcd.URL.String(), "/")
	} else if c, err := rest.HTTPClientFor(b.cfg); err != nil {
		return nil, err
	} else {
		hc = c
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err == nil && resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return resp, err
}

// scrape reads the Prometheus metrics of kube-apiserver or etcd.
func (b *bench) scrape(ctx context.Context, etcd bool) (families, error) {
	resp, err := b.get(ctx, "/metrics", etcd)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// gather reads one of this process's registries.
func gather(g prometheus.Gatherer) (families, error) {
	fams, err := g.Gather()
	out := families{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out, err
}

// value is the first sample of a counter or gauge (0 if absent).
func (f families) value(name string) float64 {
	m := f[name].GetMetric()
	if len(m) == 0 {
		return 0
	}
	if c := m[0].GetCounter(); c != nil {
		return c.GetValue()
	}
	return m[0].GetGauge().GetValue()
}

// usage is CPU time and resident memory.
type usage struct {
	cpu time.Duration
	rss int64
}

// Parts whose usage the scale benchmark reports.
const (
	partAPIServer = "kube-apiserver"
	partEtcd      = "etcd"
	partOperator  = "operator (bench process)"
	partHolders   = "holder processes"
)

// usages reads process_cpu_seconds_total and process_resident_memory_bytes
// of kube-apiserver and etcd (their /metrics) and of this process (the
// operator, from the default Prometheus registry's process collector), and
// the CPU the holder processes procs last reported.
func (b *bench) usages(ctx context.Context, procs []*scaleProc) (map[string]usage, error) {
	out := map[string]usage{}
	of := func(f families) usage {
		return usage{cpu: time.Duration(f.value("process_cpu_seconds_total") * float64(time.Second)), rss: int64(f.value("process_resident_memory_bytes"))}
	}
	for part, etcd := range map[string]bool{partAPIServer: false, partEtcd: true} {
		f, err := b.scrape(ctx, etcd)
		if err != nil {
			return nil, fmt.Errorf("%s metrics: %w", part, err)
		}
		out[part] = of(f)
	}
	f, err := gather(prometheus.DefaultGatherer)
	if err != nil {
		return nil, err
	}
	out[partOperator] = of(f)
	var holders usage
	for _, p := range procs {
		holders.cpu += p.snapshot().cpu
	}
	out[partHolders] = holders
	return out, nil
}

// apfLevel is what API Priority and Fairness did for one priority level:
// requests executed, their summed queue wait (seconds), requests rejected.
type apfLevel struct{ executed, wait, rejected float64 }

// apfMetrics reads kube-apiserver's flow-control metrics, per priority level.
func (b *bench) apfMetrics(ctx context.Context) (map[string]apfLevel, error) {
	f, err := b.scrape(ctx, false)
	if err != nil {
		return nil, err
	}
	out := map[string]apfLevel{}
	for _, m := range f["apiserver_flowcontrol_request_wait_duration_seconds"].GetMetric() {
		if labelOf(m, "execute") == "true" {
			l := out[labelOf(m, "priority_level")]
			l.executed += float64(m.GetHistogram().GetSampleCount())
			l.wait += m.GetHistogram().GetSampleSum()
			out[labelOf(m, "priority_level")] = l
		}
	}
	for _, m := range f["apiserver_flowcontrol_rejected_requests_total"].GetMetric() {
		// (cancelled: the client went away, e.g. a killed holder)
		if labelOf(m, "reason") != "cancelled" {
			l := out[labelOf(m, "priority_level")]
			l.rejected += m.GetCounter().GetValue()
			out[labelOf(m, "priority_level")] = l
		}
	}
	return out, nil
}

func labelOf(m *dto.Metric, name string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

func apfSub(a, b map[string]apfLevel) map[string]apfLevel {
	out := map[string]apfLevel{}
	for k, x := range a {
		y := b[k]
		out[k] = apfLevel{executed: x.executed - y.executed, wait: x.wait - y.wait, rejected: x.rejected - y.rejected}
	}
	return out
}

func (l apfLevel) String() string {
	if l.executed == 0 && l.rejected == 0 {
		return "-"
	}
	mean := "-"
	if l.executed > 0 {
		mean = ms(time.Duration(l.wait / l.executed * float64(time.Second)))
	}
	return fmt.Sprintf("%.0f, wait %s, %.0f rejected", l.executed, mean, l.rejected)
}

// apiserverProfile writes a CPU profile of kube-apiserver over d to file.
func (b *bench) apiserverProfile(ctx context.Context, file string, d time.Duration) error {
	resp, err := b.get(ctx, fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(d.Seconds())), false)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
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
	f, err := gather(crmetrics.Registry)
	out := histSnap{}
	for _, m := range f[name].GetMetric() {
		out[labelOf(m, label)] = seriesOf(m.GetHistogram())
	}
	return out, err
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
