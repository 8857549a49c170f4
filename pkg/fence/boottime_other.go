//go:build !linux

package fence

import "time"

// bootClock is unavailable outside Linux: deadlines then count on Go's
// monotonic clock alone (see docs/design.md, I3, on suspend).
func bootClock() (func() time.Duration, bool) { return nil, false }
