package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/kubefence/kubefence/controllers/fencedlease"
)

// report is everything one run measured.
type report struct {
	env                    environment
	elapsed                time.Duration
	kfTakeover, cgTakeover takeoverResult
	kfHandover, cgHandover handoverResult
	leases                 bool           // phases 1 and 2 ran
	guarded                *guardedResult // phase 4, when it ran
}

// quantile is the nearest-rank q-quantile of ds (so with 20 samples p99 is the
// largest).
func quantile(ds []time.Duration, q float64) (time.Duration, bool) {
	if len(ds) == 0 {
		return 0, false
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	i = max(0, min(i, len(s)-1))
	return s[i], true
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

func q(ds []time.Duration, p float64) string {
	d, ok := quantile(ds, p)
	if !ok {
		return "n/a"
	}
	return ms(d)
}

func ratio(n, d int) string {
	if d == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f (%d/%d)", float64(n)/float64(d), n, d)
}

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "NO"
}

// table prints rows as an aligned markdown table; the first row is the header.
func table(w io.Writer, rows [][]string) {
	widths := make([]int, len(rows[0]))
	for _, r := range rows {
		for i, c := range r {
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	line := func(r []string) {
		var b strings.Builder
		b.WriteString("|")
		for i, c := range r {
			b.WriteString(" ")
			b.WriteString(c)
			b.WriteString(strings.Repeat(" ", widths[i]-len([]rune(c))))
			b.WriteString(" |")
		}
		fmt.Fprintln(w, b.String())
	}
	line(rows[0])
	sep := make([]string, len(widths))
	for i, n := range widths {
		sep[i] = strings.Repeat("-", n)
	}
	line(sep)
	for _, r := range rows[1:] {
		line(r)
	}
}

func (r *report) print(w io.Writer, b *bench) {
	o, l := b.opts, b.lease
	cgLease, cgRenew, cgRetry := clientGoTiming(l)
	fmt.Fprintln(w, "## Configuration")
	fmt.Fprintln(w)
	rows := [][]string{{"setting", "value"}}
	if r.leases {
		rows = append(rows, [][]string{
			{"kubefence", fmt.Sprintf("lease %v; holder: fence.Config defaults, renew every %v (L/3), local deadline %v after the last renewal's send; controller: expiry %v after it observes a renewal (L + drift allowance)",
				l, (l / 3).Round(time.Millisecond), l-l/10, l+fencedlease.DefaultTiming().Allowance(l))},
			{"client-go", fmt.Sprintf("LeaseLock; LeaseDuration %v, RenewDeadline %v, RetryPeriod %v, JitterFactor 1.2 (waiters retry every %v to %v), ReleaseOnCancel", cgLease, cgRenew, cgRetry, cgRetry, cgRetry+time.Duration(1.2*float64(cgRetry)))},
			{"iterations", fmt.Sprintf("takeover %d, hand-over %d per system; both systems side by side in each phase", o.takeovers, o.handovers)},
		}...)
	}
	if r.guarded != nil {
		rows = append(rows, guardedConfigRows(o)...)
	}
	rows = append(rows, [][]string{
		{"API server", fmt.Sprintf("kube-apiserver %s + etcd (envtest, local), controller and all clients in this process", r.env.serverVersion)},
		{"machine", fmt.Sprintf("%s/%s, %d CPUs, %s, %s; run time %v; load average at start %s, at end %s", runtime.GOOS, runtime.GOARCH, r.env.cpus, r.env.cpuModel, runtime.Version(),
			r.elapsed.Round(time.Second), r.env.loadStart, loadAverage())},
	}...)
	table(w, rows)
	fmt.Fprintln(w)
	if r.leases {
		r.printLeases(w, b)
		fmt.Fprintln(w)
	}
	if r.guarded != nil {
		r.printGuarded(w, b)
	}
}

// printLeases prints the results of phases 1 and 2.
func (r *report) printLeases(w io.Writer, b *bench) {
	kt, ct, kh, ch := r.kfTakeover, r.cgTakeover, r.kfHandover, r.cgHandover
	beyondMet := func(p float64) string {
		k, ok1 := quantile(kt.beyond, p)
		c, ok2 := quantile(ct.beyond, p)
		if !ok1 || !ok2 || c <= 0 {
			return "n/a"
		}
		return fmt.Sprintf("%s (%.3f)", yesNo(float64(k) <= float64(c)/10), float64(k)/float64(c))
	}
	minGap := func(ds []time.Duration) string {
		d, ok := quantile(ds, 0)
		if ok && d < 0 {
			return ms(d) + " (overlap)"
		}
		return q(ds, 0)
	}
	hoP99, hoOK := quantile(kh.latency, 0.99)
	fmt.Fprintln(w, "## Results")
	fmt.Fprintln(w)
	table(w, [][]string{
		{"measure", "kubefence", "client-go", "target for kubefence", "met (kubefence/client-go)"},
		{"takeover: time beyond lease, p50", q(kt.beyond, 0.5), q(ct.beyond, 0.5), "<= 1/10 of client-go", beyondMet(0.5)},
		{"takeover: time beyond lease, p99", q(kt.beyond, 0.99), q(ct.beyond, 0.99), "<= 1/10 of client-go", beyondMet(0.99)},
		{"takeover: old holder stopped -> new started, min", minGap(kt.gap), minGap(ct.gap), "> 0 (never two leaders)", yesNo(len(kt.gap) > 0 && slices.Min(kt.gap) > 0)},
		{"takeover: samples (failed)", fmt.Sprintf("%d (%d)", len(kt.beyond), kt.failures), fmt.Sprintf("%d (%d)", len(ct.beyond), ct.failures), "", ""},
		{"hand-over latency, p50", q(kh.latency, 0.5), q(ch.latency, 0.5), "", ""},
		{"hand-over latency, p99", q(kh.latency, 0.99), q(ch.latency, 0.99), "<= 100 ms", yesNo(hoOK && hoP99 <= 100*time.Millisecond)},
		{"hand-over: samples (failed)", fmt.Sprintf("%d (%d)", len(kh.latency), kh.failures), fmt.Sprintf("%d (%d)", len(ch.latency), ch.failures), "", ""},
	})
	fmt.Fprintln(w)

	fmt.Fprintln(w, "Time beyond lease = new holder's OnStartedLeading - send time of the old holder's last successful renewal - lease duration. Quantiles are nearest-rank: with 20 samples p99 is the largest.")
}

// loadAverage is the first three fields of /proc/loadavg, if there is one.
func loadAverage() string {
	b, _ := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

// cpuInfo returns the number of CPUs and, on Linux, the CPU model.
func cpuInfo() (int, string) {
	b, _ := os.ReadFile("/proc/cpuinfo")
	_, after, ok := strings.Cut(string(b), "model name")
	_, model, _ := strings.Cut(after, ":")
	model, _, _ = strings.Cut(model, "\n")
	if !ok {
		model = "unknown CPU model"
	}
	return runtime.NumCPU(), strings.TrimSpace(model)
}
