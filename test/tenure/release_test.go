package tenure_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	rl "k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence/resourcelock"
	"github.com/kubefence/kubefence/test/testenv"
)

// grantRevision watches lease ns/name and returns, once it comes, the
// revision at which identity was granted.
func grantRevision(ns, name, identity string) <-chan int64 {
	w, err := cluster.Admin.Watch(suiteCtx, &coordv1alpha1.FencedLeaseList{}, client.InNamespace(ns))
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

var _ = Describe("A write admitted again after its client gave up commits before the next grant", func() {
	// kube-apiserver runs admission inside GuaranteedUpdate's compare-and-
	// swap: when another write commits first, a patch without a
	// resourceVersion is admitted again, with a live lease read. alice's
	// write A is given up on (her context ends) while its first admission's
	// answer is delayed, on a connection that does not carry the give-up to
	// the API server (a partition, a proxy: otherwise the server's request
	// context ends with it); her write B, sent just before, commits first,
	// so A is admitted again after the give-up and commits about 2 s after B.
	// Waiting the commit lag after the give-up and then withdrawing (the
	// former rule) let bob be granted before A's commit; the release now
	// keeps the request after a write without an answer, and bob is granted
	// only once alice's tenure expired.
	// Renewal-sensitive: the kept request must expire, so the release must
	// stop the renewals, heartbeats included; one case per renewal kind.
	for _, r := range testenv.Renewals {
		It("keeps the request: pkg/fence Elector.Release ("+string(r)+" renewals)", func() {
			ns := newNamespace()
			newLease(ns, "job", 10)
			alice := startElector("alice", ns, "job", renewing(r, "alice-session"))
			n := alice.leading()
			fa := alice.el.Client(users["alice"])
			Expect(fa.Create(suiteCtx, widget(ns, "x"))).To(Succeed())
			startElector("bob", ns, "job", renewing(r, "bob-session"))
			Eventually(func() int { return len(getLease(ns, "job").Spec.Requests) }).Should(Equal(2))
			granted := grantRevision(ns, "job", "bob")
			// The revision at which A's change shows.
			w, err := cluster.Admin.Watch(suiteCtx, widget(ns, "x"), client.InNamespace(ns))
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(w.Stop)
			aCommitted := make(chan int64, 1)
			go func() {
				for ev := range w.ResultChan() {
					if u, ok := ev.Object.(*unstructured.Unstructured); ok && u.GetName() == "x" && u.GetLabels()["a"] == "yes" {
						r, _ := strconv.ParseInt(u.GetResourceVersion(), 10, 64)
						aCommitted <- r
						return
					}
				}
			}()

			answerDelay.Store(int64(2 * time.Second))
			DeferCleanup(answerDelay.Store, int64(0))
			bDone := make(chan error, 1)
			go func() { bDone <- fa.Patch(suiteCtx, widget(ns, "x"), mergePatch(`{"spec":{"writer":"alice-b"}}`)) }()
			time.Sleep(300 * time.Millisecond)
			_, cfg, err := cluster.User("alice", "kubefence:clients")
			Expect(err).NotTo(HaveOccurred())
			cfg = rest.CopyConfig(cfg)
			cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return detached{rt} })
			cut, err := client.NewWithWatch(cfg, client.Options{Scheme: cluster.Scheme})
			Expect(err).NotTo(HaveOccurred())
			actx, cancel := context.WithTimeout(suiteCtx, 500*time.Millisecond)
			err = alice.el.Client(cut).Patch(actx, widget(ns, "x"), mergePatch(`{"metadata":{"labels":{"a":"yes"}}}`))
			cancel()
			Expect(err).To(HaveOccurred(), "alice's write A returned before its delayed answer")
			start := time.Now()
			Expect(alice.el.Release(suiteCtx)).To(Succeed())
			GinkgoWriter.Printf("release returned after %v\n", time.Since(start))
			Expect(<-bDone).To(Succeed())

			var a, g int64
			Eventually(aCommitted, 10*time.Second).Should(Receive(&a), "alice's write A never committed: it was not admitted again, the test shows nothing")
			Eventually(granted, 30*time.Second).Should(Receive(&g))
			GinkgoWriter.Printf("alice's token-%d write A committed at revision %d; bob granted at %d\n", n, a, g)
			Expect(a).To(BeNumerically("<", g), "alice's write A with token %d committed at revision %d, after bob's grant at %d", n, a, g)
			Expect(getLease(ns, "job").Status.PreviousHolder.Reason).NotTo(Equal(coordv1alpha1.EndReasonReleased), "alice's tenure ended by her withdraw")
		})
	}
})

// detached sends each request on without its context's cancellation: the
// caller gives up when its context ends, the API server goes on serving the
// request (a connection that does not carry the give-up to it).
type detached struct{ rt http.RoundTripper }

func (d detached) RoundTrip(r *http.Request) (*http.Response, error) {
	type result struct {
		resp *http.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := d.rt.RoundTrip(r.WithContext(context.WithoutCancel(r.Context())))
		done <- result{resp, err}
	}()
	select {
	case res := <-done:
		return res.resp, res.err
	case <-r.Context().Done():
		go func() {
			if res := <-done; res.resp != nil {
				_, _ = io.Copy(io.Discard, res.resp.Body)
				_ = res.resp.Body.Close()
			}
		}()
		return nil, r.Context().Err()
	}
}
