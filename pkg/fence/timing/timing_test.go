package timing

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// setting is one draw of everything the clock contract depends on: the
// operator's skew S, commit lag C and drift allowance, a lease duration, the
// client's configured margin, skew and lag (0: default), the clock offsets
// of the client's wall clock and the controller's from the fencing
// webhook's (within ±S; the webhook's clock is the reference here, real
// time), the client's clock-rate drift, and the delays of one renewal.
type setting struct {
	l, skew, lag           time.Duration
	driftRatio             float64
	minDrift               time.Duration
	margin, cfgSkew, cfgLg time.Duration
	clientOff, ctrlOff     time.Duration
	rate                   float64 // client monotonic seconds per real second, 1 - driftRatio .. 1
	ackDelay, obsDelay     time.Duration
	stamped                bool
	// heartbeat: the renewal is a heartbeat Lease's renewTime (client
	// clock): the webhook takes it as the stamp, the controller counts from
	// its sighting only (the stamp clamped) and writes no status.
	heartbeat bool
}

func (s setting) String() string {
	return fmt.Sprintf("L=%v S=%v C=%v drift=%v/%v margin=%v client skew/lag=%v/%v offsets client=%v controller=%v rate=%v delays=%v/%v stamped=%v heartbeat=%v",
		s.l, s.skew, s.lag, s.driftRatio, s.minDrift, s.margin, s.cfgSkew, s.cfgLg, s.clientOff, s.ctrlOff, s.rate, s.ackDelay, s.obsDelay, s.stamped, s.heartbeat)
}

func ms(r *rand.Rand, upTo time.Duration) time.Duration {
	return time.Duration(r.Int64N(int64(upTo/time.Millisecond)+1)) * time.Millisecond
}

func draw(r *rand.Rand) setting {
	s := setting{
		l:          time.Duration(1+r.IntN(60)) * time.Second,
		skew:       ms(r, 500*time.Millisecond),
		lag:        time.Millisecond + ms(r, 3*time.Second),
		driftRatio: r.Float64() * 0.02,
		minDrift:   ms(r, 50*time.Millisecond),
		ackDelay:   ms(r, 2*time.Second),
		obsDelay:   ms(r, 2*time.Second),
		stamped:    r.IntN(4) != 0,
		heartbeat:  r.IntN(3) == 0,
	}
	if r.IntN(8) == 0 {
		s.l = time.Duration(61+r.IntN(3540)) * time.Second
	}
	if r.IntN(3) == 0 { // defaults
		s.skew, s.lag, s.driftRatio, s.minDrift = DefaultSkew, DefaultCommitLag, DefaultDriftRatio, DefaultMinDrift
	}
	if r.IntN(2) == 0 {
		s.margin = ms(r, s.l/2)
	}
	if r.IntN(4) == 0 {
		s.cfgSkew = ms(r, time.Second)
	}
	if r.IntN(4) == 0 {
		s.cfgLg = ms(r, 3*time.Second)
	}
	// Offsets within ±S of the webhook's clock, their extremes often.
	off := func() time.Duration {
		switch r.IntN(4) {
		case 0:
			return -s.skew
		case 1:
			return s.skew
		}
		return time.Duration(r.Int64N(int64(2*s.skew)+1)) - s.skew
	}
	s.clientOff, s.ctrlOff = off(), off()
	s.rate = 1 - r.Float64()*s.driftRatio
	if r.IntN(4) == 0 {
		s.rate = 1 - s.driftRatio
	}
	return s
}

// instants are the three ends of one tenure, in real time (the webhook's
// clock): the client's deadline (at the client's worst rate, and at equal
// rates), the webhook's last admission of the token (the earlier of its
// cut-off and its answer-by) and the controller's expiry.
type instants struct {
	deadline, deadlineEqualRates time.Time
	cutOff, answerBy             time.Time
	budget                       time.Duration
	expiry                       time.Time
}

