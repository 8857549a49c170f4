package testenv

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubefence/kubefence/pkg/fence"
)

// Renewal is how a holder's helper renews its tenures (docs/design.md
// "Heartbeats"): by stamping its FencedLease request (Classic), by a
// heartbeat Lease of each Elector's own (PerLease), or by one session
// heartbeat for every tenure of its process (Session). Scenario suites run
// their renewal-sensitive cases over Renewals.
type Renewal string

const (
	Classic  Renewal = "classic"
	PerLease Renewal = "heartbeat"
	Session  Renewal = "session"
)

// Renewals are the renewal kinds, for table cases and subtests over them.
var Renewals = []Renewal{Classic, PerLease, Session}

// Process is the pkg/fence Config.Heartbeat of one client process of
// identity renewing by r, to give every Elector of that process: nil
// (Classic), a per-lease heartbeat, or session name in namespace ns
// written through c (Session).
func (r Renewal) Process(c client.Client, ns, name, identity string) *fence.Heartbeat {
	switch r {
	case PerLease:
		return &fence.Heartbeat{}
	case Session:
		return &fence.Heartbeat{Session: fence.NewSession(c, ns, name, identity)}
	}
	return nil
}
