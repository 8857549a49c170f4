package operator_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/kubefence/kubefence/pkg/fence/timing"
	"github.com/kubefence/kubefence/test/testenv"
)

var _ = Describe("The operator's clock contract", func() {
	// A 50 s lease against an operator with --max-commit-lag=3s and
	// --webhook-clock-skew=1s: the client's least margin is
	// max(min(S + C, L/10), S + B/2) + 2S = 4 + 2 = 6 s, above L/10 = 5 s.
	// With either value left at its default (the client's own, unset), it
	// would be 5 s: the deadline shows that both published values count.
	It("publishes its commit lag and skew in the grant, and a client configured with neither counts its deadline with them", func() {
		ns := newNamespace()
		const seconds = 50
		lag, skew := 3*time.Second, time.Second
		want := seconds*time.Second - 6*time.Second
		Expect(timing.Margin(seconds*time.Second, 0, skew, lag)).To(Equal(6 * time.Second))
		Expect(timing.Margin(seconds*time.Second, 0, timing.DefaultSkew, lag)).To(Equal(5 * time.Second))
		Expect(timing.Margin(seconds*time.Second, 0, skew, timing.DefaultCommitLag)).To(Equal(5 * time.Second))

		o := cluster.Operator()
		o.Timing.CommitLag, o.WebhookSkew = lag, skew
		m, err := cluster.StartController(suiteCtx, o, nil)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { Expect(m.Stop(30 * time.Second)).To(Succeed()) })

		newLease(ns, "published", seconds, 0)
		j := &testenv.Journal{}
		alice := startElector("alice", ns, "published", "alice", j) // no MaxCommitLag, no ClockSkew
		DeferCleanup(alice.stop)
		Eventually(j.Identities, 10*time.Second).Should(Equal([]string{"alice"}))

		st := getLease(ns, "published").Status
		Expect(st.MaxCommitLagMilliseconds).To(Equal(int64(3000)))
		Expect(st.ClockSkewMilliseconds).To(Equal(int64(1000)))
		// The deadline counts from the acknowledging renewal's send time, which
		// its renewTime stamp records (the same clock, read just before).
		var stamp time.Time
		for _, r := range getLease(ns, "published").Spec.Requests {
			if r.HolderIdentity == "alice" && r.RenewTime != nil {
				stamp = r.RenewTime.Time
			}
		}
		Expect(stamp.IsZero()).To(BeFalse(), "alice's acknowledging renewal carries no renewTime")
		Expect(alice.Deadline().Sub(stamp)).To(BeNumerically("~", want, 100*time.Millisecond),
			"alice's deadline is not sent + L - 6s (the published skew and commit lag)")
	})
})
