package enforcement_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/controllers/policy"
	"github.com/kubefence/kubefence/pkg/fence"
	"github.com/kubefence/kubefence/test/ruletable"
	"github.com/kubefence/kubefence/test/testenv"
)

// The FencedLease rules (I6) on a real API server, in both modes: the rows
// of test/ruletable.LeaseRows (runLeaseRows), the same the unit tier runs
// in process. The FencedLease webhook judges them in webhook mode, the
// policy kubefence-fencedleases (policy.Settings.LeasePolicy) in policy
// mode, where no FencedLease webhook is installed. Each refusal must come
// from that judge (or from the CRD's own validation, in both modes) and say
// why. The scenarios around the rules (a stamp in the future, a withdrawn
// holder's identity queued again) follow.

// leaseRules is a namespace of FencedLeases and the users that write
// them, by name (ruletable.LeaseUser: alice, bob and mallory are clients,
// ops is in system:masters without being a controller user, controller is
// the admin, pod-a and pod-b are alice from pods a and b).
type leaseRules struct {
	h     *harness
	ns    string
	users map[string]client.Client
}

func (r *leaseRules) get(t *testing.T, name string) *coordv1alpha1.FencedLease {
	t.Helper()
	var l coordv1alpha1.FencedLease
	must(t, r.h.admin.Get(r.h.ctx, client.ObjectKey{Namespace: r.ns, Name: name}, &l))
	return &l
}

// update reads lease name as the admin, changes it with f and writes it as
// user, again on a conflict (the controller writes the lease too).
func (r *leaseRules) update(t *testing.T, user, name string, f func(*coordv1alpha1.FencedLease)) error {
	for {
		l := r.get(t, name)
		f(l)
		if err := r.users[user].Update(r.h.ctx, l); !apierrors.IsConflict(err) {
			return err
		}
	}
}

func (r *leaseRules) create(user, name string, f func(*coordv1alpha1.FencedLease)) error {
	l := &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: name},
		Spec: coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: 600}}
	f(l)
	return r.users[user].Create(r.h.ctx, l)
}

func request(id, user string) coordv1alpha1.LeaseRequest {
	return coordv1alpha1.LeaseRequest{HolderIdentity: id, User: user}
}

// requestOf is the request of id in l; if an earlier row went wrong and it
// is missing, a detached one, so that the row still reports its outcome.
func requestOf(l *coordv1alpha1.FencedLease, id string) *coordv1alpha1.LeaseRequest {
	i := coordv1alpha1.RequestIndex(l.Spec.Requests, id)
	if i < 0 {
		return &coordv1alpha1.LeaseRequest{HolderIdentity: id}
	}
	return &l.Spec.Requests[i]
}

func stamp(t time.Time) *metav1.MicroTime {
	m := metav1.NewMicroTime(t)
	return &m
}

// renewing is a renewal of id's request: renewSequence + 1, renewTime at(its
// previous one).
func renewing(id string, at func(prev *metav1.MicroTime) *metav1.MicroTime) func(*coordv1alpha1.FencedLease) {
	return func(l *coordv1alpha1.FencedLease) {
		q := requestOf(l, id)
		q.RenewSequence++
		q.RenewTime = at(q.RenewTime)
	}
}

func now(*metav1.MicroTime) *metav1.MicroTime { return stamp(time.Now()) }

// impersonating is a client of the admin's config acting as user (in the
// clients' group), with the pod name of a pod-bound token if pod is set.
func (h *harness) impersonating(t *testing.T, user, pod string) client.Client {
	t.Helper()
	return h.impersonatingWatch(t, user, pod)
}

// impersonatingWatch is impersonating with a watch, for an Elector.
func (h *harness) impersonatingWatch(t *testing.T, user, pod string) client.WithWatch {
	t.Helper()
	c := rest.CopyConfig(h.cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"kubefence:clients", "system:authenticated"}}
	if pod != "" {
		c.Impersonate.Extra = map[string][]string{coordv1alpha1.PodNameExtraKey: {pod}}
	}
	cl, err := client.NewWithWatch(c, client.Options{Scheme: h.scheme})
	must(t, err)
	return cl
}

