package enforcement_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/controllers/policy"
	"github.com/kubefence/kubefence/pkg/fence"
	"github.com/kubefence/kubefence/test/testenv"
)

// namespaceController is the user kube-controller-manager's namespace
// controller acts as with --use-service-account-credentials, a default
// clean-up user.
const namespaceController = "system:serviceaccount:kube-system:namespace-controller"

// runNamespaceDeletion deletes a namespace holding a held lease, guarded
// Widgets and (in policy mode) its tenure table, and plays the namespace
// controller's part by hand (envtest runs none; test/cleanup runs the real
// one): the namespace stays Terminating, the namespace controller deletes
// the table first (the order it deletes resource types in is not fixed),
// then the Widgets, then the lease. Its deletes and finalizer updates are
// accepted in both modes, and the lease's epoch finalizer completes; a
// non-holder's writes are still refused (safety review 2026-12-01, finding
// 5: in policy mode the bindings' parameterNotFoundAction: Deny refused the
// clean-up deletes once the table was gone, and the finalizer kept trying to
// create the table in the terminating namespace). The namespace is labelled
// kubefence.io/fencing=required and holds an unguarded Widget from before
// the label, which the required binding judged the same way.
func runNamespaceDeletion(t *testing.T, h *harness) {
	t.Helper()
	s := h.situation(t, nil)
	ns := s.ns
	must(t, h.admin.Create(h.ctx, widget(ns, "free", "", "", "admin")))
	must(t, h.admin.Patch(h.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, client.RawPatch(types.MergePatchType,
		fmt.Appendf(nil, `{"metadata":{"labels":{%q:"required"}}}`, coordv1alpha1.FencingNamespaceLabel))))
	for _, name := range []string{"w1", "w2", "w3"} {
		must(t, h.users["bob"].Create(h.ctx, widget(ns, name, "job", tok(s.current), "bob")))
	}
	// A guarded pod bound to node n1 (envtest runs no kubelet: the test
	// plays it).
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "on-n1",
		Labels:      map[string]string{coordv1alpha1.GuardLeaseLabel: "job"},
		Annotations: map[string]string{coordv1alpha1.FencingTokenAnnotation: tok(s.current)}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}}}
	must(t, h.users["bob"].Create(h.ctx, pod))
	// w2 is being deleted, held by a finalizer (a foreground cascade's, or
	// another controller's) that only a clean-up user may remove.
	w := s.get(t, "w2")
	w.SetFinalizers([]string{"example.kubefence.io/cascade"})
	must(t, h.users["bob"].Update(h.ctx, w))
	must(t, h.users["bob"].Delete(h.ctx, widget(ns, "w2", "", "", "")))
	must(t, h.admin.Delete(h.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	var nsObj corev1.Namespace
	must(t, h.admin.Get(h.ctx, client.ObjectKey{Name: ns}, &nsObj))
	if nsObj.Status.Phase != corev1.NamespaceTerminating {
		t.Fatalf("namespace %s is %s after its deletion, want Terminating", ns, nsObj.Status.Phase)
	}
	nsc := h.cleanupUser(t, namespaceController)

	// The table goes first (the namespace controller may delete ConfigMaps
	// before anything else).
	err := nsc.Delete(h.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: coordv1alpha1.TenureTableName}})
	if h.mode == operator.EnforcementPolicy {
		check(t, h, "namespace deletion: the namespace controller deletes the tenure table", err, accepted)
	} else if !apierrors.IsNotFound(err) {
		t.Errorf("namespace deletion in webhook mode: deleting a tenure table: %v, want not found", err)
	}

	// A guarded Widget and the unguarded one of the required kind: the
	// namespace controller retries with backoff, so a refusal may pass a
	// moment later, not forever.
	for _, name := range []string{"w1", "free"} {
		testenv.Within(t, 10*time.Second, "namespace deletion: the namespace controller deletes Widget "+name+" after the table", func() error {
			return client.IgnoreNotFound(nsc.Delete(h.ctx, widget(ns, name, "", "", "")))
		})
	}
	// The guarded pod: the namespace controller deletes it gracefully, and
	// its node's kubelet reports its status and finishes the deletion (the
	// node rule; in policy mode TerminatingPolicy judges it, without a table).
	check(t, h, "namespace deletion: the namespace controller deletes a guarded pod bound to a node", nsc.Delete(h.ctx, pod), accepted)
	n1 := h.nodeUser(t, "n1")
	check(t, h, "namespace deletion: the pod's node writes its status", n1.Status().Patch(h.ctx, &corev1.Pod{ObjectMeta: pod.ObjectMeta},
		client.RawPatch(types.StrategicMergePatchType, []byte(`{"status":{"phase":"Failed"}}`))), accepted)
	if err := h.nodeUser(t, "n2").Delete(h.ctx, pod, client.GracePeriodSeconds(0)); err == nil {
		t.Errorf("namespace deletion: another node's final DELETE of the guarded pod was accepted")
	}
	check(t, h, "namespace deletion: the pod's node's final DELETE (grace period 0)", n1.Delete(h.ctx, pod, client.GracePeriodSeconds(0)), accepted)
	if err := h.admin.Get(h.ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace deletion: the guarded pod is still there after its node's final DELETE: %v", err)
	}
	check(t, h, "namespace deletion: the namespace controller removing a finalizer", nsc.Patch(h.ctx, widget(ns, "w2", "", "", ""),
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))), accepted)
	if err := h.admin.Get(h.ctx, client.ObjectKey{Namespace: ns, Name: "w2"}, widget(ns, "w2", "", "", "")); !apierrors.IsNotFound(err) {
		t.Errorf("namespace deletion: w2 is still there once its finalizer was removed: %v", err)
	}
	// A non-holder is refused as before. A holder's write, in policy mode,
	// is refused too once the table is gone: a terminating namespace accepts
	// only clean-up writes there (docs/design.md, "A terminating namespace").
	w = s.get(t, "w3")
	_ = unstructured.SetNestedField(w.Object, "alice", "spec", "writer")
	if err := h.users["alice"].Update(h.ctx, w); err == nil {
		t.Errorf("namespace deletion: a non-holder's update of a guarded Widget was accepted")
	}
	if err := h.users["alice"].Delete(h.ctx, widget(ns, "w3", "", "", "")); err == nil {
		t.Errorf("namespace deletion: a non-holder's delete of a guarded Widget was accepted")
	}
	_ = unstructured.SetNestedField(w.Object, "namespace-controller", "spec", "writer")
	if err := nsc.Update(h.ctx, w); err == nil {
		t.Errorf("namespace deletion: the namespace controller's update of a guarded Widget's spec was accepted")
	}

	// The lease: its epoch finalizer completes without the table.
	s.bob.stop()
	must(t, nsc.Delete(h.ctx, &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "job"}}))
	testenv.Within(t, 20*time.Second, "namespace deletion: the lease's epoch finalizer completes without the tenure table", func() error {
		var l coordv1alpha1.FencedLease
		err := h.admin.Get(h.ctx, client.ObjectKey{Namespace: ns, Name: "job"}, &l)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return errors.New("still there, finalizers " + fmt.Sprint(l.Finalizers))
	})
	testenv.Within(t, 10*time.Second, "namespace deletion: the namespace controller deletes the last guarded Widget", func() error {
		return client.IgnoreNotFound(nsc.Delete(h.ctx, widget(ns, "w3", "", "", "")))
	})
}

