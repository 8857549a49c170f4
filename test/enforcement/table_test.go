package enforcement_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/controllers/policy"
	"github.com/kubefence/kubefence/pkg/fence"
	"github.com/kubefence/kubefence/test/ruletable"
	"github.com/kubefence/kubefence/test/testenv"
)

// widget is a Widget to create: testenv.GuardedWidget.
var widget = testenv.GuardedWidget

func tok(n int64) string { return strconv.FormatInt(n, 10) }

// outcome is what a write of a scenario must meet, the same in both modes:
// accepted, or refused with a message containing msg, which fence.IsStale
// recognises (stale) or not. The fencing rule's own cases are
// test/ruletable's rows (runFencingRows).
type outcome struct {
	allowed bool
	stale   bool
	msg     string
}

var accepted = outcome{allowed: true}

func staleRefusal(msg string) outcome { return outcome{stale: true, msg: msg} }
func plainRefusal(msg string) outcome { return outcome{msg: msg} }
func notHolder(lease string) outcome {
	return staleRefusal(coordv1alpha1.NotHolderMarker + " " + lease)
}
func staleToken(token int64) outcome {
	return staleRefusal(fmt.Sprintf("%s %d", coordv1alpha1.StaleMarker, token))
}

func check(t *testing.T, h *harness, what string, err error, want outcome) {
	t.Helper()
	if want.allowed {
		if err != nil {
			t.Errorf("%s: refused, want accepted: %v", what, err)
		}
		return
	}
	if err == nil {
		t.Errorf("%s: accepted, want refused (%s)", what, want.msg)
		return
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		t.Errorf("%s: not an API status: %v", what, err)
		return
	}
	if !strings.Contains(st.Status().Message, want.msg) {
		t.Errorf("%s: message %q does not contain %q", what, st.Status().Message, want.msg)
	}
	if got := fence.IsStale(err); got != want.stale {
		t.Errorf("%s: fence.IsStale = %v, want %v (code %d: %s)", what, got, want.stale, st.Status().Code, st.Status().Message)
	}
}

// situation is the seeds' situation on lease "job" in a namespace of its own:
// alice held it with token stale and released it; bob holds it with current.
type situation struct {
	h              *harness
	ns             string
	stale, current int64
	bob            *elector
	// obj is the Widget a scenario writes.
	obj string
}

func (h *harness) situation(t *testing.T, labels map[string]string) *situation {
	t.Helper()
	s := &situation{h: h, ns: h.namespace(t, labels)}
	h.lease(t, s.ns, "job", 30)
	alice, stale := h.lead(t, "alice", s.ns, "job")
	alice.stop()
	bob, current := h.lead(t, "bob", s.ns, "job")
	if current <= stale {
		t.Fatalf("bob's token %d is not above alice's %d", current, stale)
	}
	s.stale, s.current, s.bob = stale, current, bob
	return s
}

func (s *situation) get(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	u := widget(s.ns, name, "", "", "")
	must(t, s.h.admin.Get(s.h.ctx, types.NamespacedName{Namespace: s.ns, Name: name}, u))
	return u
}

func (h *harness) cleanupUser(t *testing.T, name string) client.WithWatch {
	t.Helper()
	if c, ok := h.users[name]; ok {
		return c
	}
	h.users[name] = h.user(t, name)
	return h.users[name]
}

// as is u's client: the harness's users, the clean-up users (envtest users
// of their names) and, for a pod-bound token, the admin impersonating u.
func (h *harness) as(t *testing.T, u ruletable.User) client.WithWatch {
	t.Helper()
	if u.Name == ruletable.Controller.Name {
		return h.admin
	}
	if u.Pod == "" {
		return h.cleanupUser(t, u.Name)
	}
	key := u.Name + "@" + u.Pod
	if c, ok := h.users[key]; ok {
		return c
	}
	c := h.impersonatingWatch(t, u.Name, u.Pod)
	h.users[key] = c
	return c
}

// nodeUser is a client of the kubelet of node: user system:node:<node> in
// group system:nodes (and kubefence:clients for the test's RBAC).
func (h *harness) nodeUser(t *testing.T, node string) client.WithWatch {
	t.Helper()
	name := coordv1alpha1.NodeUserPrefix + node
	if c, ok := h.users[name]; ok {
		return c
	}
	u, err := h.env.AddUser(envtest.User{Name: name, Groups: []string{coordv1alpha1.NodesGroup, "kubefence:clients"}}, nil)
	must(t, err)
	c, err := client.NewWithWatch(u.Config(), client.Options{Scheme: h.scheme})
	must(t, err)
	h.users[name] = c
	return c
}

