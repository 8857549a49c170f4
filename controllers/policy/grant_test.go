package policy_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/policy"
	"github.com/kubefence/kubefence/test/testenv"
)

// grantEnv is one kube-apiserver with the FencedLease CRD and policy mode's
// policies, and Tenures as the controller builds them (the barrier probing
// that one server).
type grantEnv struct {
	c   client.Client
	cfg *rest.Config
	ns  string
}

func startGrantEnv(t *testing.T) *grantEnv {
	t.Helper()
	testenv.SkipIfShort(t)
	cluster, err := testenv.Start(t.Context(), testenv.Input{Root: "../..", CRDs: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Stop() })
	ctx, c, cfg, admin := t.Context(), cluster.Admin, cluster.Config, cluster.AdminUser
	if err := (policy.Settings{ControllerUsers: []string{admin}, ExcludedNamespaces: []string{"kube-system"}}).Apply(ctx, c); err != nil {
		t.Fatal(err)
	}
	g := &grantEnv{c: c, cfg: cfg, ns: "leases"}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: g.ns}}); err != nil {
		t.Fatal(err)
	}
	return g
}

// tenures is a controller process's policy.Tenures (a new one is a restarted
// controller: it remembers nothing).
func (g *grantEnv) tenures() *policy.Tenures {
	return &policy.Tenures{
		Table:   &policy.Table{Reader: g.c, Writer: g.c},
		Leases:  g.c,
		Barrier: &policy.Barrier{Servers: policy.ConfiguredServer(g.cfg), Prober: &policy.DryRunProber{}, Timeout: 20 * time.Second},
	}
}

// heldLease creates lease name with alice's and bob's requests, alice
// holding token 5, and its table entry; it returns the lease as read.
func (g *grantEnv) heldLease(t *testing.T, name string) *coordv1alpha1.FencedLease {
	t.Helper()
	ctx := t.Context()
	l := &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: g.ns, Name: name},
		Spec: coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: 30, Requests: []coordv1alpha1.LeaseRequest{
			{HolderIdentity: "alice", User: "alice"}, {HolderIdentity: "bob", User: "bob"}}}}
	if err := g.c.Create(ctx, l); err != nil {
		t.Fatal(err)
	}
	l.Status = coordv1alpha1.FencedLeaseStatus{HolderIdentity: "alice", FencingToken: 5, LeaseDurationSeconds: 30}
	if err := g.c.Status().Update(ctx, l); err != nil {
		t.Fatal(err)
	}
	if err := g.tenures().Sync(ctx, l); err != nil {
		t.Fatal(err)
	}
	g.enforces(t, name, 5, "alice's tenure")
	return l
}

// toBob is the status of a hand-over of l from alice (released) to bob with
// token 6.
func toBob(l *coordv1alpha1.FencedLease) *coordv1alpha1.FencedLeaseStatus {
	next := l.Status.DeepCopy()
	next.HolderIdentity, next.FencingToken = "bob", 6
	next.PreviousHolder = &coordv1alpha1.PreviousHolder{HolderIdentity: "alice", FencingToken: 5, Reason: coordv1alpha1.EndReasonReleased, EndTime: metav1.NowMicro()}
	return next
}

// entry is lease name's tenure table entry ("" when there is none).
func (g *grantEnv) entry(t *testing.T, name string) string {
	t.Helper()
	var cm corev1.ConfigMap
	if err := g.c.Get(t.Context(), client.ObjectKey{Namespace: g.ns, Name: coordv1alpha1.TenureTableName}, &cm); err != nil {
		t.Fatal(err)
	}
	return cm.Data[name]
}

// enforces waits until the API server accepts token for lease name and
// refuses the other of 5 and 6 (dry-run creates through the fencing
// policy), and fails t if it does not within 10 s.
func (g *grantEnv) enforces(t *testing.T, name string, token int64, what string) {
	t.Helper()
	other := int64(11) - token
	b := &policy.Barrier{Servers: policy.ConfiguredServer(g.cfg), Prober: &policy.DryRunProber{}, Timeout: 10 * time.Second}
	if err := b.Wait(t.Context(), g.ns, name, &other, token); err != nil {
		t.Fatalf("%s: the API server does not accept token %d and refuse %d for lease %s: %v", what, token, other, name, err)
	}
}

