package tenure_test

import (
	"context"
	"strconv"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	rl "k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence/resourcelock"
)

// grantRevision watches lease ns/name and returns, once it comes, the
// revision at which identity was granted.
func grantRevision(ns, name, identity string) <-chan int64 {
	w, err := k8sClient.Watch(suiteCtx, &coordv1alpha1.FencedLeaseList{}, client.InNamespace(ns))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(w.Stop)
	rv := make(chan int64, 1)
	go func() {
		for ev := range w.ResultChan() {
			if l, ok := ev.Object.(*coordv1alpha1.FencedLease); ok && l.Name == name && l.Status.HolderIdentity == identity {
				r, _ := strconv.ParseInt(l.ResourceVersion, 10, 64)
				rv <- r
				return
			}
		}
	}()
	return rv
}

// announcing wraps c so that sent is closed when its first Update is about
// to go to the API server: a FencedClient has taken the token for it by then.
func announcing(c client.WithWatch, sent chan struct{}) client.WithWatch {
	var once sync.Once
	return interceptor.NewClient(c, interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			once.Do(func() { close(sent) })
			return c.Update(ctx, obj, opts...)
		},
	})
}

var _ = Describe("A write in flight when the holder releases commits before the next grant", func() {
	// A release hands the lease over in the status write that sees the
	// request gone, without waiting: the helper withdraws only after every
	// write of the tenure returned. Each holder here has a write admitted
	// while it holds, whose answer the webhook delays by 1 s (so its commit
	// too), in flight when it releases; bob waits in the queue.
	type releasing struct {
		name string
		// lead makes alice lead lease ns/job; it returns her token, a fenced
		// client on c, and her release.
		lead func(ns string, c client.WithWatch) (token int64, fc client.Client, release func() error)
	}
	for _, h := range []releasing{
		{"pkg/fence Elector.Release", func(ns string, c client.WithWatch) (int64, client.Client, func() error) {
			alice := startElector("alice", ns, "job")
			return alice.leading(), alice.el.Client(c), func() error { return alice.el.Release(suiteCtx) }
		}},
		{"pkg/fence/resourcelock (client-go's ReleaseOnCancel: Update with an empty record)", func(ns string, c client.WithWatch) (int64, client.Client, func() error) {
			lock, err := resourcelock.New(resourcelock.Config{Client: users["alice"], Namespace: ns, Name: "job", Identity: "alice", User: "alice"})
			Expect(err).NotTo(HaveOccurred())
			Eventually(func() error { // as client-go's elector tries: read, then update
				if _, _, err := lock.Get(suiteCtx); err != nil {
					return err
				}
				return lock.Update(suiteCtx, rl.LeaderElectionRecord{HolderIdentity: "alice"})
			}).Should(Succeed())
			tok, ok := lock.Token()
			Expect(ok).To(BeTrue())
			return tok, lock.Client(c), func() error { return lock.Update(suiteCtx, rl.LeaderElectionRecord{}) }
		}},
	} {
		It("waits for it: "+h.name, func() {
			ns := newNamespace()
			newLease(ns, "job", 30)
			sent := make(chan struct{})
			n, fa, release := h.lead(ns, announcing(users["alice"], sent))
			Expect(fa.Create(suiteCtx, widget(ns, "x"))).To(Succeed()) // a Create: not announced
			startElector("bob", ns, "job")
			Eventually(func() int { return len(getLease(ns, "job").Spec.Requests) }).Should(Equal(2))
			granted := grantRevision(ns, "job", "bob")

			answerDelay.Store(int64(time.Second))
			DeferCleanup(answerDelay.Store, int64(0))
			type result struct {
				err error
				rv  int64
			}
			written := make(chan result, 1)
			go func() {
				x := getWidget(ns, "x")
				_ = unstructured.SetNestedField(x.Object, "alice", "spec", "writer")
				err := fa.Update(suiteCtx, x)
				rv, _ := strconv.ParseInt(x.GetResourceVersion(), 10, 64)
				written <- result{err, rv}
			}()
			Eventually(sent).Should(BeClosed())
			Expect(release()).To(Succeed())

			var w result
			Eventually(written).Should(Receive(&w))
			Expect(w.err).NotTo(HaveOccurred(), "alice's write with token %d, in flight before her release, was refused", n)
			var g int64
			Eventually(granted).Should(Receive(&g))
			GinkgoWriter.Printf("alice's token-%d write committed at revision %d; bob granted at %d\n", n, w.rv, g)
			Expect(w.rv).To(BeNumerically("<", g), "alice's write with token %d committed at revision %d, after bob's grant at %d", n, w.rv, g)
			Expect(getWidget(ns, "x").GetAnnotations()[coordv1alpha1.FencingTokenAnnotation]).To(Equal(strconv.FormatInt(n, 10)))
		})
	}
})