// run plays one tenure: granted at real time 0 (the controller persists
// expireTime on its clock), the client's renewal sent ackDelay later
// (stamped with its wall clock), observed by the controller obsDelay after
// that. A status with no stamp is acknowledged: expireTime from the
// observation. false: the client refuses the setting.
func run(s setting) (instants, bool) {
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	allowance := Allowance(s.l, s.driftRatio, s.minDrift)
	// The operator publishes S and C in whole milliseconds (rounded up).
	skew := Bound(s.cfgSkew, int64((s.skew+time.Millisecond-1)/time.Millisecond), DefaultSkew)
	lag := Bound(s.cfgLg, int64((s.lag+time.Millisecond-1)/time.Millisecond), DefaultCommitLag)
	if s.skew == 0 { // a skew of 0 is not published
		skew = Bound(s.cfgSkew, 0, DefaultSkew)
	}
	margin, err := Margin(s.l, s.margin, skew, lag)
	if err != nil {
		return instants{}, false
	}
	grant := base
	sent := grant.Add(s.ackDelay)
	observed := sent.Add(s.obsDelay)
	ctrl := func(t time.Time) time.Time { return t.Add(s.ctrlOff) }    // real -> controller clock
	unctrl := func(t time.Time) time.Time { return t.Add(-s.ctrlOff) } // controller clock -> real
	expireTime := ControllerExpiry(ctrl(grant), s.l, allowance)
	var stamp time.Time
	expiry := ControllerExpiry(ctrl(observed), s.l, allowance)
	switch {
	case s.heartbeat:
		// docs/design.md "Heartbeats": the renewTime, within S of the
		// webhook's clock, moves the webhook's E; the controller's expiry
		// counts from its sighting alone.
		stamp = sent.Add(s.clientOff)
	case s.stamped:
		stamp = sent.Add(s.clientOff)
		if e := ControllerExpiry(stamp, s.l, allowance); e.After(expiry) {
			expiry = e
		}
	default:
		expireTime = expiry
	}
	if expireTime.After(expiry) {
		expiry = expireTime
	}
	e := WebhookExpiry(expireTime, stamp, s.l, s.skew)
	local := Deadline(sent, s.l, margin).Sub(sent) // on the client's monotonic clock
	return instants{
		deadline:           sent.Add(time.Duration(float64(local) / s.rate)),
		deadlineEqualRates: sent.Add(local),
		cutOff:             CutOff(e, s.l, s.skew, s.lag),
		answerBy:           AnswerBy(e, s.l, s.skew, s.lag),
		budget:             CommitBudget(s.l, s.skew, s.lag),
		expiry:             unctrl(expiry),
	}, true
}

// check reports how one accepted setting breaks the order, "" if it keeps it.
func check(s setting, in instants) string {
	stop := in.cutOff
	if in.answerBy.Before(stop) {
		stop = in.answerBy
	}
	switch {
	case in.deadlineEqualRates.After(stop):
		return fmt.Sprintf("the client's deadline %v is after the webhook's last admission %v (cut-off %v, answer-by %v): a live holder is refused", in.deadlineEqualRates, stop, in.cutOff, in.answerBy)
	case in.answerBy.Add(in.budget / 2).After(in.expiry):
		return fmt.Sprintf("a write answered at the webhook's answer-by %v and committed within half the budget %v commits after the controller's expiry %v", in.answerBy, in.budget/2, in.expiry)
	case in.deadline.After(in.expiry):
		return fmt.Sprintf("the client's deadline %v (its clock slow within the drift ratio) is after the controller's expiry %v", in.deadline, in.expiry)
	case s.l >= FullMarginLease(s.skew, s.lag) && (in.budget != s.lag || in.cutOff.Add(s.lag/2).After(in.answerBy)):
		return fmt.Sprintf("a lease of at least %v has budget %v (want C = %v), or a decision started at the cut-off and taking C/2 ends after answer-by", FullMarginLease(s.skew, s.lag), in.budget, s.lag)
	}
	return ""
}

