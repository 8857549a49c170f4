package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/hack/demo/internal/event"
	"github.com/kubefence/kubefence/hack/devenv"
)

// The cast and the stage.
const (
	storyNamespace = "demo"
	storyLease     = "job-a"
	storyObject    = "report"
	workerA        = "worker-a"
	workerB        = "worker-b"
	// pausedWrite is the write before which worker A freezes.
	pausedWrite = 3
	// writesOfB is how many writes worker B makes per tenure.
	writesOfB = 2
)

// story plays the seeds' scenario against a running control plane.
type story struct {
	o        options
	cp       *controlPlane
	tl       *timeline
	dir, bin string
	res      *result
	workers  []*workerProc
	// stopWatch ends the lease watch.
	stopWatch context.CancelFunc
}

// startWorker creates a user and a kubeconfig for a worker and starts it.
func (s *story) startWorker(name string, extra ...string) (*workerProc, error) {
	kc := filepath.Join(s.dir, name+".kubeconfig")
	if err := s.cp.addWorkerUser(name, kc); err != nil {
		return nil, err
	}
	args := append([]string{
		"--kubeconfig", kc, "--namespace", storyNamespace, "--lease", storyLease, "--identity", name,
		"--object", storyObject, "--interval", s.o.interval.String(), "--exit-on-stdin-eof",
	}, extra...)
	w, err := startWorker(s.bin, name, filepath.Join(s.dir, name+".log"), args, s.tl, storyNamespace+"/"+storyObject)
	if err != nil {
		return nil, err
	}
	s.workers = append(s.workers, w)
	s.res.PIDs = append(s.res.PIDs, w.Pid())
	return w, nil
}

// close stops the lease watch and the workers, in the order they started: A,
// which only waits by now, first, so that B's release does not hand A the lease.
func (s *story) close() error {
	if s.stopWatch != nil {
		s.stopWatch()
	}
	var errs []error
	for _, w := range s.workers {
		errs = append(errs, w.stop(5*time.Second))
	}
	return errors.Join(errs...)
}

// failed adds a worker's log to err.
func failed(w *workerProc, err error) error {
	return fmt.Errorf("%w\n%s's log (%s):\n%s", err, w.Name, w.logPath, indent(w.logTail(), "  "))
}

