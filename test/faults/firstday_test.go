package faults

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kubefence/kubefence/pkg/fence"
	"github.com/kubefence/kubefence/test/testenv"
)

// A candidate that cannot queue because the kubefence webhook is down (the
// API server's call to it is refused, failurePolicy Fail) says so: a log line
// with reason unreachable and the hint to check the operator,
// kubefence_client_lease_errors_total{reason="unreachable"}, and Ready failing
// with "request not queued: unreachable"; it retries with back-off and leads
// once the webhook is back (2026-12-01 ecosystem review, gap 4).
func TestFirstDayWebhookDown(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	startController(t, controllerOptions{})
	newLease(g, ns, "job", 10)
	kill(t, webhookMgr)
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			restartWebhooks(t)
		}
	})

	var mu sync.Mutex
	var lines []string
	logged := func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(lines, "\n")
	}
	reg := prometheus.NewRegistry()
	m, err := fence.NewMetrics(reg)
	g.Expect(err).NotTo(HaveOccurred())
	j := &testenv.Journal{}
	e, err := fence.New(fence.Config{
		Client: users["alice"], User: "alice", Namespace: ns, Name: "job", Identity: "alice", Metrics: m,
		Callbacks: fence.Callbacks{OnStartedLeading: func(ctx context.Context, token int64) {
			i := j.Started("alice", token)
			<-ctx.Done()
			j.Stopped(i)
		}},
	})
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(logf.IntoContext(suiteCtx, funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, args)
	}, funcr.Options{})))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = e.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })

	g.Eventually(logged, 20*time.Second).Should(And(ContainSubstring("FencedLease queue failed"),
		ContainSubstring(`"reason"="unreachable"`), ContainSubstring("failed calling webhook"), ContainSubstring("kubectl fence check")))
	g.Expect(e.Ready(nil)).To(MatchError(ContainSubstring("request not queued: unreachable: ")))
	g.Expect(leaseErrors(g, reg, fence.ReasonUnreachable)).To(BeNumerically(">=", 1))

	restartWebhooks(t)
	restarted = true
	g.Eventually(j.Identities, 30*time.Second).Should(Equal([]string{"alice"}))
	g.Expect(e.Ready(nil)).To(Succeed())
}

// leaseErrors is kubefence_client_lease_errors_total for reason in reg.
func leaseErrors(g Gomega, reg prometheus.Gatherer, reason string) float64 {
	n, ok, err := testenv.LeaseErrors(reg, reason)
	g.Expect(err).NotTo(HaveOccurred())
	if !ok {
		return -1
	}
	return n
}
