package fencedlease

import (
	"strings"
	"testing"
	"time"
)

// Validate refuses every setting that would break the expiry arithmetic. A
// commit lag of 0 (or less) is refused rather than read as "none": it would
// silently switch off every protection that counts on it (the fencing
// webhook's slow-decision refusal, the waits after a revocation, before a
// recreated lease's first grant and after policy mode's barrier).
func TestTimingValidate(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(*Timing)
		want   string // "" for valid
	}{
		{"defaults", func(*Timing) {}, ""},
		{"no drift allowance", func(t *Timing) { t.DriftRatio, t.MinDrift = 0, 0 }, ""},
		{"drift ratio 1", func(t *Timing) { t.DriftRatio = 1 }, "drift ratio 1 is out of range"},
		{"negative minimum drift", func(t *Timing) { t.MinDrift = -1 }, "minimum drift allowance -1ns is negative"},
		{"zero commit lag", func(t *Timing) { t.CommitLag = 0 }, "--max-commit-lag must be > 0: it bounds admission-to-commit"},
		{"negative commit lag", func(t *Timing) { t.CommitLag = -time.Second }, "--max-commit-lag must be > 0: it bounds admission-to-commit, and 0 or less would switch off every margin and wait that counts on it; got -1s"},
		{"a tiny commit lag", func(t *Timing) { t.CommitLag = time.Millisecond }, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			tm := DefaultTiming()
			c.change(&tm)
			err := tm.Validate()
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, c.want)
			}
		})
	}
	if err := (Timing{}).Validate(); err == nil || !strings.Contains(err.Error(), "got 0s") {
		t.Fatalf("zero Timing: Validate() = %v, want the commit lag of 0s refused", err)
	}
}