// runMarkedLiveNamespace: policy mode's mark of a namespace being deleted
// (policy.TerminatingLabel) takes its guarded objects out of the fencing
// policy; set by hand on a live namespace, it admits nothing more than the
// fencing policy would: the holder's write is refused with a message naming
// the label, and accepted again once the label is gone.
func runMarkedLiveNamespace(t *testing.T, h *harness) {
	t.Helper()
	s := h.situation(t, nil)
	s.obj = "w"
	must(t, h.users["bob"].Create(h.ctx, widget(s.ns, s.obj, "job", tok(s.current), "bob")))
	label := func(value string) {
		must(t, h.admin.Patch(h.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns}}, client.RawPatch(types.MergePatchType,
			fmt.Appendf(nil, `{"metadata":{"labels":{%q:%s}}}`, policy.TerminatingLabel, value))))
	}
	write := func(writer string) error {
		w := s.get(t, s.obj)
		_ = unstructured.SetNestedField(w.Object, writer, "spec", "writer")
		return h.users["bob"].Update(h.ctx, w)
	}
	label(`"true"`)
	testenv.Within(t, 10*time.Second, "a live namespace marked terminating by hand: the holder's write refused", func() error {
		err := write("bob-marked")
		if err == nil {
			return errors.New("accepted")
		}
		if want := "is labelled " + policy.TerminatingLabel + " but is not being deleted"; !strings.Contains(err.Error(), want) {
			return fmt.Errorf("refused, but the message does not contain %q: %w", want, err)
		}
		return nil
	})
	if err := fence.NewFencedClient(h.users["alice"], "job", fixedToken(s.stale)).Update(h.ctx, s.get(t, s.obj)); err == nil ||
		!strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policy.TerminatingPolicyName+"'") {
		t.Errorf("a live namespace marked terminating by hand: a stale token: %v, want refused by %s", err, policy.TerminatingPolicyName)
	}
	label("null")
	testenv.Within(t, 10*time.Second, "the mark removed: the holder's write accepted again", func() error { return write("bob-unmarked") })
}