// touch changes lease name (an annotation, as any spec write such as a
// renewal would): its resourceVersion moves on. It returns the lease as
// written.
func (g *grantEnv) touch(t *testing.T, name string) *coordv1alpha1.FencedLease {
	t.Helper()
	var l coordv1alpha1.FencedLease
	if err := g.c.Get(t.Context(), client.ObjectKey{Namespace: g.ns, Name: name}, &l); err != nil {
		t.Fatal(err)
	}
	l.Annotations = map[string]string{"touched": time.Now().String()}
	if err := g.c.Update(t.Context(), &l); err != nil {
		t.Fatal(err)
	}
	return &l
}

// namesAlice tells whether a table entry names alice's tenure (token 5),
// namesBob whether it names bob's (token 6).
func namesAlice(entry string) bool {
	return strings.HasPrefix(entry, "5 ") && strings.HasSuffix(entry, " alice")
}

func namesBob(entry string) bool {
	return strings.HasPrefix(entry, "6 ") && strings.HasSuffix(entry, " bob")
}

// undone fails t unless lease name's entry names alice's tenure again and
// the API server enforces it.
func (g *grantEnv) undone(t *testing.T, name, what string) {
	t.Helper()
	if got := g.entry(t, name); !namesAlice(got) {
		t.Fatalf("%s: the table names %q, want alice's token 5 again", what, got)
	}
	g.enforces(t, name, 5, what)
}

// TestGrantUndoneWhenItsStatusWriteFails: a grant written to the table and
// proven by the barrier, whose status write then conflicts (the lease
// changed meanwhile, as a renewal changes it), is undone: the table names
// the old tenure again, and the API server accepts the old holder's token
// and refuses the grant's, which nobody can learn.
func TestGrantUndoneWhenItsStatusWriteFails(t *testing.T) {
	g := startGrantEnv(t)
	ctx := t.Context()
	l := g.heldLease(t, "job")
	tn := g.tenures()
	next := toBob(l)
	done, err := tn.Grant(ctx, l, next)
	if err != nil {
		t.Fatalf("Grant: %v", err)
	}
	if got := g.entry(t, "job"); !namesBob(got) {
		t.Fatalf("after Grant the table names %q, want bob's token 6", got)
	}
	g.touch(t, "job")
	updated := l.DeepCopy()
	updated.Status = *next
	werr := g.c.Status().Update(ctx, updated)
	if !apierrors.IsConflict(werr) {
		t.Fatalf("the grant's status write on the old resourceVersion: %v, want a conflict", werr)
	}
	done(ctx, werr)
	g.undone(t, "job", "after the failed status write")
}

// TestGrantAheadOfTheTable: Grant finds the table naming a higher token
// than the one it grants (the "ahead" path: a grant written earlier whose
// status write failed, or that may still commit). It writes nothing and
// fails ("deciding again"); the Sync it runs undoes an entry whose grant can
// never commit (its attempt is not the lease's resourceVersion) and keeps
// one that may still commit (its attempt is).
func TestGrantAheadOfTheTable(t *testing.T) {
	g := startGrantEnv(t)
	ctx := t.Context()
	for _, c := range []struct {
		name      string
		mayCommit bool
	}{{"cannot-commit", false}, {"may-commit", true}} {
		t.Run(c.name, func(t *testing.T) {
			l := g.heldLease(t, c.name)
			attempt := "1"
			if c.mayCommit {
				attempt = l.ResourceVersion
			}
			ahead := policy.Entry{Token: 7, Held: true, User: "carol", Attempt: attempt}
			if _, _, err := g.tenures().Table.Update(ctx, g.ns, c.name, func(policy.Entry, bool) (policy.Entry, bool) { return ahead, true }); err != nil {
				t.Fatal(err)
			}
			_, err := g.tenures().Grant(ctx, l, toBob(l))
			if err == nil || !strings.Contains(err.Error(), "above the grant's 6") {
				t.Fatalf("Grant under an entry with token 7: %v, want the ahead error", err)
			}
			got := g.entry(t, c.name)
			if c.mayCommit {
				if !strings.HasPrefix(got, "7 ") {
					t.Errorf("the entry of a grant that may still commit became %q, want token 7 kept", got)
				}
				return
			}
			if !namesAlice(got) {
				t.Errorf("the entry of a grant that can never commit is %q, want alice's token 5 again", got)
			}
			g.enforces(t, c.name, 5, "after the ahead path undid the entry")
		})
	}
}

