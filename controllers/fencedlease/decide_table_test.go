package fencedlease

import (
	"fmt"
	"strings"
	"testing"
	"time"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// outcome is what one decision says, read off the write it sends
// (decision.apply), as the reconciler and the simulator send it.
type outcome struct {
	// write is "" (nothing to write), "status", or for a spec write
	// "remove <holders>, expired <the expired annotation it writes>".
	write       string
	transitions string
	// Of the status written: holder, token, tokenBase, lockDelayUntil as a
	// time from now (0: none), the waiting list and the Held reason.
	holder    string
	token     int64
	tokenBase int64
	lockDelay time.Duration
	waiting   string
	reason    string
	renewed   bool
	// requeue is when the reconciler looks again; only a decision that writes
	// nothing returns it (after a write it decides again at once).
	requeue time.Duration
}

// TestDecide is the decision's table: from a state the reconciler reached (set
// up through the simulator), one call of decide, and the write it sends, the
// transitions it reports and when it looks again. Each row is named after
// the step of decide it exercises (decide.go).
func TestDecide(t *testing.T) {
	const l = 10 * time.Second // the sim's lease duration
	total := l + DefaultTiming().Allowance(l)
	lag := DefaultTiming().CommitLag
	for _, tc := range []struct {
		name string
		// lockDelay is the lease's lockDelaySeconds (duration 10 s).
		lockDelay int32
		// setup brings the lease to the state decide is called on.
		setup func(s *sim)
		want  outcome
		// err, when set, is part of the error decide must return.
		err string
	}{{
		name: "tokenBase: a new incarnation's first reconcile lifts the base to the stored epoch and waits the commit lag",
		setup: func(s *sim) {
			s.stored = 1000
			s.join("a")
		},
		want: outcome{write: "status", tokenBase: 1000, lockDelay: lag, waiting: "a", reason: coordv1alpha1.ReasonLockDelay},
	}, {
		name: "tokenBase: after the commit lag the new incarnation's first token is above the stored epoch",
		setup: func(s *sim) {
			s.stored = 1000
			s.join("a")
			s.reconcile()
			s.clock.Step(lag)
		},
		want: outcome{write: "status", transitions: "Granted", holder: "a", token: 1002, tokenBase: 1000, reason: coordv1alpha1.ReasonGranted},
	}, {
		name: "tokenBase: a raised minFencingToken lifts the base, not the current token",
		setup: func(s *sim) {
			held(s)
			s.specWrite(func(sp *coordv1alpha1.FencedLeaseSpec) { sp.MinFencingToken = 5000 })
		},
		want: outcome{write: "status", holder: "a", token: 2, tokenBase: 5000, reason: coordv1alpha1.ReasonGranted},
	}, {
		name:  "grantNext: an unrequested lease is idle",
		setup: func(*sim) {},
		want:  outcome{write: "status", reason: coordv1alpha1.ReasonUnclaimed},
	}, {
		name:  "grantNext: the first request is granted with the generation as token",
		setup: func(s *sim) { s.join("a") },
		want:  outcome{write: "status", transitions: "Granted", holder: "a", token: 2, reason: coordv1alpha1.ReasonGranted},
	}, {
		name: "grantNext: a token that would not exceed the last is refused (I1)",
		setup: func(s *sim) {
			s.lease.Status.FencingToken = 5 // no sequence of writes reaches this
			s.join("a")
		},
		err: "token 2 would not exceed the last token 5",
	}, {
		name:  "observe, acknowledge: a raised renewSequence is recorded in status, the token stays",
		setup: func(s *sim) { renewedAfterASecond(s, s.renew) },
		want:  outcome{write: "status", holder: "a", token: 2, reason: coordv1alpha1.ReasonGranted, renewed: true},
	}, {
		name:  "observe, acknowledge: a stamped renewal is observed without a status write (I2)",
		setup: func(s *sim) { renewedAfterASecond(s, s.renewStamped) },
		want:  outcome{renewed: true, requeue: total},
	}, {
		name: "currentTenure: nothing to do for a held lease inside its duration",
		setup: func(s *sim) {
			held(s)
			s.clock.Step(5 * time.Second)
		},
		want: outcome{requeue: total - 5*time.Second},
	}, {
		name: "waiting: a request joining a held lease is listed",
		setup: func(s *sim) {
			held(s)
			s.join("b")
		},
		want: outcome{write: "status", holder: "a", token: 2, waiting: "b", reason: coordv1alpha1.ReasonGranted},
	}, {
		name: "endedByRequest, grantNext: a withdrawn holder is released and the next request handed the lease in one write",
		setup: func(s *sim) {
			heldWithNext(s)
			s.withdraw("a")
		},
		want: outcome{write: "status", transitions: "Released HandedOver", holder: "b", token: 4, reason: coordv1alpha1.ReasonHandedOver},
	}, {
		name: "endedByRequest: a request withdrawn and made anew (renewSequence back to 0) ends the tenure",
		setup: func(s *sim) {
			held(s)
			s.clock.Step(time.Second)
			s.renewStamped("a") // observed, not written: status still says renewSequence 0
			s.reconcile()
			s.withdraw("a")
			s.join("a")
		},
		want: outcome{write: "status", transitions: "Released HandedOver", holder: "a", token: 5, reason: coordv1alpha1.ReasonHandedOver},
	}, {
		name: "endedByRequest: the holder's identity queued again by another user than status.holderUser ends the tenure, with no observation",
		setup: func(s *sim) {
			heldWithNext(s)
			s.clock.Step(time.Second)
			s.renewStamped("a")
			s.reconcile()
			s.withdraw("a")
			s.specWrite(func(sp *coordv1alpha1.FencedLeaseSpec) {
				sp.Requests = append(sp.Requests, coordv1alpha1.LeaseRequest{HolderIdentity: "a", User: "mallory"})
			})
			s.obs = nil // a controller that took over
		},
		want: outcome{write: "status", transitions: "Released HandedOver", holder: "b", token: 6, waiting: "a", reason: coordv1alpha1.ReasonHandedOver},
	}, {
		name: "currentTenure: a status without holderUser (an earlier controller's) lets any request of the holder's identity carry the tenure",
		setup: func(s *sim) {
			heldWithNext(s)
			s.lease.Status.HolderUser = ""
			s.withdraw("a")
			s.specWrite(func(sp *coordv1alpha1.FencedLeaseSpec) {
				sp.Requests = append(sp.Requests, coordv1alpha1.LeaseRequest{HolderIdentity: "a", User: "mallory"})
			})
			s.obs = nil
		},
		want: outcome{requeue: total},
	}, {
		name: "endedByRequest: an operator's revocation ends the tenure, and the next grant waits the commit lag",
		setup: func(s *sim) {
			heldWithNext(s)
			s.lease.Annotations = map[string]string{coordv1alpha1.RevokedAnnotation: coordv1alpha1.ExpiredMark("a", 3)}
			s.withdraw("a")
		},
		want: outcome{write: "status", transitions: "Released", token: 3, lockDelay: lag, waiting: "b", reason: coordv1alpha1.ReasonLockDelay},
	}, {
		name:      "endedByRequest: the request this controller removed at expiry ends the tenure as Expired, with the lock delay",
		lockDelay: 5,
		setup: func(s *sim) {
			held(s)
			s.clock.Step(11 * time.Second)
			if _, wrote := s.step(); !wrote { // the removal
				s.t.Fatal("no removal of the expired request")
			}
			s.join("b")
		},
		want: outcome{write: "status", transitions: "Expired", token: 2, lockDelay: 5 * time.Second, waiting: "b", reason: coordv1alpha1.ReasonLockDelay},
	}, {
		name: "expiry: never before the persisted expireTime (a controller counting from an older observation)",
		setup: func(s *sim) {
			heldWithNext(s)
			s.renew("a")
			older := &observation{holder: "a", token: 3, renewSequence: 1, at: s.clock.Now(), recorded: s.clock.Now(), acked: true}
			s.clock.Step(5 * time.Second)
			s.reconcile() // expireTime: 5 s + L + allowance from the grant
			s.clock.Step(6 * time.Second)
			s.obs = older
		},
		want: outcome{requeue: total - 6*time.Second},
	}, {
		name: "expiry: never before the holder's renewTime stamp + L + allowance (a controller that did not observe it)",
		setup: func(s *sim) {
			heldWithNext(s)
			grantedAt := s.clock.Now()
			s.clock.Step(6 * time.Second)
			s.renewStamped("a")
			s.obs = &observation{holder: "a", token: 3, renewSequence: 1, at: grantedAt, recorded: grantedAt, acked: true}
			s.clock.Step(5 * time.Second)
		},
		want: outcome{requeue: total - 5*time.Second},
	}, {
		name: "expiry: with ClampStamps a future stamp counts only up to the observation",
		setup: func(s *sim) {
			s.timing.ClampStamps = true
			renewedAnHourAhead(s)
			s.clock.Step(total)
		},
		want: outcome{write: "status", transitions: "Expired TakenOver", holder: "b", token: 4, reason: coordv1alpha1.ReasonTakenOver},
	}, {
		name: "expire, generation unmoved: the silent holder's request is removed first, so the next token is larger",
		setup: func(s *sim) {
			held(s)
			s.clock.Step(11 * time.Second)
		},
		want: outcome{write: "remove a, expired a/2"},
	}, {
		name:  "expire, grantNext: the expiry is written with the next grant",
		setup: expiredWithNext,
		want:  outcome{write: "status", transitions: "Expired TakenOver", holder: "b", token: 3, reason: coordv1alpha1.ReasonTakenOver},
	}, {
		name:      "expire, grantNext: after an expiry nobody is granted until the lock delay passes",
		lockDelay: 5,
		setup:     expiredWithNext,
		want:      outcome{write: "status", transitions: "Expired", token: 2, lockDelay: 5 * time.Second, waiting: "b", reason: coordv1alpha1.ReasonLockDelay},
	}, {
		name: "tidy, not yet: the expired holder's request stays while the new holder has not acknowledged",
		setup: func(s *sim) {
			expiredWithNext(s)
			s.reconcile() // b granted with a's request still in place
			s.clock.Step(time.Second)
		},
		want: outcome{requeue: l/3 - time.Second},
	}, {
		name: "tidy: the expired holder's request is removed after the acknowledgement grace, marked with its token",
		setup: func(s *sim) {
			expiredWithNext(s)
			s.reconcile()
			s.clock.Step(4 * time.Second) // past ackGrace, a third of the duration
		},
		want: outcome{write: "remove a, expired a/2"},
	}, {
		name: "tidy: the acknowledgement ends the wait at once",
		setup: func(s *sim) {
			expiredWithNext(s)
			s.reconcile()
			s.clock.Step(time.Second)
			s.renewStamped("b")
		},
		want: outcome{write: "remove a, expired a/2", renewed: true},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(t, int32(l/time.Second), tc.lockDelay)
			tc.setup(s)
			d, err := decide(s.lease, s.obs, nil, s.stored, s.clock.Now(), s.timing)
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("decide: error %v, want one saying %q", err, tc.err)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if got := outcomeOf(s, d); got != tc.want {
				t.Errorf("decide:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// outcomeOf reads decision d, made on s's lease, through the write it sends.
func outcomeOf(s *sim, d decision) outcome {
	var kinds []string
	for _, tr := range d.transitions {
		kinds = append(kinds, tr.Kind)
	}
	o := outcome{transitions: strings.Join(kinds, " "), renewed: d.renewed}
	updated, statusWrite := d.apply(s.lease)
	switch {
	case updated == nil:
		o.requeue = d.requeueAfter
	case statusWrite:
		st := &updated.Status
		o.write = "status"
		o.holder, o.token, o.tokenBase = st.HolderIdentity, st.FencingToken, st.TokenBase
		if st.LockDelayUntil != nil {
			o.lockDelay = st.LockDelayUntil.Sub(s.clock.Now())
		}
		var waiting []string
		for _, w := range st.Waiting {
			waiting = append(waiting, w.HolderIdentity)
		}
		o.waiting = strings.Join(waiting, " ")
		o.reason = heldReason(updated)
	default:
		var removed []string
		for _, q := range s.lease.Spec.Requests {
			if coordv1alpha1.RequestIndex(updated.Spec.Requests, q.HolderIdentity) < 0 {
				removed = append(removed, q.HolderIdentity)
			}
		}
		o.write = fmt.Sprintf("remove %s, expired %s", strings.Join(removed, " "), updated.Annotations[coordv1alpha1.ExpiredAnnotation])
	}
	return o
}