// runLeaseRows replays the FencedLease rules' table (ruletable.LeaseRows,
// but the rows marked UnitOnly) on the API server, in the harness's mode,
// in the table's order: lease q (alice holds it, her renewal stamped, bob
// waits) and lease pods (pod a of alice holds it, made by a row) are
// written by every row of their bases, which are checked before each row;
// a row on a Free base gets a fresh lease of its own.
func runLeaseRows(t *testing.T, h *harness) {
	r := &leaseRules{h: h, ns: h.namespace(t, nil), users: map[string]client.Client{}}
	for _, u := range []string{"alice", "bob", "mallory"} {
		r.users[u] = h.users[u]
	}
	ops, err := h.env.AddUser(envtest.User{Name: "ops", Groups: []string{"system:masters"}}, nil)
	must(t, err)
	r.users["ops"], err = client.New(ops.Config(), client.Options{Scheme: h.scheme})
	must(t, err)
	r.users["controller"] = h.admin
	r.users["gc"] = h.impersonating(t, ruletable.GC.Name, "")
	r.users["pod-a"] = h.impersonating(t, "alice", "a")
	r.users["pod-b"] = h.impersonating(t, "alice", "b")
	r.users["worker"] = h.impersonating(t, ruletable.LeaseWorker.UnitUser().Name, "")
	// RBAC lets the clients (and the clean-up user) write status and
	// everything else, so that only admission refuses.
	must(t, h.admin.Create(h.ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "lease-rules"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{coordv1alpha1.GroupVersion.Group}, Resources: []string{"fencedleases", "fencedleases/status"}, Verbs: []string{"*"}}}}))
	must(t, h.admin.Create(h.ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "lease-rules"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "lease-rules"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, Name: "kubefence:clients"},
			{Kind: rbacv1.UserKind, Name: ruletable.GC.Name}}}))

	must(t, r.create("alice", "q", func(l *coordv1alpha1.FencedLease) {
		l.Spec.Requests = append(l.Spec.Requests, request("alice", "alice"))
	}))
	must(t, r.update(t, "bob", "q", func(l *coordv1alpha1.FencedLease) { l.Spec.Requests = append(l.Spec.Requests, request("bob", "bob")) }))
	testenv.Within(t, 10*time.Second, "alice holds q, with the epoch finalizer", func() error {
		l := r.get(t, "q")
		if l.Status.HolderIdentity != "alice" || len(l.Finalizers) == 0 {
			return errors.New("not yet")
		}
		return nil
	})
	must(t, r.update(t, "alice", "q", renewing("alice", now)))
	testenv.Within(t, 10*time.Second, "RBAC lets the clients write status", func() error {
		err := r.users["bob"].Status().Update(h.ctx, r.get(t, "q"))
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "cannot update resource") {
			return err
		}
		return nil
	})
	for i, row := range ruletable.LeaseRows() {
		if row.UnitOnly != "" {
			continue
		}
		if p := row.Check(h.mode, r.write(t, i, row)); p != "" {
			t.Errorf("%s: %s", row.Name, p)
		}
	}
}

// write sends the row's write, on its base; the error is its answer.
func (r *leaseRules) write(t *testing.T, i int, row ruletable.LeaseRow) error {
	t.Helper()
	c := r.users[string(row.As)]
	if c == nil {
		t.Fatalf("%s: no client for %s", row.Name, row.As)
	}
	if row.Op == "CREATE" {
		ns := r.ns
		if row.In == ruletable.Excluded {
			ns = "kube-system"
		}
		l := row.NewLease(ns)
		row.Change(l, time.Now())
		return c.Create(r.h.ctx, l)
	}
	name := "q"
	switch row.Base {
	case ruletable.PodQueue:
		name = "pods"
	case ruletable.Free:
		name = fmt.Sprintf("free-%d", i)
		l := row.UnitBase()
		l.Namespace, l.Name = r.ns, name
		l.Status = coordv1alpha1.FencedLeaseStatus{}
		must(t, r.h.admin.Create(r.h.ctx, l))
	}
	if row.Base != ruletable.Free {
		want := ruletable.Shape(row.UnitBase())
		testenv.Within(t, 20*time.Second, row.Name+": lease "+name+" is "+want, func() error {
			if got := ruletable.Shape(r.get(t, name)); got != want {
				return fmt.Errorf("it is %s (an earlier row left it so)", got)
			}
			return nil
		})
	}
	if row.Op == "DELETE" {
		return c.Delete(r.h.ctx, r.get(t, name))
	}
	for {
		l := r.get(t, name)
		row.Change(l, time.Now())
		var err error
		if row.Sub == "status" {
			err = c.Status().Update(r.h.ctx, l)
		} else {
			err = c.Update(r.h.ctx, l)
		}
		if !apierrors.IsConflict(err) {
			return err
		}
	}
}

