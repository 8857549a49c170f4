package operator_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/fencedlease"
)

// shards lists the epoch store's shards in ns.
func shards(ns string) []corev1.ConfigMap {
	var list corev1.ConfigMapList
	Expect(k8sClient.List(suiteCtx, &list, client.InNamespace(ns),
		client.MatchingLabels{coordv1alpha1.EpochStoreLabel: "shard"})).To(Succeed())
	return list.Items
}

// newStore is an epoch store written by the test's client.
func newStore() *fencedlease.EpochStore {
	return &fencedlease.EpochStore{Reader: k8sClient, Writer: k8sClient}
}

var _ = Describe("Epoch store", func() {
	It("holds 100,000 lease names of one namespace with every object under 512 KiB", func() {
		ns := newNamespace()
		store := newStore()
		// 63 characters: the longest key stored as the name itself, so the
		// worst case for size (longer names are hashed to 33 characters).
		name := func(i int) string { return fmt.Sprintf("%s-%06d", strings.Repeat("x", 56), i) }
		const n = 100_000
		tokens := make(map[string]int64, n)
		for i := range n {
			tokens[name(i)] = int64(1_000_000_000 + i)
		}
		start := time.Now()
		Expect(store.RecordAll(suiteCtx, ns, tokens)).To(Succeed())
		GinkgoWriter.Printf("recorded %d names in %s\n", n, time.Since(start))

		items := shards(ns)
		Expect(items).To(HaveLen(coordv1alpha1.EpochShards))
		entries, largest := 0, 0
		for i := range items {
			raw, err := json.Marshal(&items[i])
			Expect(err).NotTo(HaveOccurred())
			Expect(len(raw)).To(BeNumerically("<", 512<<10), "shard %s", items[i].Name)
			Expect(fencedlease.EpochShardBytes(&items[i])).To(BeNumerically("<=", fencedlease.EpochShardBudget))
			e, err := fencedlease.EpochShardEntries(&items[i])
			Expect(err).NotTo(HaveOccurred())
			entries += len(e)
			largest = max(largest, len(raw))
		}
		Expect(entries).To(Equal(n))
		GinkgoWriter.Printf("%d shards, largest %d bytes\n", len(items), largest)
		for _, i := range []int{0, 1, 4242, 77_777, n - 1} {
			Expect(store.Get(suiteCtx, ns, name(i))).To(Equal(int64(1_000_000_000 + i)))
		}
		Expect(store.Get(suiteCtx, ns, name(n))).To(Equal(int64(0)), "a name never recorded")
	})

	It("raises and never lowers an entry with Record alone, under concurrent writers to one shard", func() {
		ns := newNamespace()
		store := newStore()
		Expect(store.Get(suiteCtx, ns, "a")).To(Equal(int64(0)))
		Expect(store.Record(suiteCtx, ns, "a", 5)).To(Succeed())
		Expect(store.Record(suiteCtx, ns, "a", 3)).To(Succeed())
		Expect(store.Get(suiteCtx, ns, "a")).To(Equal(int64(5)))
		Expect(store.Record(suiteCtx, ns, "a", 9)).To(Succeed())
		Expect(store.Get(suiteCtx, ns, "a")).To(Equal(int64(9)))

		// 16 names in the same shard, written at once: every write is an
		// optimistic-locked update, so none is lost.
		var same []string
		for i := 0; len(same) < 16; i++ {
			if n := fmt.Sprintf("n%d", i); coordv1alpha1.EpochShardName(n) == coordv1alpha1.EpochShardName("a") {
				same = append(same, n)
			}
		}
		var wg sync.WaitGroup
		for i, n := range same {
			wg.Go(func() {
				defer GinkgoRecover()
				Expect(store.Record(suiteCtx, ns, n, int64(100+i))).To(Succeed())
			})
		}
		wg.Wait()
		for i, n := range same {
			Expect(store.Get(suiteCtx, ns, n)).To(Equal(int64(100 + i)))
		}
		Expect(store.Get(suiteCtx, ns, "a")).To(Equal(int64(9)))
		Expect(shards(ns)).To(HaveLen(1))
	})

	It("stores a long name under a hash, and refuses a non-integer entry", func() {
		ns := newNamespace()
		store := newStore()
		long := strings.Repeat("l", 253)
		Expect(fencedlease.EpochKey(long)).To(HaveLen(33))
		Expect(store.Record(suiteCtx, ns, long, 77)).To(Succeed())
		Expect(store.Get(suiteCtx, ns, long)).To(Equal(int64(77)))
		Expect(store.Get(suiteCtx, ns, long[:252])).To(Equal(int64(0)))

		var cm corev1.ConfigMap
		Expect(k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: coordv1alpha1.EpochShardName(long)}, &cm)).To(Succeed())
		Expect(fencedlease.EpochShardEntries(&cm)).To(HaveKeyWithValue(fencedlease.EpochKey(long), int64(77)))
		cm.Data[coordv1alpha1.EpochDataKey] = fencedlease.EpochKey(long) + " seventy\n"
		Expect(k8sClient.Update(suiteCtx, &cm)).To(Succeed())
		_, err := store.Get(suiteCtx, ns, long)
		Expect(err).To(MatchError(ContainSubstring("non-negative integer")))
		Expect(store.Record(suiteCtx, ns, long, 80)).To(MatchError(ContainSubstring("non-negative integer")))
	})

	It("refuses to take a shard past its budget", func() {
		ns := newNamespace()
		store := newStore()
		// Fill one shard to its budget with hand-written filler entries.
		shard := coordv1alpha1.EpochShardName("victim")
		var filler strings.Builder
		// Filler lines are 55 bytes: at most 70 bytes of room stay, enough for
		// "victim 1" but not for a line of a 61-character name.
		for i := 0; filler.Len()+70 <= fencedlease.EpochShardBudget; i++ {
			fmt.Fprintf(&filler, "filler-%06d-%s 1\n", i, strings.Repeat("f", 40))
		}
		Expect(k8sClient.Create(suiteCtx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: shard, Labels: map[string]string{coordv1alpha1.EpochStoreLabel: "shard"}},
			Data:       map[string]string{coordv1alpha1.EpochDataKey: filler.String()},
		})).To(Succeed())
		Expect(store.Record(suiteCtx, ns, "victim", 1)).To(Succeed(), "room for one more entry")
		var big string
		for i := 0; ; i++ {
			if n := fmt.Sprintf("%s-%05d", strings.Repeat("b", 55), i); coordv1alpha1.EpochShardName(n) == shard {
				big = n
				break
			}
		}
		err := store.Record(suiteCtx, ns, big, 1)
		Expect(err).To(MatchError(fencedlease.ErrEpochShardFull))
		var cm corev1.ConfigMap
		Expect(k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: shard}, &cm)).To(Succeed())
		Expect(fencedlease.EpochShardBytes(&cm)).To(BeNumerically("<=", fencedlease.EpochShardBudget))
		Expect(store.Record(suiteCtx, ns, "victim", 2)).To(Succeed(), "raising an existing entry needs no room")
		Expect(store.Get(suiteCtx, ns, "victim")).To(Equal(int64(2)))
	})

	It("lets a namespace's deletion finish, and prunes its history with it", func() {
		ctrlProc := startController(false)
		DeferCleanup(ctrlProc.stop)
		ns := newNamespace()
		// Two names in different shards: one recorded while the namespace
		// lives, one whose shard would have to be created while it terminates.
		first, second := "phoenix", ""
		for i := 0; second == ""; i++ {
			if n := fmt.Sprintf("late-%d", i); coordv1alpha1.EpochShardName(n) != coordv1alpha1.EpochShardName(first) {
				second = n
			}
		}
		for _, n := range []string{first, second} {
			// A token floor gives the lease a token to record without a holder.
			Expect(k8sClient.Create(suiteCtx, &coordv1alpha1.FencedLease{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n},
				Spec:       coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: 10, MinFencingToken: 42},
			})).To(Succeed())
			Eventually(func() bool {
				return controllerutil.ContainsFinalizer(getLease(ns, n), coordv1alpha1.EpochFinalizer)
			}).Should(BeTrue())
		}
		store := newStore()
		Expect(k8sClient.Delete(suiteCtx, getLease(ns, first))).To(Succeed())
		Eventually(func() (int64, error) { return store.Get(suiteCtx, ns, first) }).Should(Equal(int64(42)))
		Eventually(func() bool {
			err := k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: first}, &coordv1alpha1.FencedLease{})
			return apierrors.IsNotFound(err)
		}).Should(BeTrue())
		Expect(shards(ns)).To(HaveLen(1))

		// Delete the namespace, then do what kube-controller-manager's
		// namespace controller does: delete its contents, then finalize it.
		var nsObj corev1.Namespace
		Expect(k8sClient.Get(suiteCtx, types.NamespacedName{Name: ns}, &nsObj)).To(Succeed())
		Expect(k8sClient.Delete(suiteCtx, &nsObj)).To(Succeed())
		Expect(k8sClient.Delete(suiteCtx, getLease(ns, second))).To(Succeed())
		Eventually(func() bool {
			err := k8sClient.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: second}, &coordv1alpha1.FencedLease{})
			return apierrors.IsNotFound(err)
		}).Should(BeTrue(), "the finalizer must not block on a shard it cannot create in a terminating namespace")
		Expect(shards(ns)).To(HaveLen(1), "no shard is created in a terminating namespace")
		Expect(k8sClient.DeleteAllOf(suiteCtx, &corev1.ConfigMap{}, client.InNamespace(ns))).To(Succeed())
		cs, err := kubernetes.NewForConfig(cluster.Config)
		Expect(err).NotTo(HaveOccurred())
		Expect(k8sClient.Get(suiteCtx, types.NamespacedName{Name: ns}, &nsObj)).To(Succeed())
		nsObj.Spec.Finalizers = nil
		_, err = cs.CoreV1().Namespaces().Finalize(suiteCtx, &nsObj, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(suiteCtx, types.NamespacedName{Name: ns}, &corev1.Namespace{}))
		}).Should(BeTrue())

		// Recreated with the same name: the history went with the namespace
		// (and so did every guarded object that could remember a token).
		Expect(k8sClient.Create(suiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		Expect(store.Get(suiteCtx, ns, first)).To(Equal(int64(0)))
		Expect(shards(ns)).To(BeEmpty())
	})
})

