package main

import (
	"math"
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Arithmetic on gathered Prometheus histograms: differences of two
// gatherings, totals, means and quantiles.

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