// checkLease checks a FencedLease write's outcome, and that a refusal came
// from the mode's judge: the policy kubefence-fencedleases in policy mode
// (no FencedLease webhook is installed there), the FencedLease webhook in
// webhook mode, or the CRD's validation (byCRD).
func checkLease(t *testing.T, h *harness, what string, err error, refusal string, byCRD bool) {
	t.Helper()
	if refusal == "" {
		if err != nil {
			t.Errorf("%s: refused, want accepted: %v", what, err)
		}
		return
	}
	if err == nil {
		t.Errorf("%s: accepted, want refused (%s)", what, refusal)
		return
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		t.Errorf("%s: not an API status: %v", what, err)
		return
	}
	msg := st.Status().Message
	if !strings.Contains(msg, refusal) {
		t.Errorf("%s: message %q does not contain %q", what, msg, refusal)
	}
	via := `admission webhook "vfencedlease-v1alpha1.kb.io"`
	if h.mode == operator.EnforcementPolicy {
		via = "ValidatingAdmissionPolicy '" + policy.LeasePolicyName + "'"
	}
	switch {
	case byCRD && !apierrors.IsInvalid(err):
		t.Errorf("%s: refused with %d, want the CRD's validation (422): %s", what, st.Status().Code, msg)
	case !byCRD && (!apierrors.IsForbidden(err) || !strings.Contains(msg, via)):
		t.Errorf("%s: refused, but not by %s with 403: %d %s", what, via, st.Status().Code, msg)
	}
}

// runFutureStamp: alice renews lease ns/stamp (L = 2 s) with a renewTime an
// hour ahead and then goes silent, bob waits. In webhook mode the FencedLease
// webhook refuses the stamp (its clock bound). In policy mode no admission
// check can (CEL has no clock), so the policy accepts it, and the
// controller's clamp (Timing.ClampStamps) keeps it from extending her
// tenure: bob is granted the lease within seconds, not an hour.
func runFutureStamp(t *testing.T, h *harness) {
	r := &leaseRules{h: h, ns: h.namespace(t, nil), users: map[string]client.Client{"alice": h.users["alice"], "bob": h.users["bob"]}}
	must(t, r.create("alice", "stamp", func(l *coordv1alpha1.FencedLease) {
		l.Spec.LeaseDurationSeconds = 2
		l.Spec.Requests = []coordv1alpha1.LeaseRequest{request("alice", "alice")}
	}))
	testenv.Within(t, 10*time.Second, "alice holds ns/stamp", func() error {
		if r.get(t, "stamp").Status.HolderIdentity != "alice" {
			return errors.New("not yet")
		}
		return nil
	})
	must(t, r.update(t, "bob", "stamp", func(l *coordv1alpha1.FencedLease) { l.Spec.Requests = append(l.Spec.Requests, request("bob", "bob")) }))
	err := r.update(t, "alice", "stamp", renewing("alice", func(*metav1.MicroTime) *metav1.MicroTime { return stamp(time.Now().Add(time.Hour)) }))
	if h.mode != operator.EnforcementPolicy {
		checkLease(t, h, "a renewal stamped an hour ahead", err, "is later than the webhook's clock", false)
		return
	}
	checkLease(t, h, "a renewal stamped an hour ahead (no clock in CEL: accepted)", err, "", false)
	renewed := time.Now()
	testenv.Within(t, 15*time.Second, "bob is granted ns/stamp after alice's expiry, despite her stamp", func() error {
		if l := r.get(t, "stamp"); l.Status.HolderIdentity != "bob" {
			return fmt.Errorf("holder %q", l.Status.HolderIdentity)
		}
		return nil
	})
	if d := time.Since(renewed); d < 2*time.Second {
		t.Errorf("bob was granted %v after alice's last renewal, before L = 2 s", d)
	}
}

