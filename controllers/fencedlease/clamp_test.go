package fencedlease

import (
	"testing"
	"time"
)

// In policy mode no admission check bounds renewTime by a clock (CEL has
// none), so the controller trusts a stamp only up to its own observation of
// the renewal: a holder that stamps its last renewal an hour ahead is still
// expired at that observation + L + allowance. Without ClampStamps (webhook
// mode, where the FencedLease webhook refuses such a stamp) the stamp would
// move the expiry an hour later.
func TestClampStampsFutureStampCannotExtendTenure(t *testing.T) {
	for _, clamp := range []bool{true, false} {
		s := newSim(t, 10, 0)
		s.timing.ClampStamps = clamp
		renewedAnHourAhead(s)
		observed := s.clock.Now()
		s.clock.Step(10*time.Second + s.timing.Allowance(10*time.Second))
		s.reconcile()
		h, _ := s.holder()
		switch {
		case clamp && h != "b":
			t.Errorf("ClampStamps: holder %q %v after the observation of a renewal stamped an hour ahead, want b (the stamp may not extend the tenure)", h, s.clock.Since(observed))
		case !clamp && h != "a":
			t.Errorf("without ClampStamps: holder %q, want a (the stamp counts; this case shows the clamp is what expires a)", h)
		}
	}
}