var _ = Describe("Epoch store RBAC", func() {
	It("works with the generated manager role alone, which names every shard and reads no other ConfigMap", func() {
		raw, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", "role.yaml"))
		Expect(err).NotTo(HaveOccurred())
		var role rbacv1.ClusterRole
		for _, doc := range strings.Split(string(raw), "\n---\n") {
			var r rbacv1.ClusterRole
			Expect(yaml.Unmarshal([]byte(doc), &r)).To(Succeed())
			if r.Kind == "ClusterRole" {
				role = r
			}
		}
		Expect(role.Rules).NotTo(BeEmpty())
		var named []string
		for _, rule := range role.Rules {
			if slices.Contains(rule.Resources, "configmaps") && len(rule.ResourceNames) > 0 {
				named = append(named, rule.ResourceNames...)
			}
		}
		want := map[string]bool{}
		for i := range 100_000 {
			want[coordv1alpha1.EpochShardName(fmt.Sprintf("lease-%d", i))] = true
		}
		Expect(want).To(HaveLen(coordv1alpha1.EpochShards))
		Expect(named).To(ConsistOf(slices.Collect(maps.Keys(want))))

		role.ObjectMeta = metav1.ObjectMeta{Name: "epoch-store-manager-role"}
		Expect(k8sClient.Create(suiteCtx, &role)).To(Succeed())
		Expect(k8sClient.Create(suiteCtx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "epoch-store-manager-role"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "epoch-operator"}},
		})).To(Succeed())
		u, err := cluster.Env.AddUser(envtest.User{Name: "epoch-operator"}, nil)
		Expect(err).NotTo(HaveOccurred())
		op, err := client.New(u.Config(), client.Options{Scheme: cluster.Scheme})
		Expect(err).NotTo(HaveOccurred())

		ns := newNamespace()
		Expect(k8sClient.Create(suiteCtx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant-data"}})).To(Succeed())
		store := &fencedlease.EpochStore{Reader: op, Writer: op}
		Eventually(func() error { return store.Record(suiteCtx, ns, "rbac", 11) }).Should(Succeed())
		Expect(store.Record(suiteCtx, ns, "rbac", 12)).To(Succeed())
		Expect(store.Get(suiteCtx, ns, "rbac")).To(Equal(int64(12)))
		err = op.Get(suiteCtx, types.NamespacedName{Namespace: ns, Name: "tenant-data"}, &corev1.ConfigMap{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the operator reads no ConfigMap but its shards: %v", err)
	})
})