func (s *story) play(ctx context.Context) error {
	tl, admin := s.tl, s.cp.admin

	// The stage: a namespace and the lease. The Widget is created by the first
	// holder's fenced client, which labels it kubefence.io/lease=job-a.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: storyNamespace}}
	if err := admin.Create(ctx, ns); err != nil {
		return fmt.Errorf("creating namespace %s: %w", storyNamespace, err)
	}
	lease := &coordv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: storyNamespace, Name: storyLease},
		Spec:       coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: int32(s.o.leaseSeconds)},
	}
	if err := admin.Create(ctx, lease); err != nil {
		return fmt.Errorf("creating FencedLease %s/%s: %w", storyNamespace, storyLease, err)
	}
	tl.begin()
	tl.note("created namespace %s and FencedLease %s/%s (leaseDurationSeconds %d, no lock delay)",
		storyNamespace, storyNamespace, storyLease, s.o.leaseSeconds)
	wctx, stopWatch := context.WithCancel(ctx)
	s.stopWatch = stopWatch
	go s.watchLease(wctx)

	// Act 1: A leads and writes; then it freezes between its check and its write.
	a, err := s.startWorker(workerA, "--pause-before-write", strconv.Itoa(pausedWrite), "--max-writes", strconv.Itoa(pausedWrite))
	if err != nil {
		return err
	}
	granted, err := tl.waitFor(ctx, 30*time.Second, "worker-a to be granted the lease", a.done, nth(workerA, event.Granted, 1))
	if err != nil {
		return failed(a, err)
	}
	s.res.TokenA = granted.Ev.Token
	p, err := tl.waitFor(ctx, 20*time.Second, "worker-a to freeze before a write", a.done,
		firstOf(workerA, 0, event.Pausing, event.Refused, event.Failed, event.Exited))
	if err != nil {
		return failed(a, err)
	}
	if p.Ev.Kind != event.Pausing {
		return failed(a, fmt.Errorf("worker-a reported %q before it could pause", p.Ev.Kind))
	}
	if err := a.waitStopped(ctx, 10*time.Second); err != nil {
		return failed(a, err)
	}
	frozen := time.Now()
	expiry := "soon"
	var cur coordv1alpha1.FencedLease
	if err := admin.Get(ctx, client.ObjectKeyFromObject(lease), &cur); err == nil && cur.Status.ExpireTime != nil {
		expiry = "at " + tl.rel(cur.Status.ExpireTime.Time)
	}
	tl.note("worker-a (pid %d) is stopped (process state T): it cannot renew, nor learn that its lease ends.\nThe controller, counting on its own clock from the last renewal it saw, will expire it %s", a.Pid(), expiry)

	// Act 2: B queues, the controller expires A and grants B a larger token.
	b, err := s.startWorker(workerB, "--max-writes", strconv.Itoa(writesOfB))
	if err != nil {
		return err
	}
	wait := time.Duration(3*s.o.leaseSeconds)*time.Second + 30*time.Second
	granted, err = tl.waitFor(ctx, wait, "worker-b to be granted the lease", b.done, nth(workerB, event.Granted, 1))
	if err != nil {
		return failed(b, err)
	}
	s.res.TokenB = granted.Ev.Token
	if s.res.TokenB <= s.res.TokenA {
		return fmt.Errorf("worker-b was granted token %d, not greater than worker-a's %d", s.res.TokenB, s.res.TokenA)
	}
	if _, err := tl.waitFor(ctx, 20*time.Second, "worker-b's writes", b.done, nth(workerB, event.Wrote, writesOfB)); err != nil {
		return failed(b, err)
	}

	// Act 3: A wakes up and sends the write it prepared with its old token.
	mark := tl.len()
	tl.note("SIGCONT to worker-a after %.1fs stopped", time.Since(frozen).Seconds())
	if err := a.resume(); err != nil {
		return fmt.Errorf("continuing worker-a: %w", err)
	}
	r, err := tl.waitFor(ctx, 20*time.Second, "worker-a's late write", a.done,
		firstOf(workerA, mark, event.Refused, event.Wrote, event.Failed, event.Exited))
	if err != nil {
		return failed(a, err)
	}
	if r.Ev.Kind != event.Refused {
		return failed(a, fmt.Errorf("FENCING FAILED: worker-a's write with stale token %d was not refused as stale (%s: %s)", r.Ev.Token, r.Ev.Kind, r.Ev.Message))
	}
	s.res.RefusalCode, s.res.RefusalMessage = r.Ev.Code, r.Ev.Message
	// A's helper notices the lost lease and queues again behind B.
	_, _ = tl.waitFor(ctx, 10*time.Second, "worker-a to stop leading", a.done, firstOf(workerA, mark, event.StoppedLeading))
	_, _ = tl.waitFor(ctx, 5*time.Second, "worker-a to queue again", a.done, func(es []entry) (entry, bool) {
		for _, e := range es[min(mark, len(es)):] {
			if e.Who == workerA && e.Ev != nil && e.Ev.Kind == event.Holder && e.Ev.Holder == workerB {
				return e, true
			}
		}
		return entry{}, false
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return s.checkWidget(ctx)
}

// checkWidget reads the Widget and checks that it holds only accepted writes:
// after B's first entry, nothing of A's.
func (s *story) checkWidget(ctx context.Context) error {
	w := &unstructured.Unstructured{}
	w.SetGroupVersionKind(devenv.WidgetGVK)
	if err := s.cp.admin.Get(ctx, types.NamespacedName{Namespace: storyNamespace, Name: storyObject}, w); err != nil {
		return fmt.Errorf("reading widget %s/%s: %w", storyNamespace, storyObject, err)
	}
	s.res.Entries, _, _ = unstructured.NestedStringSlice(w.Object, "spec", "entries")
	s.res.Writer, _, _ = unstructured.NestedString(w.Object, "spec", "writer")
	s.res.ObjectToken = w.GetAnnotations()[coordv1alpha1.FencingTokenAnnotation]
	firstB := slices.IndexFunc(s.res.Entries, func(e string) bool { return strings.HasPrefix(e, workerB+"@") })
	if firstB < 0 || s.res.Writer != workerB || s.res.ObjectToken != strconv.FormatInt(s.res.TokenB, 10) ||
		slices.ContainsFunc(s.res.Entries[firstB:], func(e string) bool { return !strings.HasPrefix(e, workerB+"@") }) {
		return fmt.Errorf("FENCING FAILED: widget %s/%s holds writer %q, token %q, entries %v",
			storyNamespace, storyObject, s.res.Writer, s.res.ObjectToken, s.res.Entries)
	}
	return nil
}

// watchLease adds the controller's decisions to the timeline: grants,
// takeovers, expiries and releases (renewals are left out).
func (s *story) watchLease(ctx context.Context) {
	var last leaseView
	for ctx.Err() == nil {
		var l coordv1alpha1.FencedLease
		if err := s.cp.admin.Get(ctx, types.NamespacedName{Namespace: storyNamespace, Name: storyLease}, &l); err != nil {
			sleepCtx(ctx, 200*time.Millisecond)
			continue
		}
		last = s.describeLease(last, &l)
		w, err := s.cp.admin.Watch(ctx, &coordv1alpha1.FencedLeaseList{}, client.InNamespace(storyNamespace),
			&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: l.ResourceVersion}})
		if err != nil {
			sleepCtx(ctx, 200*time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			if l, ok := ev.Object.(*coordv1alpha1.FencedLease); ok && ev.Type == watch.Modified && l.Name == storyLease {
				last = s.describeLease(last, l)
			}
		}
		w.Stop()
	}
}