// runNodeRows: the node rule on a guarded Pod bound to node n1
// (docs/design.md, "Guarded Pods on real nodes"). Its kubelet writes the
// pod's /status and, once the holder's DELETE has started the deletion,
// finishes it with grace period 0, as a kubelet does; another node, and the
// pod's own node before the deletion started, are refused as non-holders.
// A clean-up user may write the pod's /status too.
// envtest runs no kubelet, so the pod stays Terminating until the node's
// final DELETE.
func runNodeRows(t *testing.T, h *harness, s *situation) {
	n1, n2 := h.nodeUser(t, "n1"), h.nodeUser(t, "n2")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "on-n1",
		Labels:      map[string]string{coordv1alpha1.GuardLeaseLabel: "job"},
		Annotations: map[string]string{coordv1alpha1.FencingTokenAnnotation: tok(s.current)}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}}}
	must(t, h.users["bob"].Create(h.ctx, pod))
	// A kubelet's status patch: a strategic merge patch of status only.
	condition := func(c client.Client, kind string) error {
		body := fmt.Sprintf(`{"status":{"conditions":[{"type":"example.kubefence.io/%s","status":"True"}]}}`, kind)
		return c.Status().Patch(h.ctx, &corev1.Pod{ObjectMeta: pod.ObjectMeta}, client.RawPatch(types.StrategicMergePatchType, []byte(body)))
	}
	hasCondition := func(kind string) bool {
		var p corev1.Pod
		must(t, h.admin.Get(h.ctx, client.ObjectKeyFromObject(pod), &p))
		return slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool { return string(c.Type) == "example.kubefence.io/"+kind })
	}
	refused := notHolder(s.ns + "/job")

	check(t, h, "pods/status by the pod's node (system:node:n1), guard and token unchanged", condition(n1, "n1"), accepted)
	if !hasCondition("n1") {
		t.Errorf("the pod's node's status patch was accepted, but the pod has no condition example.kubefence.io/n1")
	}
	check(t, h, "pods/status by another node (system:node:n2)", condition(n2, "n2"), refused)
	if hasCondition("n2") {
		t.Errorf("another node's status patch was refused, but the pod has its condition")
	}
	// PodGC and taint eviction mark a pod (phase Failed, a DisruptionTarget
	// condition) before they delete it; where they are clean-up users, so
	// are their marks. The harness's clean-up users are the defaults.
	gc := h.cleanupUser(t, "system:serviceaccount:kube-system:generic-garbage-collector")
	check(t, h, "pods/status by a clean-up user, guard and token unchanged (PodGC's mark before its delete)", condition(gc, "gc"), accepted)
	if !hasCondition("gc") {
		t.Errorf("the clean-up user's status patch was accepted, but the pod has no condition example.kubefence.io/gc")
	}
	check(t, h, "DELETE by the pod's node before its deletion started", n1.Delete(h.ctx, pod), refused)
	must(t, h.users["bob"].Delete(h.ctx, pod, client.GracePeriodSeconds(30)))
	var p corev1.Pod
	must(t, h.admin.Get(h.ctx, client.ObjectKeyFromObject(pod), &p))
	if p.DeletionTimestamp == nil {
		t.Fatalf("the holder's graceful DELETE of a pod bound to a node did not leave it Terminating")
	}
	check(t, h, "DELETE by another node of a terminating pod", n2.Delete(h.ctx, pod, client.GracePeriodSeconds(0)), refused)
	check(t, h, "pods/status by the pod's node while it terminates", condition(n1, "terminating"), accepted)
	check(t, h, "the final DELETE by the pod's node (grace period 0) of a terminating pod", n1.Delete(h.ctx, pod, client.GracePeriodSeconds(0)), accepted)
	if err := h.admin.Get(h.ctx, client.ObjectKeyFromObject(pod), &p); !apierrors.IsNotFound(err) {
		t.Errorf("after the node's final DELETE the pod is still there (%v)", err)
	}
}

// rowSituation is where the cluster tier replays the fencing rows of one
// lease state and namespace (ruletable.LeaseState, ruletable.Where).
type rowSituation struct {
	h  *harness
	ns string
	tk ruletable.Tokens
}

// rowKey groups the rows that share a situation.
type rowKey struct {
	lease ruletable.LeaseState
	in    ruletable.Where
}