// TestClockOrder is the I3 clock contract as a property: for every setting
// the client accepts (timing.Margin, as fence.Config and resourcelock use
// it), every clock offset within ±S of the fencing webhook's and a client
// clock running slow within the controller's drift ratio, the client's
// deadline comes no later than the webhook's last admission of its token
// (at equal clock rates: that link is liveness), which leaves a write
// answered then half the commit budget to commit before the controller's
// expiry; for leases of FullMarginLease and longer the
// budget is the whole commit lag. A seeded random sweep: a failure prints
// the seed's setting.
func TestClockOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(20261201, 3))
	n, accepted := 200_000, 0
	if testing.Short() {
		n = 50_000
	}
	for range n {
		s := draw(r)
		in, ok := run(s)
		if !ok {
			continue
		}
		accepted++
		if msg := check(s, in); msg != "" {
			t.Fatalf("%v:\n%s", s, msg)
		}
	}
	if accepted < n/3 {
		t.Fatalf("only %d of %d settings accepted: the sweep checks too little", accepted, n)
	}
	t.Logf("%d of %d settings accepted and ordered", accepted, n)
}

// The default client (no margin, skew or lag configured) is accepted for
// every lease duration the CRD allows, against an operator with the default
// skew and commit lag.
func TestDefaultsAcceptEveryLease(t *testing.T) {
	for l := time.Second; l <= time.Hour; l += time.Second {
		if _, err := Margin(l, 0, DefaultSkew, DefaultCommitLag); err != nil {
			t.Fatalf("lease %v: %v", l, err)
		}
	}
}

// Margin's default and its refusals, with the numbers of docs/protocol.md.
func TestMargin(t *testing.T) {
	for _, c := range []struct {
		l, margin, skew, lag time.Duration
		want                 time.Duration
		err                  string
	}{
		{15 * time.Second, 0, DefaultSkew, DefaultCommitLag, 1500 * time.Millisecond, ""},  // L/10
		{11 * time.Second, 0, DefaultSkew, DefaultCommitLag, 1300 * time.Millisecond, ""},  // S + C + 2S
		{2 * time.Second, 0, DefaultSkew, DefaultCommitLag, 400 * time.Millisecond, ""},    // L/10 + 2S
		{time.Second, 0, DefaultSkew, DefaultCommitLag, 300 * time.Millisecond, ""},        // max(L/10, S) + 2S
		{2 * time.Second, 0, DefaultSkew, 2 * time.Second, 400 * time.Millisecond, ""},     // a longer lag: same cap
		{22 * time.Second, 0, DefaultSkew, 2 * time.Second, 2300 * time.Millisecond, ""},   // S + C + 2S
		{15 * time.Second, time.Second, DefaultSkew, DefaultCommitLag, 0, "below a tenth"}, // docs/protocol.md: at least L/10
		{12 * time.Second, 1200 * time.Millisecond, DefaultSkew, DefaultCommitLag, 0, "below 1.3s, the least that keeps the deadline before the fencing webhook's cut-off"},
		{2 * time.Second, 0, time.Second, DefaultCommitLag, 0, "must be shorter than the lease duration 2s"},
	} {
		got, err := Margin(c.l, c.margin, c.skew, c.lag)
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("Margin(%v, %v, %v, %v) = %v, %v; want %v", c.l, c.margin, c.skew, c.lag, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("Margin(%v, %v, %v, %v) = %v, %v; want an error with %q", c.l, c.margin, c.skew, c.lag, got, err, c.err)
		}
	}
}

// Bound: the larger of configured and published, the default when neither.
func TestBound(t *testing.T) {
	for _, c := range []struct {
		configured time.Duration
		published  int64
		want       time.Duration
	}{
		{0, 0, DefaultCommitLag},                            // a lease of an earlier release, nothing configured
		{0, 2500, 2500 * time.Millisecond},                  // the operator's, nothing configured
		{500 * time.Millisecond, 0, 500 * time.Millisecond}, // configured, nothing published
		{500 * time.Millisecond, 2000, 2 * time.Second},     // the larger
		{3 * time.Second, 2000, 3 * time.Second},
	} {
		if got := Bound(c.configured, c.published, DefaultCommitLag); got != c.want {
			t.Errorf("Bound(%v, %d) = %v, want %v", c.configured, c.published, got, c.want)
		}
	}
}
