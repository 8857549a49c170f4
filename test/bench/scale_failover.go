package main

// The fail-over variants of the scale benchmark (-scale-failover-variants):
// in one invocation, the 500-lease mass fail-over of the scale run under
// several API Priority and Fairness settings side by side, each on leases
// of its own. The steady-state, load and client-go phases and the epoch
// store are skipped, and only the held leases exist (no unheld ones: they
// cost the fail-over no API traffic, only informer memory). The operator
// (controller and webhooks) runs as the service account config/flowcontrol's
// `operator` FlowSchema names, so that its grants pass through flow control
// as the deployed operator's do (the scale run's operator is the envtest
// admin, exempt). Variants at another API server concurrency than the
// bench's run on a control plane of their own. See docs/benchmarks.md.

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/test/testenv"
)

// scaleOperatorUser is the operator's identity in the fail-over variants:
// the service account config/flowcontrol's `operator` FlowSchema matches.
const scaleOperatorUser = "system:serviceaccount:" + operatorNamespace + ":kubefence-controller-manager"

// scaleWaiterUser is the identities (%d: one per process) of the mass
// group's waiter processes in the fail-over variants.
const scaleWaiterUser = "system:serviceaccount:bench:waiter-%d"

// foVariant is one API Priority and Fairness setting of the fail-over.
type foVariant struct {
	spec string
	// seats are kube-apiserver's --max-requests-inflight and
	// --max-mutating-requests-inflight (0: its defaults, 400 and 200).
	seats [2]int
	// none: without config/flowcontrol's FlowSchemas and priority level.
	none bool
	// byUser: the renewals FlowSchema tells flows apart by user.
	byUser bool
	// The priority level's fields; nil: as shipped.
	shares, lendable, borrowing, queues, handSize, queueLength *int32
}

// parseFailoverVariants reads -scale-failover-variants: variants separated
// by commas, each a "+"-joined list of modifiers (see the flag's help).
func parseFailoverVariants(spec string, seats [2]int) ([]foVariant, error) {
	var out []foVariant
	for _, vs := range strings.Split(spec, ",") {
		vs = strings.TrimSpace(vs)
		if vs == "" {
			return nil, fmt.Errorf("-scale-failover-variants %q: an empty variant", spec)
		}
		v := foVariant{spec: vs, seats: seats}
		var tuned bool
		for _, m := range strings.Split(vs, "+") {
			key, val, hasVal := strings.Cut(m, "=")
			field := map[string]**int32{"shares": &v.shares, "lendable": &v.lendable, "borrowing": &v.borrowing,
				"queues": &v.queues, "hand-size": &v.handSize, "queue-length": &v.queueLength}[key]
			switch {
			case key == "shipped" && !hasVal:
			case key == "default-seats" && !hasVal:
				v.seats = [2]int{}
			case key == "seats" && hasVal:
				a, b, ok := strings.Cut(val, "/")
				x, err1 := strconv.Atoi(a)
				y, err2 := strconv.Atoi(b)
				if !ok || err1 != nil || err2 != nil || x < 1 || y < 1 {
					return nil, fmt.Errorf("-scale-failover-variants: %q: seats=M/N takes two positive integers (--max-requests-inflight/--max-mutating-requests-inflight)", m)
				}
				v.seats = [2]int{x, y}
			case key == "none" && !hasVal:
				v.none = true
			case key == "by-user" && !hasVal:
				v.byUser, tuned = true, true
			case field != nil && hasVal:
				n, err := strconv.ParseInt(val, 10, 32)
				if err != nil || n < 0 {
					return nil, fmt.Errorf("-scale-failover-variants: %q: %s takes a non-negative integer", m, key)
				}
				*field, tuned = ptr.To(int32(n)), true
			default:
				return nil, fmt.Errorf("-scale-failover-variants: %q is not a modifier: expected shipped, default-seats, seats=M/N, none, by-user, shares=N, lendable=N, borrowing=N, queues=N, hand-size=N or queue-length=N", m)
			}
		}
		if v.none && tuned {
			return nil, fmt.Errorf("-scale-failover-variants: %q: none removes the FlowSchemas and priority level; it takes no setting of theirs", vs)
		}
		out = append(out, v)
	}
	return out, nil
}