// TestRestartBetweenTableAndStatusWrite: a controller writes a grant to the
// table, the barrier passes, and it dies before its status write. A new
// controller (nothing remembered) keeps the entry while the grant may still
// commit (the lease's resourceVersion is the grant's attempt), since the old
// process's status write may still arrive: if it does, the table and the
// status agree. If the lease changes first, the write can never commit (it
// carries the old resourceVersion), and the next Sync names the old tenure
// again; the late write then conflicts. Either way the grant's token is
// accepted only while the grant may still commit, and no write with it
// can have come from its holder before the status named it, since the status
// is the only place a holder learns its token.
func TestRestartBetweenTableAndStatusWrite(t *testing.T) {
	g := startGrantEnv(t)
	ctx := t.Context()
	for _, arrives := range []bool{true, false} {
		name := map[bool]string{true: "write-arrives", false: "lease-moves-on"}[arrives]
		t.Run(name, func(t *testing.T) {
			l := g.heldLease(t, name)
			next := toBob(l)
			if _, err := g.tenures().Grant(ctx, l, next); err != nil {
				t.Fatalf("Grant: %v", err)
			}
			// The controller dies here. A new one syncs the lease.
			restarted := g.tenures()
			if err := restarted.Sync(ctx, l); err != nil {
				t.Fatal(err)
			}
			if got := g.entry(t, name); !strings.HasPrefix(got, "6 ") {
				t.Fatalf("a restarted controller's Sync changed the entry of a grant that may still commit to %q", got)
			}
			late := l.DeepCopy()
			late.Status = *next
			if arrives {
				if err := g.c.Status().Update(ctx, late); err != nil {
					t.Fatalf("the dead controller's status write: %v", err)
				}
				if err := restarted.Sync(ctx, late); err != nil {
					t.Fatal(err)
				}
				if got := g.entry(t, name); !namesBob(got) {
					t.Errorf("after the grant's status write the table names %q, want bob's token 6", got)
				}
				g.enforces(t, name, 6, "after the late status write")
				return
			}
			moved := g.touch(t, name)
			if err := restarted.Sync(ctx, moved); err != nil {
				t.Fatal(err)
			}
			g.undone(t, name, "after the lease moved on")
			if err := g.c.Status().Update(ctx, late); !apierrors.IsConflict(err) {
				t.Errorf("the dead controller's late status write: %v, want a conflict", err)
			}
		})
	}
}

