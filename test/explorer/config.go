package explorer

import (
	"fmt"
	"time"

	"github.com/kubefence/kubefence/controllers/fencedlease"
)

// Config is one exploration: the production settings the rules run with,
// the parties, and the bounds of the environment. Durations are rounded to
// ticks where the environment acts; the production functions see the exact
// times of the ticks.
type Config struct {
	Name string
	// Tick is the model's unit of time: every party acts at a tick.
	Tick time.Duration
	// Horizon bounds the exploration's true time, in ticks.
	Horizon int

	// Production settings.
	LeaseSeconds     int32
	LockDelaySeconds int32
	// Skew is the fencing webhook's --webhook-clock-skew and the FencedLease
	// webhook's stamp skew (S); the parties' clocks differ by at most it.
	Skew time.Duration
	// CommitLag is --max-commit-lag (C): the fencing webhook's and the
	// controller's setting.
	CommitLag time.Duration
	Timing    fencedlease.Timing

	// Offsets are the clock offsets a party may have, relative to the
	// controller's clock; every combination in which no two parties differ
	// by more than Skew is explored. Parties without an entry have none.
	Offsets map[string][]time.Duration

	// Clients compete for the lease, in their queueing order.
	Clients []ClientSpec

	// DecisionDelay bounds, in ticks, the time from a guarded write's arrival
	// at the fencing webhook to its answer (the lease read lies in between).
	DecisionDelay int
	// CommitDelay bounds, in ticks, the time from the webhook's answer to
	// the write's commit (the answer's way back, the API server's other
	// admission, etcd).
	CommitDelay int
	// ControllerDelay bounds, in ticks, how long the controller takes to
	// reconcile after the lease changed or its requeue came.
	ControllerDelay int
	// ClientDelay bounds, in ticks, how long an honest client that has not
	// crashed takes to acknowledge a grant its watch shows it.
	ClientDelay int
	// ControllerRestarts bounds how often the controller restarts (losing
	// its memory); while down it may stay down arbitrarily long.
	ControllerRestarts int
	// OperatorActions bounds an operator's actions: with Revocations,
	// releases and hand-overs (kubectl fence release and handover:
	// protocol.ReleasePatch, protocol.HandoverPatch, as a lease admin); with
	// LeaseDeletes, deleting the lease and creating it again.
	OperatorActions int
	Revocations     bool
	LeaseDeletes    bool
	// CacheLag, when positive, gives the controller an informer cache that
	// catches up with the lease at most that many ticks after its latest
	// commit (it may skip versions); otherwise it reads the lease as stored.
	CacheLag int
	// Check lists the invariants judged (empty: all of them).
	Check []string
	// WriteRetries bounds how often a guarded write is admitted again
	// because the object changed before it committed.
	WriteRetries int
	// HeartbeatDelay bounds, in ticks, the time from a heartbeat update's
	// sending to its commit; HeartbeatLag how long after its commit the
	// controller's heartbeat informer sights it (ClientSpec.Heartbeat).
	HeartbeatDelay, HeartbeatLag int
}

// ClientSpec is one party competing for the lease.
type ClientSpec struct {
	// Name is the process, and its Kubernetes user.
	Name string
	// Identity is the holderIdentity an honest client requests with.
	Identity string
	// Queued: the lease starts with this client's request.
	Queued bool
	// Renewals, Writes and Tokenless bound its renewals, its token writes
	// and its tokenless writes (a /status update) of the guarded object.
	Renewals, Writes, Tokenless int
	// Joins bounds how often it queues a request (after the first; a
	// malicious client: every request it appends).
	Joins int
	// Releases bounds how often it releases the lease.
	Releases int
	// Malicious: any identity, any write its RBAC allows (identityBinding None).
	Malicious bool
	// MayCrash: an honest client may stop for good at any time (its writes
	// under way go on).
	MayCrash bool
	// Timeouts bounds how often it gives up waiting for a write's answer
	// (the write may still commit: its outcome is unknown).
	Timeouts int
	// SplitGate and NoQuiesce model clients as they were before the fixes
	// for finding 4 of the 2026-12-01 review, which the explorer cannot run
	// (they are goroutines and a mutex, not a pure step): SplitGate, the
	// FencedClient of 40a8d95, which took the token and counted the write in
	// flight in two steps; NoQuiesce, the resourcelock Lock of 40a8d95,
	// whose release withdrew without waiting for writes under way.
	SplitGate, NoQuiesce bool
	// Heartbeat: its requests name a heartbeat Lease, which renews its
	// tenures once acknowledged (heartbeat.go; one client at most).
	Heartbeat bool
	// Session: the heartbeat is its process's session heartbeat, which
	// beats for its other tenures too: at any time, leading this lease or
	// not (pkg/fence Heartbeat.Session).
	Session bool
}

func (c *Config) validate() error {
	if c.Tick <= 0 || c.Horizon < 0 || c.LeaseSeconds <= 0 {
		return fmt.Errorf("config %s: Tick and LeaseSeconds must be positive, Horizon not negative", c.Name)
	}
	if len(c.Clients) == 0 || len(c.Clients) > maxClients {
		return fmt.Errorf("config %s: 1 to %d clients", c.Name, maxClients)
	}
	hb := 0
	for _, cl := range c.Clients {
		if cl.Heartbeat {
			hb++
		}
	}
	if hb > 1 {
		return fmt.Errorf("config %s: at most one client renews by a heartbeat, got %d", c.Name, hb)
	}
	return nil
}

// ticks rounds d up to ticks.
func (c *Config) ticks(d time.Duration) int {
	return int((d + c.Tick - 1) / c.Tick)
}
