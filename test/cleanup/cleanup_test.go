package cleanup_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/hack/devenv"
	"github.com/kubefence/kubefence/pkg/fence"
	"github.com/kubefence/kubefence/test/testenv"
)

// TestCleanupWithKubeControllerManager runs every case once per credential
// mode of kube-controller-manager, whose clean-up users differ: with
// --use-service-account-credentials the namespace controller and the garbage
// collector act as their own service accounts (fencing.DefaultCleanupUsers);
// without it they act as system:kube-controller-manager, which is not a
// default: there a namespace holding guarded objects stays Terminating until
// that user is configured as a clean-up user (--fencing-cleanup-user).
func TestCleanupWithKubeControllerManager(t *testing.T) {
	testenv.SkipIfShort(t)
	for _, mode := range []struct {
		name  string
		useSA bool
	}{{"service-account-credentials", true}, {"shared-credentials", false}} {
		t.Run(mode.name, func(t *testing.T) {
			cleanup.use(variantDefault)
			k := startKCM(t, mode.useSA)
			waitForGarbageCollector(t, k)
			if !mode.useSA {
				t.Run("namespace stays Terminating until system:kube-controller-manager is a clean-up user", namespaceStuckUntilConfigured)
				cleanup.use(variantKCM)
			}
			// In parallel, each in a namespace of its own; kube-controller-manager
			// stops when they all have ended.
			t.Run("namespace deletion finishes", parallel(namespaceDeletionFinishes))
			t.Run("foreground cascade finishes", parallel(foregroundCascadeFinishes))
			t.Run("orphan cascade finishes", parallel(orphanCascadeFinishes))
			t.Run("stale holder cannot delete through a guarded owner", parallel(staleHolderThroughOwner))
		})
	}
}

func parallel(f func(*testing.T)) func(*testing.T) {
	return func(t *testing.T) {
		t.Parallel()
		f(t)
	}
}

func widget(ns, name string) *unstructured.Unstructured {
	return testenv.GuardedWidget(ns, name, "", "", "init")
}

func configMap(ns, name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"k": "v"}}
}

// ownedBy makes obj a dependant of owner (blocking the owner's foreground deletion).
func ownedBy(obj client.Object, owner client.Object) client.Object {
	gvk := owner.GetObjectKind().GroupVersionKind()
	obj.SetOwnerReferences([]metav1.OwnerReference{{
		APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: owner.GetName(), UID: owner.GetUID(),
		BlockOwnerDeletion: ptr.To(true),
	}})
	return obj
}

func newNamespace(t *testing.T, prefix string) string {
	t.Helper()
	ns, err := cluster.Namespace(suiteCtx, prefix)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return ns
}

func newLease(t *testing.T, ns, name string) {
	t.Helper()
	NewWithT(t).Expect(admin.Create(suiteCtx, &coordv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: 30},
	})).To(Succeed())
}

// elector is a pkg/fence Elector of one user, running until stopped or t ends.
type elector struct {
	el   *fence.Elector
	stop func()
}

func startElector(t *testing.T, user, ns, lease string) *elector {
	t.Helper()
	ctx, cancel := context.WithCancel(suiteCtx)
	el, err := fence.New(fence.Config{
		Client: users[user], Namespace: ns, Name: lease, Identity: user, User: user,
		Callbacks: fence.Callbacks{OnStartedLeading: func(ctx context.Context, _ int64) { <-ctx.Done() }},
	})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = el.Run(ctx)
	}()
	stop := func() {
		cancel() // withdraws the request (releases a held lease)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Errorf("the elector of %s did not stop within 15 s", user)
		}
	}
	t.Cleanup(stop)
	return &elector{el: el, stop: stop}
}

func (e *elector) leading(t *testing.T) int64 {
	t.Helper()
	var tok int64
	NewWithT(t).Eventually(func() bool { var ok bool; tok, ok = e.el.Token(); return ok }).
		WithTimeout(20 * time.Second).WithPolling(20 * time.Millisecond).Should(BeTrue())
	return tok
}

