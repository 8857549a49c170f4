package main

import (
	"fmt"
	"io"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/cli-runtime/pkg/printers"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// describe prints the view for people: a block of fields, then the waiting
// queue, the history and the guarded objects as tables.
func describe(out io.Writer, v *leaseView) error {
	now := v.ObservedAt.Time
	l := v.Lease
	st := &l.Status

	w := printers.GetNewTabWriter(out)
	field := func(k, format string, a ...any) { fmt.Fprintf(w, "%s:\t%s\n", k, fmt.Sprintf(format, a...)) }
	field("Name", "%s", l.Name)
	field("Namespace", "%s", l.Namespace)
	field("Holder", "%s", holderLine(l))
	field("Fencing token", "%s (token base %d)", token(st.FencingToken), st.TokenBase)
	field("Status", "%s", statusLine(l))
	field("Acquired", "%s", formatTime(st.AcquireTime, now))
	field("Renewed", "%s (renew sequence %d)", formatTime(renewedAt(l), now), renewSequence(l))
	field("Expires", "%s", formatTime(expiresAt(l), now))
	field("Time left", "%s", v.ExpiresIn)
	field("Lease duration", "%s", durationLine(l))
	field("Transitions", "%d", st.LeaseTransitions)
	field("Lock delay", "%s", lockDelayLine(l, now))
	field("Previous holder", "%s", previousHolder(l, now))
	field("Identity binding", "%s", l.Spec.IdentityBinding)
	if l.Spec.MinFencingToken != 0 {
		field("Min fencing token", "%d", l.Spec.MinFencingToken)
	}
	if err := w.Flush(); err != nil {
		return err
	}

	section(out, "Waiting", len(v.Waiting), []string{"#", "HOLDER", "USER", "SINCE"}, func(i int) []string {
		q := v.Waiting[i]
		since := "not yet seen by the controller"
		if q.Since != nil {
			since = formatTime(q.Since, now)
		}
		return []string{strconv.Itoa(i + 1), q.HolderIdentity, q.User, since}
	})
	section(out, "History", len(v.History), []string{"TIME", "TYPE", "REASON", "NOTE"}, func(i int) []string {
		h := v.History[i]
		note := h.Note
		if h.Count > 1 {
			note = fmt.Sprintf("%s (x%d)", note, h.Count)
		}
		return []string{formatTime(&h.Time, now), h.Type, h.Reason, note}
	})
	section(out, "Guarded objects", len(v.Guarded), []string{"KIND", "NAME", "TOKEN", "STATE"}, func(i int) []string {
		g := v.Guarded[i]
		tok := g.Token
		if tok == "" {
			tok = none
		}
		return []string{g.kindName(), g.Name, tok, g.State}
	})
	return nil
}

// section prints a titled, indented table, or "<none>".
func section(out io.Writer, title string, n int, header []string, row func(int) []string) {
	if n == 0 {
		fmt.Fprintf(out, "\n%s: %s\n", title, none)
		return
	}
	fmt.Fprintf(out, "\n%s (%d):\n", title, n)
	w := printers.GetNewTabWriter(out)
	printRow := func(cells []string) { fmt.Fprintf(w, "  %s\n", strings.Join(cells, "\t")) }
	printRow(header)
	for i := range n {
		printRow(row(i))
	}
	_ = w.Flush()
}

// holderLine names the holder and flags a release the controller has not yet
// processed (the holder's request is already gone from spec.requests).
func holderLine(l *coordv1alpha1.FencedLease) string {
	h := l.Status.HolderIdentity
	if h == "" {
		return none
	}
	i := coordv1alpha1.RequestIndex(l.Spec.Requests, h)
	if i < 0 {
		return h + " (its request is gone: release pending)"
	}
	return fmt.Sprintf("%s (user %s)", h, l.Spec.Requests[i].User)
}

// statusLine is the Held condition: "Held=True Granted: granted to a with fencing token 7".
func statusLine(l *coordv1alpha1.FencedLease) string {
	c := meta.FindStatusCondition(l.Status.Conditions, coordv1alpha1.ConditionHeld)
	if c == nil {
		return "not yet reconciled by the controller"
	}
	return fmt.Sprintf("Held=%s %s: %s", c.Status, c.Reason, c.Message)
}

// durationLine is the current tenure's duration, and the spec's when the next
// grant will use a different one.
func durationLine(l *coordv1alpha1.FencedLease) string {
	cur, next := l.Status.LeaseDurationSeconds, l.Spec.LeaseDurationSeconds
	switch {
	case l.Status.HolderIdentity == "":
		return seconds(next)
	case cur == next:
		return seconds(cur)
	default:
		return fmt.Sprintf("%s (from the next grant: %s)", seconds(cur), seconds(next))
	}
}

// lockDelayLine tells the lock-delay and whether it holds the lease back now.
func lockDelayLine(l *coordv1alpha1.FencedLease, now time.Time) string {
	s := seconds(l.Spec.LockDelaySeconds)
	if lockDelayActive(l, now) {
		return fmt.Sprintf("%s, active: no grant before %s", s, formatTime(l.Status.LockDelayUntil, now))
	}
	if l.Spec.LockDelaySeconds != 0 {
		return s + ", not active"
	}
	return s
}

// renewedAt is the holder's latest renewal: its stamped renewTime, or the
// controller's acknowledged status.renewTime for a client that does not stamp.
func renewedAt(l *coordv1alpha1.FencedLease) *metav1.MicroTime {
	if i := coordv1alpha1.RequestIndex(l.Spec.Requests, l.Status.HolderIdentity); i >= 0 && l.Spec.Requests[i].RenewTime != nil {
		return l.Spec.Requests[i].RenewTime
	}
	return l.Status.RenewTime
}

// renewSequence is the holder's latest renewSequence: its request's, or the
// one the controller acknowledged, whichever is higher.
func renewSequence(l *coordv1alpha1.FencedLease) int64 {
	if i := coordv1alpha1.RequestIndex(l.Spec.Requests, l.Status.HolderIdentity); i >= 0 && l.Spec.Requests[i].RenewSequence > l.Status.RenewSequence {
		return l.Spec.Requests[i].RenewSequence
	}
	return l.Status.RenewSequence
}
