package observability_test

import (
	"testing"

	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/kubefence/kubefence/test/testenv"
)

// kubefence_webhook_clock_offset_seconds is sampled from the renewals of the
// operator's leader-election Lease (fencing.ClockSampler, which
// operator.Setup adds): the manager leads and renews it every 2 s on its
// clock, and its webhook reads that clock too, so within a few seconds the
// gauge holds a sample of an offset of 0 less a renewal's write and delivery
// time: a few milliseconds below 0. Fed from FencedLease reads, it stayed 0
// while no lease was read (and fell to minus a tenure's age once its holder
// renewed with stamps).
func TestClockOffsetGaugeSamplesTheLeaderElectionLease(t *testing.T) {
	testenv.SkipIfShort(t)
	var last float64
	eventually(t, "kubefence_webhook_clock_offset_seconds holds a sample of the leader-election Lease", func() bool {
		fams, err := crmetrics.Registry.Gather()
		v, ok := sample(fams, "kubefence_webhook_clock_offset_seconds", nil)
		last = v
		return err == nil && ok && v < 0 && v > -0.5
	})
	t.Logf("kubefence_webhook_clock_offset_seconds = %v", last)
}