// warnedClient is user's client, recording the warnings it is given.
func warnedClient(t *testing.T, user string) (client.WithWatch, *testenv.Warnings) {
	t.Helper()
	cl, w, err := cluster.Warned(userConfigs[user])
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return cl, w
}

func gone(g Gomega, obj client.Object) {
	err := admin.Get(suiteCtx, client.ObjectKeyFromObject(obj), obj)
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s %s still exists (err %v)", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), err)
}

func exists(g Gomega, obj client.Object) {
	g.Expect(admin.Get(suiteCtx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
}

// waitForGarbageCollector waits until kube-controller-manager's garbage
// collector acts: it deletes the dependant of a deleted (unguarded) owner.
func waitForGarbageCollector(t *testing.T, k *kcm) {
	g := NewWithT(t)
	ns := newNamespace(t, "gc-ready")
	owner := configMap(ns, "owner")
	g.Expect(admin.Create(suiteCtx, owner)).To(Succeed())
	owner.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	dep := ownedBy(configMap(ns, "dep"), owner)
	g.Expect(admin.Create(suiteCtx, dep)).To(Succeed())
	g.Expect(admin.Delete(suiteCtx, owner)).To(Succeed())
	start := time.Now()
	g.Eventually(func(g Gomega) { k.running(t); gone(g, configMap(ns, "dep")) }).
		WithTimeout(60 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	t.Logf("garbage collector acting after %v", time.Since(start).Round(time.Millisecond))
}

// heldLease is a new namespace with lease "job" held by user; it returns
// the namespace and user's fenced client.
func heldLease(t *testing.T, prefix, user string) (string, *fence.FencedClient) {
	t.Helper()
	ns := newNamespace(t, prefix)
	newLease(t, ns, "job")
	e := startElector(t, user, ns, "job")
	e.leading(t)
	return ns, e.el.Client(users[user])
}

// guardedNamespace is a namespace with lease "job" held by alice and guarded
// Widgets and ConfigMaps written by her.
func guardedNamespace(t *testing.T, prefix string) string {
	t.Helper()
	g := NewWithT(t)
	ns, fa := heldLease(t, prefix, "alice")
	for _, name := range []string{"a", "b"} {
		g.Expect(fa.Create(suiteCtx, widget(ns, name))).To(Succeed())
		g.Expect(fa.Create(suiteCtx, configMap(ns, name))).To(Succeed())
	}
	return ns
}

func namespaceDeletionFinishes(t *testing.T) {
	g := NewWithT(t)
	ns := guardedNamespace(t, "ns-delete")
	start := time.Now()
	g.Expect(admin.Delete(suiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	g.Eventually(func(g Gomega) { gone(g, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}) }).
		WithTimeout(60*time.Second).WithPolling(100*time.Millisecond).Should(Succeed(), "namespace %s did not finish terminating", ns)
	t.Logf("namespace with a held FencedLease, guarded Widgets and ConfigMaps deleted in %v", time.Since(start).Round(time.Millisecond))
}

// namespaceStuckUntilConfigured: without --use-service-account-credentials
// the namespace controller is system:kube-controller-manager, whom the
// defaults do not exempt: its deletes of guarded objects are refused and the
// namespace stays Terminating, until the operator names that user a clean-up
// user (cleanup.use(variantKCM) is --fencing-cleanup-user).
func namespaceStuckUntilConfigured(t *testing.T) {
	g := NewWithT(t)
	ns := guardedNamespace(t, "ns-stuck")
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	g.Expect(admin.Delete(suiteCtx, nsObj)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(admin.Get(suiteCtx, client.ObjectKeyFromObject(nsObj), nsObj)).To(Succeed())
		var msg string
		for _, c := range nsObj.Status.Conditions {
			if c.Type == corev1.NamespaceDeletionContentFailure && c.Status == corev1.ConditionTrue {
				msg = c.Message
			}
		}
		g.Expect(msg).To(ContainSubstring(kcmUser+" is not the holder of lease "+ns+"/job"),
			"the namespace controller's deletes of guarded objects were not refused")
	}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	exists(g, widget(ns, "a"))
	exists(g, configMap(ns, "a"))
	g.Expect(nsObj.Status.Phase).To(Equal(corev1.NamespaceTerminating))

	cleanup.use(variantKCM)
	// Wake the namespace controller (it backs off after failures).
	g.Expect(admin.Patch(suiteCtx, nsObj, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"cleanup.test/poke":"1"}}}`)))).To(Succeed())
	g.Eventually(func(g Gomega) { gone(g, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}) }).
		WithTimeout(60*time.Second).WithPolling(100*time.Millisecond).Should(Succeed(), "namespace %s did not finish terminating once %s was a clean-up user", ns, kcmUser)
}

// cascade is a guarded owner Widget with a guarded Widget and a guarded
// ConfigMap depending on it, written by bob, the holder of lease "job".
func cascade(t *testing.T, prefix string) (fb *fence.FencedClient, owner *unstructured.Unstructured, deps []client.Object) {
	t.Helper()
	g := NewWithT(t)
	ns, fb := heldLease(t, prefix, "bob")
	owner = widget(ns, "owner")
	g.Expect(fb.Create(suiteCtx, owner)).To(Succeed())
	owner.SetGroupVersionKind(devenv.WidgetGVK)
	deps = []client.Object{ownedBy(widget(ns, "dep"), owner), ownedBy(configMap(ns, "dep"), owner)}
	for _, d := range deps {
		g.Expect(fb.Create(suiteCtx, d)).To(Succeed())
	}
	return fb, owner, deps
}

func foregroundCascadeFinishes(t *testing.T) {
	g := NewWithT(t)
	fb, owner, deps := cascade(t, "foreground")
	start := time.Now()
	g.Expect(fb.Delete(suiteCtx, owner, client.PropagationPolicy(metav1.DeletePropagationForeground))).To(Succeed())
	// The garbage collector deletes the dependants, then removes the owner's
	// foregroundDeletion finalizer (an UPDATE of only finalizers).
	g.Eventually(func(g Gomega) {
		for _, d := range deps {
			gone(g, d)
		}
		gone(g, widget(owner.GetNamespace(), owner.GetName()))
	}).WithTimeout(45*time.Second).WithPolling(100*time.Millisecond).Should(Succeed(), "the foreground cascade did not finish")
	t.Logf("foreground cascade finished in %v", time.Since(start).Round(time.Millisecond))
}

func orphanCascadeFinishes(t *testing.T) {
	g := NewWithT(t)
	fb, owner, deps := cascade(t, "orphan")
	start := time.Now()
	g.Expect(fb.Delete(suiteCtx, owner, client.PropagationPolicy(metav1.DeletePropagationOrphan))).To(Succeed())
	// The garbage collector strips the ownerReference of each dependant (an
	// UPDATE of only ownerReferences), then removes the owner's orphan finalizer.
	g.Eventually(func(g Gomega) { gone(g, widget(owner.GetNamespace(), owner.GetName())) }).
		WithTimeout(45*time.Second).WithPolling(100*time.Millisecond).Should(Succeed(), "the orphan cascade did not finish")
	for _, d := range deps {
		exists(g, d)
		g.Expect(d.GetOwnerReferences()).To(BeEmpty(), "%s kept its ownerReference", d.GetName())
		g.Expect(d.GetLabels()).To(HaveKeyWithValue(coordv1alpha1.GuardLeaseLabel, "job"), "%s lost its guard", d.GetName())
	}
	t.Logf("orphan cascade finished in %v", time.Since(start).Round(time.Millisecond))
}

// staleHolderThroughOwner: alice held lease "job" and wrote a guarded owner
// with a guarded dependant, and a guarded dependant of an unguarded owner;
// she loses the lease to bob. Her DELETE of the guarded owner is refused, so
// the garbage collector never deletes its dependant. Her DELETE of the
// unguarded owner is accepted and the garbage collector deletes its guarded
// dependant: the documented residual, of which the webhook warned her when
// she created the dependant.
func staleHolderThroughOwner(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t, "stale-owner")
	newLease(t, ns, "job")
	alice := startElector(t, "alice", ns, "job")
	n := alice.leading(t)
	bob := startElector(t, "bob", ns, "job")
	wc, warned := warnedClient(t, "alice")
	fa := alice.el.Client(wc)

	guardedOwner := widget(ns, "guarded-owner")
	g.Expect(fa.Create(suiteCtx, guardedOwner)).To(Succeed())
	guardedOwner.SetGroupVersionKind(devenv.WidgetGVK)
	viaGuarded := ownedBy(configMap(ns, "via-guarded"), guardedOwner)
	g.Expect(fa.Create(suiteCtx, viaGuarded)).To(Succeed())

	freeOwner := configMap(ns, "free-owner")
	g.Expect(users["alice"].Create(suiteCtx, freeOwner)).To(Succeed())
	freeOwner.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	viaFree := ownedBy(configMap(ns, "via-free"), freeOwner)
	g.Expect(fa.Create(suiteCtx, viaFree)).To(Succeed())
	g.Expect(warned.All()).To(ContainElement(And(
		ContainSubstring("ConfigMap "+ns+"/via-free is guarded by lease job and owned by ConfigMap/free-owner"),
		ContainSubstring("guard the owner with lease job too"))),
		"no admission warning on creating a guarded object with an unguarded owner")
	g.Expect(warned.All()).To(ContainElement(ContainSubstring("ConfigMap " + ns + "/via-guarded is guarded by lease job and owned by Widget/guarded-owner")))

	// Alice loses the lease: once bob's request is queued, alice stops
	// (withdrawing hers) and bob is granted a newer token.
	g.Eventually(func(g Gomega) {
		l := &coordv1alpha1.FencedLease{}
		g.Expect(admin.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: "job"}, l)).To(Succeed())
		var queued []string
		for _, r := range l.Spec.Requests {
			queued = append(queued, r.HolderIdentity)
		}
		g.Expect(queued).To(ContainElement("bob"))
	}).WithTimeout(20 * time.Second).WithPolling(20 * time.Millisecond).Should(Succeed())
	alice.stop()
	g.Expect(bob.leading(t)).To(BeNumerically(">", n))

	for _, policy := range []metav1.DeletionPropagation{metav1.DeletePropagationBackground, metav1.DeletePropagationForeground, metav1.DeletePropagationOrphan} {
		err := users["alice"].Delete(suiteCtx, widget(ns, "guarded-owner"), client.PropagationPolicy(policy))
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a stale holder deleted a guarded owner (%s): %v", policy, err)
		g.Expect(fence.IsStale(err)).To(BeTrue(), "refusal not typed as stale: %v", err)
		g.Expect(err.Error()).To(ContainSubstring("alice is not the holder of lease " + ns + "/job"))
	}

	// The residual: an unguarded owner's deletion is not fenced, and the
	// garbage collector (exempt) deletes its guarded dependant.
	g.Expect(users["alice"].Delete(suiteCtx, freeOwner)).To(Succeed())
	g.Eventually(func(g Gomega) { gone(g, configMap(ns, "via-free")) }).
		WithTimeout(45 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	// By now the garbage collector has acted: the guarded owner and its
	// dependant are still there, unchanged.
	exists(g, guardedOwner)
	g.Expect(guardedOwner.GetDeletionTimestamp()).To(BeNil())
	exists(g, viaGuarded)
	g.Expect(viaGuarded.GetOwnerReferences()).To(HaveLen(1))
	g.Expect(strings.Join(warned.All(), "\n")).NotTo(BeEmpty())
}