func keyOf(r ruletable.FencingRow) rowKey {
	in := r.Write.In
	if in == ruletable.Excluded {
		in = ruletable.Plain // it writes in the operator's namespace, which has no lease
	}
	return rowKey{r.Lease, in}
}

// objectName is the object row i writes with its path p.
func objectName(i, p int) string { return fmt.Sprintf("r%d-%d", i, p) }

// paths are the ways the cluster tier sends row r's write.
func paths(r ruletable.FencingRow) []ruletable.Path {
	if r.Write.Op == "UPDATE" && r.Write.Sub == "" && len(r.Write.Via) > 0 {
		return r.Write.Via
	}
	return []ruletable.Path{ruletable.Put}
}

// fencingSituation sets up key's situation on a fresh namespace: lease job
// held by alice (Stale), then by bob (Current), and lease other held by bob
// (Other); the stored object of every row (rows[i] with index idx[i]),
// created by the holder of its token while it held it (unguarded ones
// before the namespace is labelled for mandatory fencing); then the lease
// state of key.
func (h *harness) fencingSituation(t *testing.T, key rowKey, rows []ruletable.FencingRow, idx []int) *rowSituation {
	t.Helper()
	s := &rowSituation{h: h, ns: h.namespace(t, nil)}
	seed := func(token ruletable.Token, as ruletable.User) {
		for i, r := range rows {
			o := r.Write.Old
			if o == nil || o.Token != token || (token != ruletable.NoToken && o.Lease == "") || (token == ruletable.NoToken && o.Lease != "") {
				continue
			}
			for p := range paths(r) {
				obj := r.Write.Kind.Render(o, s.tk, s.ns, objectName(idx[i], p))
				must(t, h.as(t, as).Create(h.ctx, obj))
			}
		}
	}
	if key.lease == ruletable.NoLeases {
		seed(ruletable.NoToken, ruletable.Bob)
		return s
	}
	var bob *elector
	if key.lease == ruletable.PodBound {
		must(t, h.admin.Create(h.ctx, &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "job"},
			Spec: coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: 30, IdentityBinding: coordv1alpha1.IdentityBindingPod}}))
		pod := ruletable.BobFromPod("worker-1")
		bob = h.electAs(t, h.as(t, pod), "worker-1", "bob", s.ns, "job")
		s.tk.Current = h.leads(t, bob, 30*time.Second, "pod worker-1 of bob leads "+s.ns+"/job")
		seed(ruletable.Current, pod)
		return s
	}
	h.lease(t, s.ns, "job", 30)
	alice, stale := h.lead(t, "alice", s.ns, "job")
	s.tk.Stale = stale
	seed(ruletable.Stale, ruletable.Alice)
	alice.stop()
	bob, s.tk.Current = h.lead(t, "bob", s.ns, "job")
	h.lease(t, s.ns, "other", 30)
	_, s.tk.Other = h.lead(t, "bob", s.ns, "other")
	seed(ruletable.Current, ruletable.Bob)
	seed(ruletable.NoToken, ruletable.Bob)
	if key.in == ruletable.Required {
		must(t, h.admin.Patch(h.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns}}, client.RawPatch(types.MergePatchType,
			fmt.Appendf(nil, `{"metadata":{"labels":{%q:"required"}}}`, coordv1alpha1.FencingNamespaceLabel))))
		// The API server's admission reads namespaces from its cache.
		testenv.Within(t, 10*time.Second, "namespace "+s.ns+" requires fencing", func() error {
			if err := h.admin.Create(h.ctx, widget(s.ns, "probe", "", "", "admin"), client.DryRunAll); err == nil {
				return errors.New("an unguarded Widget is still accepted")
			}
			return nil
		})
	}
	// The API server's admission reads the tenure tables from its cache:
	// once a tenure ended, bob's token is refused for that, a moment later.
	ended := func(why string) {
		testenv.Within(t, 10*time.Second, "bob's token on "+s.ns+"/job is refused: "+why, func() error {
			probe := ruletable.Widget.Render(ruletable.Guarded(ruletable.Current), s.tk, s.ns, "probe")
			if err := h.users["bob"].Create(h.ctx, probe, client.DryRunAll); err == nil || !strings.Contains(err.Error(), why) {
				return fmt.Errorf("answered %v", err)
			}
			return nil
		})
	}
	switch key.lease {
	case ruletable.Released:
		bob.stop()
		testenv.Within(t, 20*time.Second, "bob's release of "+s.ns+"/job ends his tenure", func() error {
			return s.leaseIs(func(l *coordv1alpha1.FencedLease) bool { return l.Status.HolderIdentity == "" }, "")
		})
		ended("has no holder")
	case ruletable.Recreated:
		bob.stop()
		job := &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "job"}}
		must(t, h.admin.Delete(h.ctx, job))
		testenv.Within(t, 20*time.Second, "lease "+s.ns+"/job is deleted (its epoch recorded)", func() error {
			if err := h.admin.Get(h.ctx, client.ObjectKeyFromObject(job), job); !apierrors.IsNotFound(err) {
				return fmt.Errorf("still there: %v", err)
			}
			return nil
		})
		h.lease(t, s.ns, "job", 30)
		testenv.Within(t, 20*time.Second, "the new incarnation of "+s.ns+"/job starts above the old one's tokens", func() error {
			return s.leaseIs(func(l *coordv1alpha1.FencedLease) bool { return l.Status.TokenBase >= s.tk.Current }, "0")
		})
		if h.mode == operator.EnforcementPolicy {
			ended("was never issued") // the new incarnation's entry, token 0
		} else {
			ended("were issued before the lease was deleted and created again")
		}
	}
	return s
}

