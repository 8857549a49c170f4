package tenure_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence"
	"github.com/kubefence/kubefence/pkg/fence/protocol"
	"github.com/kubefence/kubefence/test/testenv"
)

// keepRequest is DisableReleaseOnCancel: stopping the Elector leaves its
// request, as a crashed process does.
func keepRequest(c *fence.Config) { c.DisableReleaseOnCancel = true }

// tokenOf is the token r's Elector hands out, 0 when it does not lead.
func tokenOf(r *runningElector) func() int64 {
	return func() int64 { t, _ := r.el.Token(); return t }
}

var _ = Describe("Two processes with one identity never share a token", func() {
	// The lease cannot tell two processes with one holderIdentity apart (a
	// restarted process finding its predecessor's request, a zombie after a
	// force-delete, two replicas configured alike); an Elector can: it leads
	// only the request it appended, as its own writes left it.
	// Renewal-sensitive: the first process keeps its tenure by renewing, then
	// stops renewing; one case per renewal kind.
	for _, r := range testenv.Renewals {
		It("a fresh Elector does not lead a tenure of its identity that another process holds; it queues its own once that ended, with a new token ("+string(r)+" renewals)", func() {
			ns := newNamespace()
			newLease(ns, "job", 4)
			first := startElector("alice", ns, "job", keepRequest, renewing(r, "first-session"))
			n := first.leading()

			second := startElector("alice", ns, "job", renewing(r, "second-session"))
			Consistently(tokenOf(second), 3*time.Second, 50*time.Millisecond).Should(BeZero(),
				"a second process with identity alice leads the tenure (token %d) the first one holds", n)
			Expect(tokenOf(first)()).To(Equal(n), "the first process was disturbed")

			By("the first process dies holding the lease: its request stays until the controller expires it")
			first.stop()
			Eventually(tokenOf(second), 20*time.Second).Should(BeNumerically(">", n),
				"the second process is granted a tenure of its own, with a newer token")
			l := getLease(ns, "job")
			Expect(l.Status.PreviousHolder).NotTo(BeNil())
			Expect(l.Status.PreviousHolder.FencingToken).To(Equal(n))
			Expect(l.Status.PreviousHolder.Reason).To(BeElementOf(coordv1alpha1.EndReasonExpired, coordv1alpha1.EndReasonSuperseded),
				"the first tenure ended by the controller's expiry (superseded once granted again), not by a release")
		})
	}

	It("an Elector whose request another process renews steps down, and leaves the request to it", func() {
		ns, alice, n := leadsNew("alice")
		By("another process with identity alice (and her user) renews her request")
		Eventually(func() error {
			l := getLease(ns, "job")
			p, err := protocol.RenewPatch(l, "alice", time.Now())
			if err != nil {
				return err
			}
			return users["alice"].Patch(suiteCtx, l, p)
		}).Should(Succeed())
		Eventually(tokenOf(alice), 5*time.Second).Should(BeZero(), "the Elector keeps leading token %d with another process renewing its request", n)
		Consistently(tokenOf(alice), time.Second, 50*time.Millisecond).Should(BeZero(), "the Elector leads token %d again", n)
		l := getLease(ns, "job")
		Expect(coordv1alpha1.RequestIndex(l.Spec.Requests, "alice")).To(BeNumerically(">=", 0), "the request was withdrawn under the other process")
		Expect(l.Status.HolderIdentity).To(Equal("alice"))
		Expect(l.Status.FencingToken).To(Equal(n))
	})

	for _, kind := range testenv.Renewals {
		It("the same Elector run again continues the tenure it kept (a restart inside one process; "+string(kind)+" renewals)", func() {
			ns := newNamespace()
			newLease(ns, "job", 30)
			r := startElector("alice", ns, "job", keepRequest, renewing(kind, "alice-session"))
			n := r.leading()
			r.stop()
			Expect(tokenOf(r)()).To(BeZero())
			again := runElector(r.el)
			Expect(again.leading()).To(Equal(n), "the same Elector, run again, leads its kept tenure with the same token")
		})
	}
})
