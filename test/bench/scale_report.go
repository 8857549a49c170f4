package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }

func latRow(name string, ds []time.Duration) []string {
	return []string{name, strconv.Itoa(len(ds)), q(ds, 0.5), q(ds, 0.99), q(ds, 1)}
}

// byKind lists the non-zero write counts in category order.
func byKind(c writeCounts) string {
	var parts []string
	for _, k := range categoryOrder {
		if c[k] != 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, c[k]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

func (r *scaleReport) print(w io.Writer, o scaleOptions) {
	fmt.Fprintf(w, "\nkubefence scale benchmark: %d FencedLeases, H = %d held, L = %ds, webhooks installed; windows below\n", r.n, r.held, o.lease)
	fmt.Fprintf(w, "kube-apiserver %s (--max-requests-inflight %d, --max-mutating-requests-inflight %d), %d CPUs (%s), load average at start %s, run took %v\n",
		r.env.serverVersion, scaleMaxInflight, scaleMaxMutatingInflight, r.env.cpus, r.env.cpuModel, r.env.loadStart, r.elapsed.Round(time.Second))
	fmt.Fprintf(w, "operator = the bench process (controller + webhook managers + orchestration), %d concurrent reconciles; holders run in child processes; CPU and RSS from process_cpu_seconds_total and process_resident_memory_bytes\n\n",
		r.reconcilers)

	rows := [][]string{{"measure"}}
	for _, x := range r.windows {
		rows[0] = append(rows[0], x.name)
	}
	add := func(name string, f func(window) string) {
		row := []string{name}
		for _, x := range r.windows {
			row = append(row, f(x))
		}
		rows = append(rows, row)
	}
	secs := func(x window) float64 { return x.length.Seconds() }
	apiCPU := func(x window) time.Duration { return x.usage[partAPIServer].cpu + x.usage[partEtcd].cpu }
	add("held leases", func(x window) string { return strconv.Itoa(x.held) })
	add("window", func(x window) string { return x.length.String() })
	add("renewals (holders' successful writes)", func(x window) string { return strconv.FormatInt(x.holderRenewals, 10) })
	add("holder writes; controller writes", func(x window) string { return fmt.Sprintf("%d; %d", x.holderWrites, x.controllerByCat.total()) })
	add("writes per renewal, system-wide", func(x window) string {
		return ratio(int(x.holderWrites)+x.controllerByCat.total(), int(x.holderRenewals))
	})
	for _, k := range []string{partAPIServer, partEtcd, partOperator, partHolders} {
		add(k+" CPU s (cores)", func(x window) string {
			c := x.usage[k].cpu
			return fmt.Sprintf("%.1f (%.2f)", c.Seconds(), c.Seconds()/secs(x))
		})
	}
	add("kube-apiserver + etcd CPU ms per renewal", func(x window) string {
		if x.holderRenewals == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", float64(apiCPU(x).Milliseconds())/float64(x.holderRenewals))
	})
	// base: client-go at kubefence's renewal interval, the first client-go window.
	base := slices.IndexFunc(r.windows, func(x window) bool { return strings.HasPrefix(x.name, "client-go") })
	add("kube-apiserver + etcd CPU per renewal / client-go's at the same interval", func(x window) string {
		if base < 0 || x.holderRenewals == 0 || r.windows[base].holderRenewals == 0 {
			return "-"
		}
		per := func(x window) float64 { return apiCPU(x).Seconds() / float64(x.holderRenewals) }
		return fmt.Sprintf("%.2fx", per(x)/per(r.windows[base]))
	})
	add("operator CPU cores per 1,000 held", func(x window) string {
		return fmt.Sprintf("%.3f", x.usage[partOperator].cpu.Seconds()/secs(x)/float64(x.held)*1000)
	})
	for _, k := range []string{partAPIServer, partEtcd, partOperator} {
		add(k+" peak RSS", func(x window) string { return mib(x.usage[k].rss) })
	}
	table(w, rows)
	fmt.Fprintln(w)
	for _, x := range r.windows {
		if !strings.HasPrefix(x.name, "client-go") {
			fmt.Fprintf(w, "controller writes by kind, %s: %s\n", x.name, byKind(x.controllerByCat))
		}
	}

	fmt.Fprintln(w)
	table(w, [][]string{
		{"kubefence latency", "n", "p50", "p99", "max"},
		latRow("expiry lateness: expiry write sent - (last renewal's stamp + L + allowance)", r.lateness),
		latRow("takeover beyond L: new holder leads - (last renewal's stamp + L)", r.takeoverBeyond),
		latRow(fmt.Sprintf("mass fail-over of %d: kill -> each lease's new holder leads", o.mass), r.massFailover),
		latRow("  of which: kill -> expiry due (last renewal's stamp + L + allowance)", r.massDue),
		latRow("  expiry due -> grant write sent (controller lateness)", r.massLateness),
		latRow("  grant write sent -> returned", r.massGrantWrite),
		latRow("  grant returned -> new holder leads (watch, acknowledging renewal)", r.massAck),
	})
	fmt.Fprintf(w, "mass fail-over, kill to all granted (%v): controller writes in the %d leases' namespace: %s; the new holders' writes %d (refused %d)\n",
		r.massDuration.Round(time.Second), o.mass, byKind(r.massCtrl), r.massWaiterWrites, r.massWaiterFailed)
	fmt.Fprintf(w, "mass fail-over, the controller's own expiry lateness (kubefence_expiry_lateness_seconds: expiry on its clock -> decision, by bucket): %s\n", r.massLate)
	if r.massMissing > 0 {
		fmt.Fprintf(w, "mass fail-over: %d leases were not granted again within L + 60 s\n", r.massMissing)
	}

	fmt.Fprintf(w, "\ncontroller: %d FencedLeases created (all reconciled) in %v; waiters listed in status.waiting %v after they started\n", r.n, r.createTime.Round(time.Second), r.queueTime.Round(time.Second))
}