// runRequeuedHolder: a released holder's identity, queued again by someone
// else before the controller ended the tenure, does not carry the tenure on
// (docs/design.md, "Which request carries the tenure"). alice leads lease
// ns/held and writes object y, bob waits. The reconciler stops while the
// webhooks keep serving (a leader hand-off: the other replicas still serve
// admission); alice's elector releases. Admission refuses mallory's
// request under the identity alice, which status still names as holder.
// A request that admission did not judge (an earlier release's admitted
// it; here the controller's own user appends it) is not alice's tenure
// either: mallory's DELETE of y is refused before a controller runs again,
// and once one does, bob, queued first, is granted the lease and her
// DELETE is still refused.
func runRequeuedHolder(t *testing.T, h *harness) {
	ns := h.namespace(t, nil)
	h.lease(t, ns, "held", 30)
	alice, _ := h.lead(t, "alice", ns, "held")
	must(t, fence.NewFencedClient(h.users["alice"], "held", alice.el).Create(h.ctx, widget(ns, "y", "", "", "alice")))
	bob := h.elect(t, "bob", ns, "held")
	r := &leaseRules{h: h, ns: ns, users: h.clients()}
	testenv.Within(t, 10*time.Second, "bob is queued behind alice", func() error {
		if l := r.get(t, "held"); coordv1alpha1.RequestIndex(l.Spec.Requests, "bob") < 0 {
			return errors.New("not yet")
		}
		return nil
	})

	h.stopOperator()
	webhooksOnly := h.options()
	webhooksOnly.Reconciler = false
	h.runOperator(t, webhooksOnly)
	alice.stop()
	testenv.Within(t, 10*time.Second, "alice's elector withdraws her request", func() error {
		if l := r.get(t, "held"); coordv1alpha1.RequestIndex(l.Spec.Requests, "alice") >= 0 || l.Status.HolderIdentity != "alice" {
			return fmt.Errorf("requests %v, holder %q", l.Spec.Requests, l.Status.HolderIdentity)
		}
		return nil
	})
	queue := func(l *coordv1alpha1.FencedLease) {
		l.Spec.Requests = append(l.Spec.Requests, request("alice", "mallory"))
	}
	checkLease(t, h, "mallory queues under the identity alice, which status names as the holder after alice withdrew",
		r.update(t, "mallory", "held", queue), "queues the identity status.holderIdentity still names as the holder", false)
	if l := r.get(t, "held"); coordv1alpha1.RequestIndex(l.Spec.Requests, "alice") < 0 {
		must(t, r.update(t, "admin", "held", queue))
	}

	y := widget(ns, "y", "", "", "")
	must(t, h.admin.Get(h.ctx, client.ObjectKeyFromObject(y), y))
	before := notHolder(ns + "/held") // the table still names alice's user
	if h.mode == operator.EnforcementWebhook {
		before = staleRefusal("lease " + ns + "/held has no holder") // the live read
	}
	check(t, h, "mallory deletes y under alice's tenure, her request made again by mallory", h.users["mallory"].Delete(h.ctx, y.DeepCopy()), before)

	h.stopOperator()
	h.runOperator(t, h.options())
	h.leads(t, bob, 30*time.Second, "bob, queued first, is granted ns/held once a controller runs")
	check(t, h, "mallory deletes y once bob holds the lease", h.users["mallory"].Delete(h.ctx, y.DeepCopy()), notHolder(ns+"/held"))
	if l := r.get(t, "held"); l.Status.HolderUser != "bob" || coordv1alpha1.RequestIndex(l.Spec.Requests, "alice") < 0 {
		t.Errorf("after the grant to bob: status.holderUser %q, requests %v; want bob, and mallory's request waiting", l.Status.HolderUser, l.Spec.Requests)
	}
}

// clients are the harness's users' clients, and the admin's as "admin" (a
// controller user: admission does not judge its writes).
func (h *harness) clients() map[string]client.Client {
	out := map[string]client.Client{"admin": h.admin}
	for name, c := range h.users {
		out[name] = c
	}
	return out
}
