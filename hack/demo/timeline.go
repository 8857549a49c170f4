package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kubefence/kubefence/hack/demo/internal/event"
)

// Who tells the timeline's actors that are not workers.
const (
	whoDemo       = "demo"
	whoController = "controller"
	whoWebhook    = "webhook"
)

// entry is one line of the timeline.
type entry struct {
	// At is the time since the story began, when the demo learned of it.
	At  time.Duration
	Who string
	// Ev is the worker's event, for entries of a worker.
	Ev   *event.Event
	Text string
}

// timeline records what every actor did, prints it as it happens, and lets
// the story wait for an entry.
type timeline struct {
	start time.Time

	mu      sync.Mutex
	out     io.Writer
	muted   bool
	entries []entry
	changed chan struct{}
}

func newTimeline(out io.Writer) *timeline {
	return &timeline{start: time.Now(), out: out, changed: make(chan struct{})}
}

// begin restarts the clock of the timeline, which must still be empty.
func (t *timeline) begin() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.start = time.Now()
}

// rel formats a wall-clock time relative to the start of the story.
func (t *timeline) rel(at time.Time) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return fmt.Sprintf("+%.2fs", at.Sub(t.start).Seconds())
}

// add records and prints an entry.
func (t *timeline) add(who, text string, ev *event.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := entry{At: time.Since(t.start), Who: who, Ev: ev, Text: text}
	t.entries = append(t.entries, e)
	if !t.muted && text != "" {
		lines := strings.Split(text, "\n")
		fmt.Fprintf(t.out, "  %6.2fs  %-10s  %s\n", e.At.Seconds(), who, lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintf(t.out, "  %7s  %-10s    %s\n", "", "", l)
		}
	}
	close(t.changed)
	t.changed = make(chan struct{})
}

// note prints a line of the demo's own.
func (t *timeline) note(format string, args ...any) {
	t.add(whoDemo, fmt.Sprintf(format, args...), nil)
}

// setMuted stops (or resumes) printing; entries are still recorded.
func (t *timeline) setMuted(m bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.muted = m
}

// waitFor waits until find reports an entry, for at most timeout, and gives
// up when abort closes (a process it waits for exited).
func (t *timeline) waitFor(ctx context.Context, timeout time.Duration, what string, abort <-chan struct{}, find func([]entry) (entry, bool)) (entry, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		t.mu.Lock()
		e, ok := find(t.entries)
		changed := t.changed
		t.mu.Unlock()
		if ok {
			return e, nil
		}
		select {
		case <-ctx.Done():
			return entry{}, ctx.Err()
		case <-timer.C:
			return entry{}, fmt.Errorf("waited %v for %s", timeout, what)
		case <-abort:
			t.mu.Lock()
			e, ok := find(t.entries)
			t.mu.Unlock()
			if ok {
				return e, nil
			}
			return entry{}, fmt.Errorf("gave up waiting for %s: the process exited", what)
		case <-changed:
		}
	}
}

// nth finds the nth (1-based) event of kind reported by worker who.
func nth(who string, kind event.Kind, n int) func([]entry) (entry, bool) {
	return func(es []entry) (entry, bool) {
		seen := 0
		for _, e := range es {
			if e.Who == who && e.Ev != nil && e.Ev.Kind == kind {
				if seen++; seen == n {
					return e, true
				}
			}
		}
		return entry{}, false
	}
}

// firstOf finds the first event of one of kinds reported by worker who after
// entry index from.
func firstOf(who string, from int, kinds ...event.Kind) func([]entry) (entry, bool) {
	return func(es []entry) (entry, bool) {
		for _, e := range es[min(from, len(es)):] {
			if e.Who == who && e.Ev != nil {
				for _, k := range kinds {
					if e.Ev.Kind == k {
						return e, true
					}
				}
			}
		}
		return entry{}, false
	}
}

// snapshot returns the entries so far.
func (t *timeline) snapshot() []entry {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.entries)
}

// len is the number of entries so far.
func (t *timeline) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.entries)
}

// describe renders a worker's event for the timeline ("" hides it).
func describe(ev *event.Event, object string) string {
	switch ev.Kind {
	case event.Started:
		return fmt.Sprintf("process started (pid %d)", ev.PID)
	case event.Holder:
		if ev.Holder == "" {
			return "sees the lease free; queues its request"
		}
		return fmt.Sprintf("waits in the queue: the lease is held by %s with token %d", ev.Holder, ev.Token)
	case event.Granted:
		return fmt.Sprintf("leads with fencing token %d", ev.Token)
	case event.Wrote:
		verb := "wrote"
		if ev.Created {
			verb = "created"
		}
		return fmt.Sprintf("%s %s with token %d: entries %v", verb, object, ev.Token, ev.Entries)
	case event.Pausing:
		return fmt.Sprintf("checks its lease (token %d is current), prepares write #%d ... and freezes (SIGSTOP) before sending it", ev.Token, ev.Write)
	case event.Resumed:
		return fmt.Sprintf("wakes up after %.1fs and sends write #%d with the token it checked before the pause (%d)", float64(ev.PausedMillis)/1000, ev.Write, ev.Token)
	case event.Refused:
		return fmt.Sprintf("REFUSED by the API server (%d %s):\n%q", ev.Code, ev.Reason, ev.Message)
	case event.Failed:
		return fmt.Sprintf("write #%d with token %d failed: %s", ev.Write, ev.Token, ev.Message)
	case event.StoppedLeading:
		if ev.Reason == "released" {
			return fmt.Sprintf("released the lease (token %d)", ev.Token)
		}
		return fmt.Sprintf("its client helper ends the tenure of token %d: the lease is lost", ev.Token)
	case event.Exited:
		if ev.Message != "" {
			return "exited: " + ev.Message
		}
		return "exited"
	}
	return ""
}
