package explorer

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// Trace is a counterexample: the steps from an initial state to the state
// in which an invariant broke.
type Trace struct {
	cfg     *Config
	m       *model
	Initial *state
	Steps   []Step
	// Prop is the invariant that broke, What how.
	Prop, What string
}

// Step is one step of a trace.
type Step struct {
	Who           int
	Label         string
	Before, State *state
}

func (t *Trace) String() string {
	var b strings.Builder
	m := t.m
	fmt.Fprintf(&b, "counterexample to %s in %q (tick %v, L=%ds, S=%v, C=%v):\n", t.Prop, t.cfg.Name, t.cfg.Tick, t.cfg.LeaseSeconds, t.cfg.Skew, t.cfg.CommitLag)
	var offs []string
	for _, p := range m.parties() {
		offs = append(offs, fmt.Sprintf("%s %+v", m.partyName(p), t.Initial.offsets[p]))
	}
	fmt.Fprintf(&b, "  clock offsets from the controller's: %s\n", strings.Join(offs, ", "))
	fmt.Fprintf(&b, "  0. initial: %s\n", m.describeLease(t.Initial.lease))
	for i := 0; i < len(t.Steps); i++ {
		st := t.Steps[i]
		at := st.State.t
		if st.Who == -1 {
			// Time passing: one line for a run of ticks.
			j := i
			for j+1 < len(t.Steps) && t.Steps[j+1].Who == -1 {
				j++
			}
			steps := fmt.Sprintf("%3d", i+1)
			if j > i {
				steps = fmt.Sprintf("%d-%d", i+1, j+1)
			}
			fmt.Fprintf(&b, "%s. time passes to t=%s\n", steps, m.fmtClock(base.Add(time.Duration(t.Steps[j].State.t)*t.cfg.Tick)))
			i = j
			continue
		}
		clock := ""
		switch {
		case st.Who >= 0:
			clock = fmt.Sprintf(" [%s's clock %s]", m.partyName(st.Who), m.fmtClock(st.State.now(t.cfg, st.Who)))
		case st.Who == pAPIServer:
			clock = " [API server]"
		case st.Who == pOperator:
			clock = " [operator]"
		}
		fmt.Fprintf(&b, "%3d. t=%s%s: %s\n", i+1, m.fmtClock(base.Add(time.Duration(at)*t.cfg.Tick)), clock, st.Label)
		if st.State.lease != st.Before.lease {
			fmt.Fprintf(&b, "       lease: %s\n", m.describeLease(st.State.lease))
		}
		if st.State.ctrl.mem != st.Before.ctrl.mem {
			fmt.Fprintf(&b, "       controller remembers: %s\n", m.describeMemory(st.State))
		}
	}
	fmt.Fprintf(&b, "  BROKEN %s: %s\n", t.Prop, t.What)
	return b.String()
}

func (m *model) fmtMicro(t *metav1.MicroTime) string {
	if t == nil {
		return "-"
	}
	return m.fmtClock(t.Time)
}

// describeLease shows what the rules read of a lease version.
func (m *model) describeLease(v *version) string {
	if v == nil || v.obj == nil {
		return "none"
	}
	l := v.obj
	var reqs []string
	for _, r := range l.Spec.Requests {
		reqs = append(reqs, fmt.Sprintf("%s (user %s, seq %d, stamp %s)", r.HolderIdentity, r.User, r.RenewSequence, m.fmtMicro(r.RenewTime)))
	}
	st := &l.Status
	s := fmt.Sprintf("rev %d gen %d, requests [%s]; status: ", v.rev, l.Generation, strings.Join(reqs, ", "))
	if st.HolderIdentity != "" {
		s += fmt.Sprintf("holder %s token %d renewSequence %d renewTime %s expireTime %s", st.HolderIdentity, st.FencingToken, st.RenewSequence,
			m.fmtMicro(st.RenewTime), m.fmtMicro(st.ExpireTime))
	} else {
		s += fmt.Sprintf("no holder (token %d)", st.FencingToken)
	}
	if st.PreviousHolder != nil {
		s += fmt.Sprintf(", previous %s/%d %s", st.PreviousHolder.HolderIdentity, st.PreviousHolder.FencingToken, st.PreviousHolder.Reason)
	}
	if st.LockDelayUntil != nil {
		s += ", lockDelayUntil " + m.fmtMicro(st.LockDelayUntil)
	}
	for _, k := range []string{coordv1alpha1.ExpiredAnnotation, coordv1alpha1.RevokedAnnotation} {
		if a, ok := l.Annotations[k]; ok {
			s += fmt.Sprintf(", %s=%s", k, a)
		}
	}
	if !l.DeletionTimestamp.IsZero() {
		s += ", being deleted"
	}
	return s
}

func (m *model) describeMemory(s *state) string {
	o, ok := s.ctrl.mem.Observed()
	if !ok {
		return "nothing"
	}
	ack := ""
	if !o.Acknowledged {
		ack = ", grant not acknowledged yet"
	}
	return fmt.Sprintf("%s token %d renewSequence %d observed at %s (status records %s)%s", o.Holder, o.Token, o.RenewSequence, m.fmtClock(o.At), m.fmtClock(o.Recorded), ack)
}
