package fencedlease

import (
	"strings"
	"testing"
	"time"
)

// TestDecide is the decision's table: from a state the reconciler reached (set
// up through the simulator), one call of decide, and the step it chose: the
// write it asks for (a request removal or a status), the transitions it
// reports, and the holder and token that status would record.
func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		name string
		// lockDelay is the lease's lockDelaySeconds (duration 10 s).
		lockDelay int32
		// setup brings the lease to the state decide is called on.
		setup func(s *sim)
		// Want: the request decide removes ("" none), the transition kinds in
		// order, the holder and token of the status it writes ("" and 0: no
		// status write, or nobody holds), whether it records a renewal.
		removes     string
		transitions string
		holder      string
		token       int64
		renewed     bool
	}{{
		name:        "grant: the first request is granted with the generation as token",
		setup:       func(s *sim) { s.join("a") },
		transitions: "Granted", holder: "a", token: 2,
	}, {
		name: "renew: a raised renewSequence is recorded, the token stays",
		setup: func(s *sim) {
			held(s)
			s.clock.Step(time.Second)
			s.renew("a")
		},
		holder: "a", token: 2, renewed: true,
	}, {
		name: "nothing to do: a held lease inside its duration",
		setup: func(s *sim) {
			held(s)
			s.clock.Step(5 * time.Second)
		},
	}, {
		name: "end and grant: a withdrawn holder is released and the next request handed the lease in one write",
		setup: func(s *sim) {
			s.join("a")
			s.join("b")
			s.reconcile()
			s.withdraw("a")
		},
		transitions: "Released HandedOver", holder: "b", token: 4,
	}, {
		name: "expire, generation unmoved: the silent holder's request is removed first, so the next token is larger",
		setup: func(s *sim) {
			held(s)
			s.clock.Step(11 * time.Second)
		},
		removes: "a",
	}, {
		name:        "expire and take over: the expiry is written with the next grant",
		setup:       expiredWithNext,
		transitions: "Expired TakenOver", holder: "b", token: 3,
	}, {
		name:        "lock delay: after an expiry nobody is granted until it passes",
		lockDelay:   5,
		setup:       expiredWithNext,
		transitions: "Expired", token: 2,
	}, {
		name: "tidy, not yet: the expired holder's request stays while the new holder has not acknowledged",
		setup: func(s *sim) {
			expiredWithNext(s)
			s.reconcile() // b granted with a's request still in place
			s.clock.Step(time.Second)
		},
	}, {
		name: "tidy: the expired holder's request is removed after the acknowledgement grace",
		setup: func(s *sim) {
			expiredWithNext(s)
			s.reconcile()
			s.clock.Step(4 * time.Second) // past ackGrace, a third of the duration
		},
		removes: "a",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(t, 10, tc.lockDelay)
			tc.setup(s)
			d, err := decide(s.lease, s.obs, s.stored, s.clock.Now(), s.timing)
			if err != nil {
				t.Fatal(err)
			}
			var kinds []string
			for _, tr := range d.transitions {
				kinds = append(kinds, tr.Kind)
			}
			var holder string
			var token int64
			if d.status != nil {
				holder, token = d.status.HolderIdentity, d.status.FencingToken
			}
			if d.status == nil && tc.transitions != "" {
				t.Fatalf("no status write, want transitions %q", tc.transitions)
			}
			if d.removeRequest != tc.removes || strings.Join(kinds, " ") != tc.transitions ||
				holder != tc.holder || (d.status != nil && token != tc.token) || d.renewed != tc.renewed {
				t.Errorf("decide: removes %q, transitions %q, status holder %q token %d, renewed %v;\nwant removes %q, transitions %q, holder %q token %d, renewed %v",
					d.removeRequest, strings.Join(kinds, " "), holder, token, d.renewed,
					tc.removes, tc.transitions, tc.holder, tc.token, tc.renewed)
			}
		})
	}
}

// held: a was granted the lease.
func held(s *sim) {
	s.join("a")
	s.reconcile()
}

// expiredWithNext: a was granted, b queued, and a stopped renewing for longer
// than the lease's duration (10 s).
func expiredWithNext(s *sim) {
	held(s)
	s.join("b")
	s.reconcile()
	s.clock.Step(11 * time.Second)
}
