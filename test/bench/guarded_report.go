package main

import (
	"fmt"
	"io"
	"time"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// Printing the guarded-writes phase.

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
		"serving time of " + coordv1alpha1.FencingGuardedPath + ", mean (" + serverMetric + ")",
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
		fmt.Fprintf(w, "Policy mode: the tenure table %s/%s held %d leases' entries, %d bytes of data (a ConfigMap's data may hold 1 MiB).\n", guardedNamespace, coordv1alpha1.TenureTableName, b.opts.policyTableLeases, b.policyTableBytes)
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