// leaseView is what the timeline shows of a lease: who holds which token.
type leaseView struct {
	holder string
	token  int64
}

func (s *story) describeLease(prev leaseView, l *coordv1alpha1.FencedLease) leaseView {
	cur := leaseView{holder: l.Status.HolderIdentity, token: l.Status.FencingToken}
	if cur == prev || (cur.holder == "" && prev.holder == "") {
		return cur
	}
	reason := ""
	if c := meta.FindStatusCondition(l.Status.Conditions, coordv1alpha1.ConditionHeld); c != nil {
		reason = c.Reason
	}
	ph := l.Status.PreviousHolder
	var text string
	switch {
	case cur.holder != "" && reason == coordv1alpha1.ReasonTakenOver && ph != nil:
		text = fmt.Sprintf("%s stopped renewing: its tenure (token %d) expired at %s on the controller's clock;\ngranted the lease to %s with token %d (TakenOver)",
			ph.HolderIdentity, ph.FencingToken, s.tl.rel(ph.EndTime.Time), cur.holder, cur.token)
	case cur.holder != "" && reason == coordv1alpha1.ReasonHandedOver && ph != nil:
		text = fmt.Sprintf("%s released the lease (token %d); handed it to %s with token %d", ph.HolderIdentity, ph.FencingToken, cur.holder, cur.token)
	case cur.holder != "":
		text = fmt.Sprintf("granted the lease to %s with token %d", cur.holder, cur.token)
	case ph != nil && ph.Reason == coordv1alpha1.EndReasonReleased:
		text = fmt.Sprintf("%s released the lease (token %d); nobody is waiting", ph.HolderIdentity, ph.FencingToken)
	case ph != nil:
		text = fmt.Sprintf("%s stopped renewing: its tenure (token %d) expired at %s; nobody is waiting", ph.HolderIdentity, ph.FencingToken, s.tl.rel(ph.EndTime.Time))
	default:
		text = fmt.Sprintf("the lease has no holder (last token %d)", cur.token)
	}
	if cur.holder != "" && l.Status.ExpireTime != nil {
		text += fmt.Sprintf(", until %s unless renewed", s.tl.rel(l.Status.ExpireTime.Time))
	}
	s.tl.add(whoController, text, nil)
	return cur
}

