package main

// Reading metrics: the servers' own (kube-apiserver's and etcd's /metrics,
// this process's Prometheus registries), and arithmetic on histograms.

import (
	"context"
	"fmt"
	"net/http"
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

// hist is a histogram's count and sum, by the value of one label.
type hist map[string]struct {
	count uint64
	sum   float64
}

// gatherHists reads the webhook's decision-time histogram, by lease_read,
// and controller-runtime's serving time, by webhook path, from
// controller-runtime's metrics registry.
func gatherHists() (checks, server hist, err error) {
	f, err := gather(crmetrics.Registry)
	of := func(name, label string) hist {
		out := hist{}
		for _, m := range f[name].GetMetric() {
			h := m.GetHistogram()
			out[labelOf(m, label)] = struct {
				count uint64
				sum   float64
			}{h.GetSampleCount(), h.GetSampleSum()}
		}
		return out
	}
	return of(checksMetric, "lease_read"), of(serverMetric, "webhook"), err
}

// sub is a - b, label by label.
func (a hist) sub(b hist) hist {
	out := hist{}
	for k, x := range a {
		x.count -= b[k].count
		x.sum -= b[k].sum
		out[k] = x
	}
	return out
}

// total is the count over every label, and the mean.
func (a hist) total() (n uint64, mean time.Duration, ok bool) {
	var sum float64
	for _, x := range a {
		n += x.count
		sum += x.sum
	}
	if n == 0 {
		return 0, 0, false
	}
	return n, time.Duration(sum / float64(n) * float64(time.Second)), true
}