// TestBarrierTellsAQuotaFromThePolicy: a barrier probe refused by something
// other than the fencing policy (here a ResourceQuota on ConfigMaps, which
// refuses the dry-run create) proves nothing about the tenure table. The
// grant fails at once with ErrProbeRefusedElsewhere, naming the refusal, and
// the lease gets a Warning event, instead of the barrier counting it as the
// policy's refusal and timing out with nothing said. Once the quota is gone
// the grant passes.
func TestBarrierTellsAQuotaFromThePolicy(t *testing.T) {
	g := startGrantEnv(t)
	ctx := t.Context()
	l := g.heldLease(t, "job")
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: g.ns, Name: "configmaps"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/configmaps": resource.MustParse("0")}}}
	if err := g.c.Create(ctx, quota); err != nil {
		t.Fatal(err)
	}
	// No quota controller runs here: the status it would write.
	quota.Status = corev1.ResourceQuotaStatus{Hard: quota.Spec.Hard, Used: corev1.ResourceList{"count/configmaps": resource.MustParse("0")}}
	if err := g.c.Status().Update(ctx, quota); err != nil {
		t.Fatal(err)
	}
	probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: g.ns, GenerateName: "quota-check-"}}
	deadline := time.Now().Add(10 * time.Second)
	for g.c.Create(ctx, probe.DeepCopy(), client.DryRunAll) == nil {
		if time.Now().After(deadline) {
			t.Fatal("the quota does not refuse ConfigMaps within 10 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	tn := g.tenures()
	rec := events.NewFakeRecorder(10)
	tn.Recorder = rec
	start := time.Now()
	_, err := tn.Grant(ctx, l, toBob(l))
	if !errors.Is(err, policy.ErrProbeRefusedElsewhere) || !strings.Contains(err.Error(), "quota") {
		t.Fatalf("Grant with the probes refused by a quota: %v, want ErrProbeRefusedElsewhere naming the quota", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Grant took %v to report the quota, want well under the barrier's timeout", took)
	}
	select {
	case e := <-rec.Events:
		if !strings.Contains(e, "Warning "+policy.EventBarrierBlocked) || !strings.Contains(e, "quota") {
			t.Errorf("event %q, want a Warning %s naming the quota", e, policy.EventBarrierBlocked)
		}
	default:
		t.Error("no event on the lease")
	}
	if err := g.c.Delete(ctx, quota); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		_, err := tn.Grant(ctx, l, toBob(l))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Grant after the quota was deleted: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// lostAnswer is a Writer whose next Update is sent and takes effect, and
// then answers with a timeout, as when the answer is lost on the network.
type lostAnswer struct {
	client.Client
	armed bool
}

func (w *lostAnswer) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	if err := w.Client.Update(ctx, obj, opts...); err != nil || !w.armed {
		return err
	}
	w.armed = false
	return apierrors.NewTimeoutError("the answer to the tenure table write was lost", 1)
}

// TestGrantWhoseTableWriteAnswerIsLost: a grant's table write takes effect
// but its answer is lost (a timeout). Grant fails before the barrier; the
// holder renews (the lease moves on, so the grant can never commit). The
// next Sync must see the table naming the grant and undo it, although this
// controller last knew the entry to say what the status says: it must not
// trust that memory once it sent a write to the entry (before the fix it
// did, every Sync returned at once, and the holder's writes were refused
// with the grant's token until the controller restarted).
func TestGrantWhoseTableWriteAnswerIsLost(t *testing.T) {
	g := startGrantEnv(t)
	ctx := t.Context()
	l := g.heldLease(t, "job")
	w := &lostAnswer{Client: g.c}
	tn := g.tenures()
	tn.Table.Writer = w
	if err := tn.Sync(ctx, l); err != nil { // this controller now knows alice's entry
		t.Fatal(err)
	}
	w.armed = true
	if _, err := tn.Grant(ctx, l, toBob(l)); !apierrors.IsTimeout(err) {
		t.Fatalf("Grant with the table write's answer lost: %v, want the timeout", err)
	}
	if got := g.entry(t, "job"); !namesBob(got) {
		t.Fatalf("the lost write did not take effect: the table names %q", got)
	}
	moved := g.touch(t, "job") // alice renews: bob's grant can never commit
	if err := tn.Sync(ctx, moved); err != nil {
		t.Fatal(err)
	}
	g.undone(t, "job", "after Sync, with the grant unable to commit")
}

// TestSyncRereadsATableAnotherProcessWrote: another controller process (a
// leader deposed while its grant was on the network) writes a grant to the
// table and dies before its status write; this controller last knew the
// entry to say what the status says. The lease moves on, so the grant can
// never commit. Within RecheckAfter this controller's Sync reads the table
// again and undoes the grant: a table naming a token no status names is
// never left without the controller acting for longer than that (plus the
// time to the lease's next reconcile).
func TestSyncRereadsATableAnotherProcessWrote(t *testing.T) {
	g := startGrantEnv(t)
	ctx := t.Context()
	l := g.heldLease(t, "job")
	tn := g.tenures()
	tn.RecheckAfter = 500 * time.Millisecond
	if err := tn.Sync(ctx, l); err != nil {
		t.Fatal(err)
	}
	if _, err := g.tenures().Grant(ctx, l, toBob(l)); err != nil { // the other process
		t.Fatalf("Grant: %v", err)
	}
	moved := g.touch(t, "job")
	start := time.Now()
	for {
		if err := tn.Sync(ctx, moved); err != nil {
			t.Fatal(err)
		}
		got := g.entry(t, "job")
		if namesAlice(got) {
			break
		}
		if time.Since(start) > tn.RecheckAfter+5*time.Second {
			t.Fatalf("%v after the other process's grant, Sync still leaves the table naming %q, want alice's token 5 again", time.Since(start), got)
		}
		time.Sleep(50 * time.Millisecond) // the holder's renewals bring reconciles
	}
	t.Logf("undone %v after the other process's grant (RecheckAfter %v)", time.Since(start), tn.RecheckAfter)
	g.enforces(t, "job", 5, "after the undo")
}
