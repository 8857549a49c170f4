package main

// Reading the servers' own metrics: kube-apiserver's and etcd's /metrics and
// this process's Prometheus registry.

import (
	"bufio"
	"bytes"
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
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

type families map[string]*dto.MetricFamily

// scrape reads the Prometheus metrics names of kube-apiserver (as the admin)
// or, with etcd set, of etcd (on its client URL). Only their lines are
// parsed: kube-apiserver's /metrics is megabytes, and parsing all of it every
// 10 s cost a tenth of the CPU counted as the operator's (this process's).
func (b *bench) scrape(ctx context.Context, etcd bool, names ...string) (families, error) {
	hc, url := http.DefaultClient, b.testEnv.ControlPlane.Etcd.URL.JoinPath("metrics").String()
	if !etcd {
		var err error
		if hc, err = rest.HTTPClientFor(b.cfg); err != nil {
			return nil, err
		}
		url = strings.TrimSuffix(b.cfg.Host, "/") + "/metrics"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	var kept bytes.Buffer
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		if line := sc.Bytes(); wanted(line, names) {
			kept.Write(line)
			kept.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(&kept)
}

// wanted tells whether a line of the text exposition format belongs to one of
// the families names: its HELP or TYPE comment, or a sample of it (a
// histogram's _bucket, _sum and _count included).
func wanted(line []byte, names []string) bool {
	s := string(line)
	if rest, ok := strings.CutPrefix(s, "# HELP "); ok {
		s = rest
	} else if rest, ok := strings.CutPrefix(s, "# TYPE "); ok {
		s = rest
	}
	metric, _, _ := strings.Cut(s, " ")
	metric, _, _ = strings.Cut(metric, "{")
	for _, n := range names {
		if metric == n || metric == n+"_bucket" || metric == n+"_sum" || metric == n+"_count" {
			return true
		}
	}
	return false
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
		f, err := b.scrape(ctx, etcd, "process_cpu_seconds_total", "process_resident_memory_bytes")
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

// lateHistogram is the controller's kubefence_expiry_lateness_seconds:
// cumulative counts by upper bound (seconds), and the total.
type lateHistogram struct {
	bounds []float64
	counts []uint64
	total  uint64
}

// controllerLateness reads the controller's expiry-lateness histogram from
// the registry the operator registers on (controller-runtime's).
func controllerLateness() lateHistogram {
	fams, err := gather(ctrlmetrics.Registry)
	if err != nil {
		return lateHistogram{}
	}
	m := fams["kubefence_expiry_lateness_seconds"].GetMetric()
	if len(m) == 0 {
		return lateHistogram{}
	}
	h := m[0].GetHistogram()
	out := lateHistogram{total: h.GetSampleCount()}
	for _, b := range h.GetBucket() {
		out.bounds = append(out.bounds, b.GetUpperBound())
		out.counts = append(out.counts, b.GetCumulativeCount())
	}
	return out
}

func (h lateHistogram) sub(o lateHistogram) lateHistogram {
	out := lateHistogram{bounds: h.bounds, total: h.total - o.total}
	for i, c := range h.counts {
		if i < len(o.counts) {
			c -= o.counts[i]
		}
		out.counts = append(out.counts, c)
	}
	return out
}

// String gives the count and, for p50 and p99, the bucket bound they fall
// under ("<= 64 ms"), or "-" without observations (a controller without the
// metric).
func (h lateHistogram) String() string {
	if h.total == 0 {
		return "-"
	}
	at := func(p float64) string {
		for i, c := range h.counts {
			if float64(c) >= p*float64(h.total) {
				return "<= " + ms(time.Duration(h.bounds[i]*float64(time.Second)))
			}
		}
		return "> " + ms(time.Duration(h.bounds[len(h.bounds)-1]*float64(time.Second)))
	}
	return fmt.Sprintf("%d expiries, p50 %s, p99 %s", h.total, at(0.5), at(0.99))
}