// objects returns config/flowcontrol's objects as the variant sets them.
func (v foVariant) objects() ([]client.Object, error) {
	objs, err := flowControlObjects()
	if err != nil {
		return nil, err
	}
	for _, obj := range objs {
		switch o := obj.(type) {
		case *flowcontrolv1.PriorityLevelConfiguration:
			l := o.Spec.Limited
			if l == nil || l.LimitResponse.Queuing == nil {
				return nil, fmt.Errorf("config/flowcontrol: priority level %s is not Limited with queuing", o.Name)
			}
			if v.shares != nil {
				l.NominalConcurrencyShares = ptr.To(*v.shares)
			}
			if v.lendable != nil {
				l.LendablePercent = ptr.To(*v.lendable)
			}
			if v.borrowing != nil {
				l.BorrowingLimitPercent = ptr.To(*v.borrowing)
			}
			q := l.LimitResponse.Queuing
			for _, f := range []struct {
				to   *int32
				from *int32
			}{{&q.Queues, v.queues}, {&q.HandSize, v.handSize}, {&q.QueueLengthLimit, v.queueLength}} {
				if f.from != nil {
					*f.to = *f.from
				}
			}
		case *flowcontrolv1.FlowSchema:
			if v.byUser && o.Name == "renewals" {
				o.Spec.DistinguisherMethod = &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType}
			}
		}
	}
	return objs, nil
}

// describe says what the variant's priority level and renewals FlowSchema
// are.
func (v foVariant) describe() string {
	if v.none {
		return "no kubefence FlowSchemas (renewals and operator in workload-low)"
	}
	objs, err := v.objects()
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, obj := range objs {
		switch o := obj.(type) {
		case *flowcontrolv1.PriorityLevelConfiguration:
			l := o.Spec.Limited
			q := l.LimitResponse.Queuing
			borrow := "unlimited"
			if l.BorrowingLimitPercent != nil {
				borrow = fmt.Sprintf("%d%%", *l.BorrowingLimitPercent)
			}
			parts = append(parts, fmt.Sprintf("shares %d, lendable %d%%, borrowing %s, %d queues x hand %d x length %d",
				ptr.Deref(l.NominalConcurrencyShares, 0), ptr.Deref(l.LendablePercent, 0), borrow, q.Queues, q.HandSize, q.QueueLengthLimit))
		case *flowcontrolv1.FlowSchema:
			if o.Name == "renewals" && o.Spec.DistinguisherMethod != nil {
				parts = append(parts, "renewals "+string(o.Spec.DistinguisherMethod.Type))
			}
		}
	}
	return strings.Join(parts, "; ")
}

func seatsString(s [2]int) string {
	if s == [2]int{} {
		return "400 + 200 (defaults)"
	}
	return fmt.Sprintf("%d + %d", s[0], s[1])
}

// foResult is one variant's measurement.
type foResult struct {
	v         foVariant
	load      string // the 1-minute load average when its holders were killed
	grant     []time.Duration
	queueTime time.Duration
	failover
}

// scaleFailovers runs the fail-over variants (b's control plane runs at the
// bench's seats) and prints them side by side.
func (b *bench) scaleFailovers(ctx context.Context, env environment) error {
	o := scaleOpts
	variants, err := parseFailoverVariants(o.failoverVariants, [2]int{o.maxInflight, o.maxMutatingInflight})
	if err != nil {
		return err
	}
	if o.failoverUsers < 1 {
		return fmt.Errorf("-scale-failover-users is %d: at least 1", o.failoverUsers)
	}
	started := time.Now()
	results := make([]foResult, len(variants))
	// The bench's seats on this control plane first, then each other seat
	// setting on a control plane of its own, in the order given.
	var seatOrder [][2]int
	seatOrder = append(seatOrder, [2]int{o.maxInflight, o.maxMutatingInflight})
	for _, v := range variants {
		if !slices.Contains(seatOrder, v.seats) {
			seatOrder = append(seatOrder, v.seats)
		}
	}
	mainAPI, mainEtcd, err := controlPlanePIDs()
	if err != nil {
		return err
	}
	for gi, seats := range seatOrder {
		var idx []int
		for i, v := range variants {
			if v.seats == seats {
				idx = append(idx, i)
			}
		}
		if len(idx) == 0 {
			continue
		}
		eb, stop, skip := b, func() {}, []int(nil)
		if gi > 0 {
			// (this process's first control plane stays up, idle)
			if eb, stop, err = b.secondControlPlane(ctx, seats); err != nil {
				return err
			}
			skip = []int{mainAPI, mainEtcd}
		}
		err := eb.failoverGroup(ctx, variants, idx, results, skip...)
		stop()
		if err != nil {
			return err
		}
	}
	printFailovers(os.Stdout, env, o, results, time.Since(started))
	return nil
}