// leaseIs tells (nil) whether lease job is as ok says and, in policy mode,
// its tenure table entry is entry (if not "").
func (s *rowSituation) leaseIs(ok func(*coordv1alpha1.FencedLease) bool, entry string) error {
	var l coordv1alpha1.FencedLease
	if err := s.h.admin.Get(s.h.ctx, client.ObjectKey{Namespace: s.ns, Name: "job"}, &l); err != nil {
		return err
	}
	if !ok(&l) {
		return fmt.Errorf("status %+v", l.Status)
	}
	if s.h.mode != operator.EnforcementPolicy {
		return nil
	}
	var cm corev1.ConfigMap
	if err := s.h.admin.Get(s.h.ctx, client.ObjectKey{Namespace: s.ns, Name: coordv1alpha1.TenureTableName}, &cm); err != nil {
		return err
	}
	if got := policy.EntryOf(&cm, "job"); (entry == "" && strings.Contains(got, " ")) || (entry != "" && got != entry) {
		return fmt.Errorf("the tenure table's entry of job is %q", got)
	}
	return nil
}

// runFencingRows replays the fencing rule's table (ruletable.FencingRows,
// but the rows marked UnitOnly) on the API server, in the harness's mode:
// every write path of every row gets the row's verdict, and a refused write
// changes nothing.
func runFencingRows(t *testing.T, h *harness) {
	var keys []rowKey
	rows := map[rowKey][]ruletable.FencingRow{}
	idx := map[rowKey][]int{}
	for i, r := range ruletable.FencingRows() {
		if r.UnitOnly != "" {
			continue
		}
		k := keyOf(r)
		if _, ok := rows[k]; !ok {
			keys = append(keys, k)
		}
		rows[k] = append(rows[k], r)
		idx[k] = append(idx[k], i)
	}
	for _, k := range keys {
		s := h.fencingSituation(t, k, rows[k], idx[k])
		for i, r := range rows[k] {
			for p, path := range paths(r) {
				s.run(t, r, objectName(idx[k][i], p), path)
			}
		}
	}
}

