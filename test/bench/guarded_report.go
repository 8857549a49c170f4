package main

import (
	"fmt"
	"io"
	"time"

	"github.com/kubefence/kubefence/controllers/policy"
)

// Printing the guarded-writes phase.

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
		{"guarded writes: passes", fmt.Sprintf("fencing webhook as shipped (%d pairs); policy mode with 1, then %d leases in the tenure table (%d pairs each; 0: skipped)", o.guardedWrites, o.policyTableLeases, o.policyWrites)},
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

	holding := fmt.Sprintf("still leading with token %d at the end", g.tokenAfter)
	if !g.leading || g.tokenAfter != g.token {
		holding = fmt.Sprintf("NOT leading with the same token at the end (leading %v, token %d)", g.leading, g.tokenAfter)
	}
	fmt.Fprintf(w, "Lease %s/%s granted with token %d, %s.\n", guardedNamespace, guardedLease, g.token, holding)
	if b.opts.policyWrites > 0 {
		fmt.Fprintf(w, "The tenure table %s/%s held %d leases' entries, %d bytes of data (a ConfigMap's data may hold 1 MiB).\n", guardedNamespace, policy.TableName, b.opts.policyTableLeases, b.policyTableBytes)
	}
	fmt.Fprintln(w, "Overhead = guarded - unguarded at the same quantile; ratio = guarded p50 / unguarded p50; quantiles are nearest-rank.")
}