// secondControlPlane starts another kube-apiserver and etcd, at seats, with
// the operator's CRDs, and a bench for it; stop stops them.
func (b *bench) secondControlPlane(ctx context.Context, seats [2]int) (*bench, func(), error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(os.Stderr, "bench: scale: starting a control plane at %s seats\n", seatsString(seats))
	te, cfg, err := testenv.Start(testenv.Input{Root: root, CRDs: true, Configure: func(env *envtest.Environment) {
		o := scaleOpts
		o.maxInflight, o.maxMutatingInflight = seats[0], seats[1]
		o.configureAPIServer(env)
	}})
	if err != nil {
		return nil, nil, err
	}
	stop := func() {
		if err := te.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "bench: stopping the second control plane:", err)
		}
	}
	nb := &bench{opts: b.opts, lease: b.lease, cfg: cfg, scheme: b.scheme, ctrlRT: newControllerTransport(), testEnv: te}
	if _, err := nb.setup(ctx); err != nil {
		stop()
		return nil, nil, err
	}
	return nb, stop, nil
}

// failoverGroup runs the variants idx (all at this control plane's seats)
// into results.
func (b *bench) failoverGroup(ctx context.Context, variants []foVariant, idx []int, results []foResult, skipPIDs ...int) error {
	o := scaleOpts
	s := &scaleRun{}
	cleanup, err := s.start("kubefence-bench-failover", skipPIDs...)
	if err != nil {
		return err
	}
	defer cleanup()
	// The operator as its service account (cluster-wide rights, as the
	// bench's admin had), trusted as the controller by the webhooks.
	_, opCfg, err := b.serviceAccountUser(ctx, s, scaleOperatorUser, "bench-operator", []rbacv1.PolicyRule{
		{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}},
	})
	if err != nil {
		return err
	}
	op := *b
	op.cfg, op.adminUser = opCfg, scaleOperatorUser
	fmt.Fprintln(os.Stderr, "bench: scale: installing and serving the webhooks (as the operator's service account)")
	stopOperator, err := op.serveOperator(ctx)
	if err != nil {
		return err
	}
	defer stopOperator()
	if s.kubeconfig, _, err = b.serviceAccountUser(ctx, s, scaleHolderUser, "bench-holder", holderRules); err != nil {
		return err
	}
	type waiterUser struct{ name, kubeconfig string }
	var waiters []waiterUser
	for i := range o.failoverUsers {
		u := fmt.Sprintf(scaleWaiterUser, i)
		kc, _, err := b.serviceAccountUser(ctx, s, u, fmt.Sprintf("bench-waiter-%d", i), holderRules)
		if err != nil {
			return err
		}
		waiters = append(waiters, waiterUser{u, kc})
	}

	for _, i := range idx {
		v := variants[i]
		fmt.Fprintf(os.Stderr, "bench: scale: fail-over variant %d/%d %q: %s seats; %s\n", i+1, len(variants), v.spec, seatsString(v.seats), v.describe())
		if err := b.applyFlowControl(ctx, v); err != nil {
			return err
		}
		// The API server's APF configuration controller picks the change up.
		if err := sleep(ctx, 5*time.Second); err != nil {
			return err
		}
		h := &heldSet{prefix: fmt.Sprintf("v%d-", i), massNS: fmt.Sprintf("fo%d-mass", i)}
		for j := range o.mass {
			h.massKeys = append(h.massKeys, fmt.Sprintf("%s/m-%04d", h.massNS, j))
		}
		for j := range o.samples {
			h.sampleKeys = append(h.sampleKeys, fmt.Sprintf("fo%d-k%03d/sample", i, j))
		}
		for j := range o.extraHeld {
			h.extraKeys = append(h.extraKeys, fmt.Sprintf("fo%d-extra/l-%06d", i, j))
		}
		if _, err := b.createLeases(ctx, append(append(append([]string(nil), h.massKeys...), h.sampleKeys...), h.extraKeys...), 5*time.Minute); err != nil {
			return err
		}
		r := &results[i]
		r.v = v
		// The mass group's waiters: one process per waiter identity.
		massWaiters := func() ([]*scaleProc, error) {
			var out []*scaleProc
			per := (len(h.massKeys) + len(waiters) - 1) / len(waiters)
			for j, u := range waiters {
				keys := h.massKeys[min(j*per, len(h.massKeys)):min((j+1)*per, len(h.massKeys))]
				if len(keys) == 0 {
					break
				}
				p, err := b.startProc(ctx, s, fmt.Sprintf("%skf-mass-w-%d", h.prefix, j), "kf", keys, "-kubeconfig", u.kubeconfig, "-user", u.name)
				if err != nil {
					return out, err
				}
				s.procs = append(s.procs, p)
				out = append(out, p)
			}
			return out, nil
		}
		if r.queueTime, err = b.scaleHold(ctx, s, h, &r.grant, massWaiters); err != nil {
			return fmt.Errorf("variant %q: %w", v.spec, err)
		}
		if err := sleep(ctx, o.settle); err != nil {
			return err
		}
		r.load = loadAverage()
		if err := b.scaleFailover(ctx, s, h, &r.failover); err != nil {
			return fmt.Errorf("variant %q: %w", v.spec, err)
		}
		for _, p := range s.procs {
			p.stop()
		}
		s.procs = nil
		// The stopped holders' releases settle before the next variant's
		// holders start (the next variant's leases are its own).
		if err := sleep(ctx, 5*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// applyFlowControl removes config/flowcontrol's objects and, unless the
// variant has none, installs them as the variant sets them.
func (b *bench) applyFlowControl(ctx context.Context, v foVariant) error {
	if err := b.flowControl(ctx, false); err != nil {
		return err
	}
	if v.none {
		return nil
	}
	objs, err := v.objects()
	if err != nil {
		return err
	}
	for _, obj := range objs {
		if err := b.admin.Create(ctx, obj); err != nil {
			return fmt.Errorf("installing %s: %w", obj.GetName(), err)
		}
	}
	return nil
}

// createLeases creates the namespaces and FencedLeases of keys and waits, up
// to timeout, until the controller has put its finalizer on each; it returns
// the namespaces.
func (b *bench) createLeases(ctx context.Context, keys []string, timeout time.Duration) ([]string, error) {
	var namespaces []string
	for _, k := range keys {
		ns, _, _ := strings.Cut(k, "/")
		if !slices.Contains(namespaces, ns) {
			namespaces = append(namespaces, ns)
			if err := b.createNamespace(ctx, ns); err != nil {
				return nil, err
			}
		}
	}
	if err := parallel(ctx, keys, 8, func(ctx context.Context, k string) error {
		ns, name, _ := strings.Cut(k, "/")
		return b.admin.Create(ctx, &coordv1alpha1.FencedLease{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: int32(scaleOpts.lease)},
		})
	}); err != nil {
		return nil, err
	}
	want := make(map[string]bool, len(keys))
	for _, k := range keys {
		want[k] = true
	}
	interval := time.Second
	if len(keys) > 1000 {
		interval = 5 * time.Second // a list of them all is not cheap
	}
	return namespaces, waitFor(ctx, timeout, interval, "every lease to carry the epoch finalizer", func(ctx context.Context) (bool, error) {
		var list coordv1alpha1.FencedLeaseList
		if err := b.admin.List(ctx, &list); err != nil {
			return false, err
		}
		n := 0
		for i := range list.Items {
			if want[list.Items[i].Namespace+"/"+list.Items[i].Name] && len(list.Items[i].Finalizers) > 0 {
				n++
			}
		}
		return n == len(keys), nil
	})
}

func printFailovers(w io.Writer, env environment, o scaleOptions, rs []foResult, elapsed time.Duration) {
	fmt.Fprintf(w, "\nkubefence mass fail-over under API Priority and Fairness variants: %d leases held by one process (killed), their waiters in %d processes as %d service accounts (%s ...), %d samples, L = %ds, webhooks installed, operator as %s\n",
		o.mass, min(o.failoverUsers, o.mass), min(o.failoverUsers, o.mass), fmt.Sprintf(scaleWaiterUser, 0), o.samples, o.lease, scaleOperatorUser)
	fmt.Fprintf(w, "kube-apiserver %s, %d CPUs (%s), load average at start %s, run took %v\n\n",
		env.serverVersion, env.cpus, env.cpuModel, env.loadStart, elapsed.Round(time.Second))
	rows := [][]string{{"measure"}}
	for i, r := range rs {
		rows[0] = append(rows[0], fmt.Sprintf("(%d) %s", i+1, r.v.spec))
	}
	add := func(name string, f func(foResult) string) {
		row := []string{name}
		for _, r := range rs {
			row = append(row, f(r))
		}
		rows = append(rows, row)
	}
	level := func(r foResult) string {
		if r.v.none {
			return "workload-low"
		}
		return "leases"
	}
	add("kube-apiserver seats (max-requests-inflight + mutating)", func(r foResult) string { return seatsString(r.v.seats) })
	add("priority level and renewals schema", func(r foResult) string { return r.v.describe() })
	add("level of renewals: nominal seats", func(r foResult) string {
		return fmt.Sprintf("%s: %.0f", level(r), r.massAPF[level(r)].seats)
	})
	add("load average at the kill (1, 5, 15 min)", func(r foResult) string { return r.load })
	p := func(ds []time.Duration) string { return q(ds, 0.5) + " / " + q(ds, 0.99) }
	add("mass fail-over, kill -> new holder leads: p50 / p99", func(r foResult) string { return p(r.massFailover) })
	add("  max (not granted within L + 60 s)", func(r foResult) string {
		return fmt.Sprintf("%s (%d)", latRow("", r.massFailover)[4], r.massMissing)
	})
	add("  max / variant 1's max", func(r foResult) string {
		return ratioDur(maxDur(r.massFailover), maxDur(rs[0].massFailover))
	})
	add("  kill -> expiry due, p50", func(r foResult) string { return q(r.massDue, 0.5) })
	add("  expiry due -> grant sent (controller lateness) p50 / p99", func(r foResult) string { return p(r.massLateness) })
	add("  grant write sent -> returned p50 / p99", func(r foResult) string { return p(r.massGrantWrite) })
	add("  grant returned -> new holder leads p50 / p99", func(r foResult) string { return p(r.massAck) })
	add("  new holders' writes (refused)", func(r foResult) string {
		return fmt.Sprintf("%d (%d)", r.massWaiterWrites, r.massWaiterFailed)
	})
	add("  APF leases: executed, mean wait, rejected", func(r foResult) string { return r.massAPF["leases"].String() })
	add("  APF workload-low: executed, mean wait, rejected", func(r foResult) string { return r.massAPF["workload-low"].String() })
	add("  kube-apiserver + etcd CPU s (cores), kill -> all granted + 1 s", func(r foResult) string {
		return fmt.Sprintf("%.1f (%.2f)", r.massAPICPU.Seconds(), r.massAPICPU.Seconds()/(r.massDuration+time.Second).Seconds())
	})
	add("  operator CPU s, waiter processes' CPU s", func(r foResult) string {
		return fmt.Sprintf("%.1f, %.1f", r.massOperatorCPU.Seconds(), r.massHolderCPU.Seconds())
	})
	add("  machine busy cores, of which other processes (other helpers)", func(r foResult) string {
		span := (r.massDuration + time.Second).Seconds()
		other := r.massMachineCPU - r.massAPICPU - r.massOperatorCPU - r.massHolderCPU
		return fmt.Sprintf("%.2f, %.2f", r.massMachineCPU.Seconds()/span, other.Seconds()/span)
	})
	add("  controller writes in the mass namespace", func(r foResult) string {
		var parts []string
		for _, c := range categoryOrder {
			if r.massCtrl[c] != 0 {
				parts = append(parts, fmt.Sprintf("%s %d", strings.SplitN(c, " (", 2)[0], r.massCtrl[c]))
			}
		}
		return strings.Join(parts, "; ")
	})
	add("  writes sent in that time (controller + holders)", func(r foResult) string { return strconv.FormatInt(r.massWrites, 10) })
	add("  kube-apiserver + etcd CPU ms per write", func(r foResult) string {
		if r.massWrites == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", float64(r.massAPICPU.Milliseconds())/float64(r.massWrites))
	})
	add("expiry lateness p50 / p99 (samples)", func(r foResult) string { return p(r.lateness) })
	add("takeover beyond L p50 / p99 (samples)", func(r foResult) string { return p(r.takeoverBeyond) })
	add("grant, all H at once: p50 / p99", func(r foResult) string { return p(r.grant) })
	add("waiters started -> all listed", func(r foResult) string { return r.queueTime.Round(time.Second).String() })
	table(w, rows)
}

func maxDur(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

func ratioDur(a, b time.Duration) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", float64(a)/float64(b))
}