// run sends row r's write to object name by path and checks its verdict
// and what the object became.
func (s *rowSituation) run(t *testing.T, r ruletable.FencingRow, name string, path ruletable.Path) {
	t.Helper()
	w := r.Write
	what := r.Name
	if path != ruletable.Put {
		what += " (" + string(path) + ")"
	}
	ns := s.ns
	switch {
	case w.In == ruletable.Excluded:
		ns = operatorNamespace
	case w.Kind.ClusterScoped():
		ns = ""
	}
	c := s.h.as(t, w.As)
	ctx := s.h.ctx
	get := func() (*unstructured.Unstructured, error) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(w.Kind.GVK())
		return u, s.h.admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u)
	}
	var err error
	switch {
	case w.Op == "CREATE" && w.Sub == "eviction":
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		err = c.SubResource("eviction").Create(ctx, pod, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	case w.Op == "CREATE":
		err = c.Create(ctx, w.Kind.Render(w.New, s.tk, ns, name))
	case w.Op == "DELETE":
		err = c.Delete(ctx, w.Kind.Render(w.Old, s.tk, ns, name))
	default:
		stored, gerr := get()
		must(t, gerr)
		want := w.Kind.Render(w.New, s.tk, ns, name)
		switch w.Sub {
		case "scale":
			err = c.SubResource("scale").Update(ctx, stored, client.WithSubResourceBody(&autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 3}}))
		case "status", "ephemeralcontainers":
			// The written object: the stored one with the new metadata and
			// the new subresource's part.
			stored.SetLabels(want.GetLabels())
			stored.SetAnnotations(want.GetAnnotations())
			for _, field := range [][]string{{"status"}, {"spec", "ephemeralContainers"}} {
				if v, ok, _ := unstructured.NestedFieldCopy(want.Object, field...); ok {
					_ = unstructured.SetNestedField(stored.Object, v, field...)
				}
			}
			if w.Sub == "status" {
				err = c.Status().Update(ctx, stored)
			} else {
				err = c.SubResource(w.Sub).Update(ctx, stored)
			}
		default:
			err = s.send(c, stored, want, w.Old, path)
		}
	}
	if p := r.Check(s.h.mode, err, s.tk, ns); p != "" {
		t.Errorf("%s: %s", what, p)
		return
	}
	if w.Op == "CREATE" && w.Sub != "eviction" {
		return
	}
	// What the object is now: the new version if accepted, gone if
	// deleted (or being deleted), the old one if refused.
	u, gerr := get()
	gone := apierrors.IsNotFound(gerr) || (gerr == nil && u.GetDeletionTimestamp() != nil)
	if gerr != nil && !apierrors.IsNotFound(gerr) {
		t.Errorf("%s: reading the object after the write: %v", what, gerr)
		return
	}
	allowed := r.For(s.h.mode).Allowed
	deletes := w.Op == "DELETE" || w.Sub == "eviction"
	switch {
	case allowed && deletes:
		if !gone {
			t.Errorf("%s: accepted, but the object is still there", what)
		}
	case gone:
		t.Errorf("%s: the object is gone (allowed: %v)", what, allowed)
	case allowed:
		same(t, what, u, w.Kind.Render(w.New, s.tk, ns, name), w.Sub, 3)
	default:
		same(t, what, u, w.Kind.Render(w.Old, s.tk, ns, name), w.Sub, 1)
	}
}

// send sends an UPDATE of stored to want by path.
func (s *rowSituation) send(c client.Client, stored, want *unstructured.Unstructured, old *ruletable.Object, path ruletable.Path) error {
	ctx := s.h.ctx
	switch path {
	case ruletable.Put:
		stored.SetLabels(want.GetLabels())
		stored.SetAnnotations(want.GetAnnotations())
		stored.SetFinalizers(want.GetFinalizers())
		for _, field := range []string{"spec", "data"} {
			if v, ok := want.Object[field]; ok {
				stored.Object[field] = v
			}
		}
		return c.Update(ctx, stored)
	case ruletable.Apply:
		b, err := json.Marshal(want.Object)
		if err != nil {
			return err
		}
		return c.Patch(ctx, stored, client.RawPatch(types.ApplyPatchType, b), client.FieldOwner("ruletable"), client.ForceOwnership)
	}
	// The patches set the new metadata and data, and remove what the old
	// version had and the new one has not.
	meta := func(get func(*unstructured.Unstructured) map[string]string, oldKeys []string) map[string]any {
		m := map[string]any{}
		for _, k := range oldKeys {
			m[k] = nil
		}
		for k, v := range get(want) {
			m[k] = v
		}
		return m
	}
	oldLabels, oldAnnotations := []string{coordv1alpha1.GuardLeaseLabel}, []string{coordv1alpha1.FencingTokenAnnotation}
	if old.Lease == "" {
		oldLabels = nil
	}
	if old.Token == ruletable.NoToken {
		oldAnnotations = nil
	}
	labels := meta((*unstructured.Unstructured).GetLabels, oldLabels)
	annotations := meta((*unstructured.Unstructured).GetAnnotations, oldAnnotations)
	body := map[string]any{"metadata": map[string]any{"labels": labels, "annotations": annotations}}
	for _, field := range []string{"spec", "data"} {
		if v, ok := want.Object[field]; ok {
			body[field] = v
		}
	}
	pt := types.MergePatchType
	switch path {
	case ruletable.StrategicMerge:
		pt = types.StrategicMergePatchType
	case ruletable.JSONPatch:
		pt = types.JSONPatchType
		var ops []map[string]any
		for _, k := range slices.Sorted(maps.Keys(labels)) {
			ops = append(ops, jsonPatchOp("/metadata/labels/", k, labels[k]))
		}
		for _, k := range slices.Sorted(maps.Keys(annotations)) {
			ops = append(ops, jsonPatchOp("/metadata/annotations/", k, annotations[k]))
		}
		if writer, ok, _ := unstructured.NestedString(want.Object, "spec", "writer"); ok {
			ops = append(ops, map[string]any{"op": "replace", "path": "/spec/writer", "value": writer})
		}
		b, err := json.Marshal(ops)
		if err != nil {
			return err
		}
		return c.Patch(ctx, stored, client.RawPatch(pt, b))
	}
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	return c.Patch(ctx, stored, client.RawPatch(pt, b))
}

