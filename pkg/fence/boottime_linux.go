package fence

import (
	"time"

	"golang.org/x/sys/unix"
)

// bootClock reads CLOCK_BOOTTIME: like the monotonic clock, but it keeps
// counting while the machine (or VM) is suspended, which Go's monotonic
// clock (CLOCK_MONOTONIC) does not.
func bootClock() (func() time.Duration, bool) {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return nil, false
	}
	return func() time.Duration {
		var ts unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
		return time.Duration(ts.Nano())
	}, true
}
