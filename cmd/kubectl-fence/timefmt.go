package main

import (
	"fmt"
	"math"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
)

// timeLayout prints times in UTC to the millisecond: leases live for seconds.
const timeLayout = "2006-01-02T15:04:05.000Z"

// none is what a table cell shows for an empty value.
const none = "<none>"

// formatDuration prints durations under two minutes to a tenth of a second
// ("4.2s", "30s"), the resolution that matters for a lease, and longer ones as
// kubectl does ("3m12s").
func formatDuration(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	if d < 2*time.Minute {
		return strconv.FormatFloat(math.Round(d.Seconds()*10)/10, 'f', -1, 64) + "s"
	}
	return duration.HumanDuration(d)
}

// relative prints t against now: "in 4.2s" or "3m12s ago".
func relative(t, now time.Time) string {
	if t.After(now) {
		return "in " + formatDuration(t.Sub(now))
	}
	return formatDuration(now.Sub(t)) + " ago"
}

// formatTime prints a timestamp with its distance from now.
func formatTime(t *metav1.MicroTime, now time.Time) string {
	if t == nil || t.IsZero() {
		return none
	}
	return fmt.Sprintf("%s (%s)", t.UTC().Format(timeLayout), relative(t.Time, now))
}

// timeLeft is the time until t: "4.2s", "expired" once t has passed, "-" when
// there is no t.
func timeLeft(t *metav1.MicroTime, now time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	if !t.After(now) {
		return "expired"
	}
	return formatDuration(t.Sub(now))
}

// seconds prints a duration given in whole seconds ("15s"), "-" when zero.
func seconds(s int32) string {
	if s == 0 {
		return "-"
	}
	return duration.HumanDuration(time.Duration(s) * time.Second)
}