// jsonPatchOp sets (or removes, for nil) key under prefix.
func jsonPatchOp(prefix, key string, value any) map[string]any {
	path := prefix + strings.NewReplacer("~", "~0", "/", "~1").Replace(key)
	if value == nil {
		return map[string]any{"op": "remove", "path": path}
	}
	return map[string]any{"op": "add", "path": path, "value": value}
}

// same checks that the stored object u has want's guard, token, writer and
// finalizers and, for a subresource write, want's part of it (on /scale:
// replicas).
func same(t *testing.T, what string, u, want *unstructured.Unstructured, sub string, replicas int64) {
	t.Helper()
	of := func(o *unstructured.Unstructured) string {
		tok, hasTok := o.GetAnnotations()[coordv1alpha1.FencingTokenAnnotation]
		v := fmt.Sprintf("lease %q, token %q (%v), writer %v%v, finalizers %v", o.GetLabels()[coordv1alpha1.GuardLeaseLabel], tok, hasTok,
			nested(o, "spec", "writer"), nested(o, "data", "writer"), o.GetFinalizers())
		switch sub {
		case "status":
			// What a row's status write sets (ruletable.Object.Phase): the
			// rest of a status is the API server's (a pod's phase).
			switch want.GetKind() {
			case "Widget":
				v += fmt.Sprintf(", status.phase %v", nested(o, "status", "phase"))
			case "Deployment":
				v += fmt.Sprintf(", status.observedGeneration %v", nested(o, "status", "observedGeneration"))
			}
		case "ephemeralcontainers":
			var names []any
			list, _, _ := unstructured.NestedSlice(o.Object, "spec", "ephemeralContainers")
			for _, c := range list {
				names = append(names, c.(map[string]any)["name"])
			}
			v += fmt.Sprintf(", ephemeral containers %v", names)
		}
		return v
	}
	got, exp := of(u), of(want)
	if sub == "scale" {
		got += fmt.Sprintf(", replicas %v", nested(u, "spec", "replicas"))
		exp += fmt.Sprintf(", replicas %v", replicas)
	}
	if got != exp {
		t.Errorf("%s: the object is %s, want %s", what, got, exp)
	}
}

func nested(o *unstructured.Unstructured, path ...string) any {
	v, _, _ := unstructured.NestedFieldCopy(o.Object, path...)
	return v
}

func TestFencingTable(t *testing.T) {
	for _, mode := range []string{operator.EnforcementWebhook, operator.EnforcementPolicy} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel() // a control plane of its own
			h := start(t, mode)
			// Each step that leaves the operator running is a subtest: its
			// electors stop (and withdraw their requests) when it ends, while
			// the webhooks serve. Stopped after runOperatorDown instead, each
			// would retry its withdrawal against the fail-closed webhook
			// (about 90 s in all, in webhook mode).
			t.Run("fencing rows", func(t *testing.T) { runFencingRows(t, h) })
			t.Run("node rows", func(t *testing.T) { runNodeRows(t, h, h.situation(t, nil)) })
			t.Run("expiry", func(t *testing.T) { runExpiry(t, h) })
			t.Run("lease rows", func(t *testing.T) { runLeaseRows(t, h) })
			t.Run("future stamp", func(t *testing.T) { runFutureStamp(t, h) })
			t.Run("namespace deletion", func(t *testing.T) { runNamespaceDeletion(t, h) })
			runRequeuedHolder(t, h) // stops and restarts the operator
			if mode == operator.EnforcementPolicy {
				t.Run("policy mode's own claims", func(t *testing.T) { runPolicyOnly(t, h) })
				t.Run("marked live namespace", func(t *testing.T) { runMarkedLiveNamespace(t, h) })
			}
			runOperatorDown(t, h) // last: it stops the operator
		})
	}
}