// showViews prints what an operator sees with the real kubectl.
func (s *story) showViews(ctx context.Context) {
	s.kubectl(ctx, []string{"get", "fencedleases", "-n", storyNamespace, "-o", "wide"}, "")
	cols := `NAME:.metadata.name,WRITER:.spec.writer,TOKEN:.metadata.annotations.kubefence\.io/fencing-token,ENTRIES:.spec.entries`
	s.kubectl(ctx, []string{"get", "widgets", "-n", storyNamespace, "-o", "custom-columns=" + cols}, "'custom-columns="+cols+"'")
}

// kubectl runs the control plane's kubectl as the admin; shown replaces the
// last argument in the printed command line.
func (s *story) kubectl(ctx context.Context, args []string, shown string) {
	line := args
	if shown != "" {
		line = append(slices.Clone(args[:len(args)-1]), shown)
	}
	fmt.Fprintf(s.o.out, "\n$ kubectl %s\n", strings.Join(line, " "))
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, s.cp.kubectl, append([]string{"--kubeconfig", s.cp.adminKubeconfig, "--cache-dir", s.cp.kubectlCache}, args...)...).CombinedOutput()
	fmt.Fprintln(s.o.out, indent(string(out), "  "))
	if err != nil {
		fmt.Fprintf(s.o.out, "  (kubectl: %v)\n", err)
	}
}

// summary tells what happened, and what the operator's metrics counted.
func (s *story) summary() {
	r := s.res
	for _, e := range s.tl.snapshot() {
		if e.Who == whoWebhook {
			r.WebhookRefusals++
		}
	}
	out := s.o.out
	fmt.Fprintln(out, "\nWhat happened")
	fmt.Fprintf(out, "  - worker-a held %s/%s with token %d and wrote; it froze after checking its lease, before its write #%d.\n",
		storyNamespace, storyLease, r.TokenA, pausedWrite)
	fmt.Fprintf(out, "  - The controller expired it on its own clock and granted worker-b token %d (greater: tokens only go up).\n", r.TokenB)
	fmt.Fprintf(out, "  - worker-a woke up and sent the write it had prepared, with token %d. The API server refused it (%d):\n", r.TokenA, r.RefusalCode)
	fmt.Fprintf(out, "    the fencing webhook saw that the Widget had already accepted token %s, so the late write changed nothing.\n", r.ObjectToken)
	fmt.Fprintf(out, "  - Widget %s/%s holds only accepted writes: writer %s, token %s, entries %v.\n",
		storyNamespace, storyObject, r.Writer, r.ObjectToken, r.Entries)
	fmt.Fprintln(out, "\nOperator metrics (lease "+storyNamespace+"/"+storyLease+")")
	for _, line := range leaseMetrics() {
		fmt.Fprintln(out, "  "+line)
	}
}

// leaseMetrics reads the operator's counters for the story's lease.
func leaseMetrics() []string {
	wanted := []string{"kubefence_tokens_issued_total", "kubefence_lease_takeovers_total", "kubefence_renewals_missed_total", "kubefence_stale_writes_rejected_total"}
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		return []string{"(metrics unavailable: " + err.Error() + ")"}
	}
	var lines []string
	for _, name := range wanted {
		for _, f := range families {
			if f.GetName() != name {
				continue
			}
			for _, m := range f.GetMetric() {
				var labels []string
				ours := false
				for _, lp := range m.GetLabel() {
					labels = append(labels, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
					ours = ours || (lp.GetName() == "lease" && lp.GetValue() == storyLease)
				}
				if ours {
					lines = append(lines, fmt.Sprintf("%s{%s} %g", name, strings.Join(labels, ","), m.GetCounter().GetValue()))
				}
			}
		}
	}
	return lines
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
