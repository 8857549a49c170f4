package explorer

import (
	"fmt"
	"time"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence"
	"github.com/kubefence/kubefence/pkg/fence/protocol"
)

// An honest client is an Elector (pkg/fence) with a FencedClient: it queues
// once the controller no longer names it, acknowledges its grant with a
// renewal (its deadline counts from when it sent it: fence.Config.Deadline),
// renews, writes only before its deadline, steps down on a stale refusal,
// notices when the lease moved on, and releases by closing its write gate,
// waiting for its writes under way, and withdrawing its request
// (protocol.WithdrawPatch), unless one of them ended without an answer: then
// it keeps the request and lets the tenure expire (what fence.Writes.Quiesce
// answers, gate.go).
//
// A malicious client (identityBinding None) appends requests under any
// identity, renews them with the latest stamp the FencedLease webhook takes,
// and sends tokenless writes, and writes with the lease's current token,
// whenever it likes.

// leading tells whether client i's write gate is open: it leads and its
// deadline has not passed on its clock.
func (m *model) leading(s *state, i int) bool {
	c := &s.clients[i]
	return c.phase == cLeading && s.now(m.cfg, pClient0+i).Before(c.deadline)
}

// ackDue tells whether honest client i's watch shows it a grant to
// acknowledge: the Elector leads whenever status names it and its request
// exists, unless it stepped down from that token.
func (m *model) ackDue(s *state, i int) bool {
	spec := &m.cfg.Clients[i]
	c := &s.clients[i]
	lease := s.lease.obj
	if spec.Malicious || c.phase == cCrashed || c.phase == cReleasing || lease == nil || m.leading(s, i) {
		return false
	}
	if lease.Status.FencingToken == c.acked && c.renewals >= spec.Renewals {
		// Leading that token again (its deadline passed) takes a renewal.
		return false
	}
	return lease.Status.HolderIdentity == spec.Identity && coordv1alpha1.RequestIndex(lease.Spec.Requests, spec.Identity) >= 0 &&
		lease.Status.FencingToken != c.fenced
}

func (m *model) clientActions(s *state, i int, out []succ) []succ {
	spec := &m.cfg.Clients[i]
	if spec.Malicious {
		return m.maliciousActions(s, i, out)
	}
	c := &s.clients[i]
	name := spec.Name
	lease := s.lease.obj
	if lease == nil || c.phase == cCrashed {
		return out
	}
	idx := coordv1alpha1.RequestIndex(lease.Spec.Requests, spec.Identity)
	holder := lease.Status.HolderIdentity == spec.Identity

	if m.ackDue(s, i) {
		out = append(out, m.renew(s, i, true))
	}
	if spec.MayCrash {
		n := s.clone()
		n.clients[i].phase = cCrashed
		out = append(out, succ{pClient0 + i, fmt.Sprintf("%s crashes (its writes under way go on)", name), n})
	}
	if m.leading(s, i) {
		switch {
		case c.renewals >= spec.Renewals:
		case spec.Session:
			// Below: a session beats whether it leads or not.
		case spec.Heartbeat && holder && lease.Status.FencingToken == c.token:
			// Elector.beat: one update at a time, while its view names it.
			if !s.hb.flight {
				out = append(out, m.beat(s, i))
			}
		default:
			out = append(out, m.renew(s, i, false))
		}
		if c.writes < spec.Writes && (spec.SplitGate || writeGateSplit()) {
			// The FencedClient of 40a8d95 (or fence.Writes with finding
			// 4a's fix reverted, gate.go): the token first...
			n := s.clone()
			n.clients[i].writes++
			n.clients[i].taken++
			out = append(out, succ{pClient0 + i, fmt.Sprintf("%s's FencedClient takes token %d for a write (fence.Writes.Begin: not counted yet)", name, c.token), n})
		} else if c.writes < spec.Writes {
			out = append(out, m.send(s, i, false, c.token, fmt.Sprintf("%s sends a guarded write with token %d (fence.Writes.Begin: token and count in one step)", name, c.token)))
		}
		if c.tokenless < spec.Tokenless && s.obj.exists {
			out = append(out, m.send(s, i, true, c.token, fmt.Sprintf("%s sends a tokenless /status write (holding token %d)", name, c.token)))
		}
		if c.releases < spec.Releases {
			// Elector.Release: the leadership context is cancelled and the
			// write gate closes (Token answers no more); the request goes
			// once the writes under way returned (fence.Writes.Quiesce).
			n := s.clone()
			nc := &n.clients[i]
			nc.phase, nc.released, nc.quiet = cReleasing, n.t, -1
			nc.releases++
			out = append(out, succ{pClient0 + i, fmt.Sprintf("%s releases token %d: stops leading", name, c.token), n})
		}
		if !holder || lease.Status.FencingToken != c.token {
			// Its watch shows the lease moved on.
			n := s.clone()
			n.clients[i].phase = cLost
			out = append(out, succ{pClient0 + i, fmt.Sprintf("%s sees the lease no longer names it with token %d and stops leading", name, c.token), n})
		}
	}
	if spec.Session && !s.hb.flight && c.renewals < spec.Renewals {
		out = append(out, m.beat(s, i))
	}
	if c.taken > 0 {
		// ... then, later, the count and the write (whatever the gate says
		// by now).
		sc := m.send(s, i, false, c.token, fmt.Sprintf("%s's FencedClient counts its write with token %d and sends it", name, c.token))
		sc.next.clients[i].taken--
		sc.next.clients[i].writes-- // counted when it took the token
		out = append(out, sc)
	}
	if spec.Timeouts > c.timeouts {
		for j, w := range s.writes {
			if w.client != i || w.abandoned {
				continue
			}
			n := s.clone()
			n.writes[j].abandoned = true
			nc := &n.clients[i]
			nc.inflight--
			nc.unknown = true
			nc.timeouts++
			out = append(out, succ{pClient0 + i, fmt.Sprintf("%s gives up waiting for its write's answer (the outcome is unknown: it may still commit)", name), n})
		}
	}
	if c.phase == cReleasing && c.quiet < 0 && !spec.NoQuiesce {
		// fence.Writes.Quiesce: it waits until no write is under way, at
		// most a lease duration (then as for an unknown outcome).
		timedOut := s.t-c.released >= m.cfg.ticks(time.Duration(m.cfg.LeaseSeconds)*time.Second)
		if c.inflight == 0 || timedOut {
			n := s.clone()
			nc := &n.clients[i]
			nc.quiet = n.t
			label := fmt.Sprintf("%s's release sees no write under way", name)
			if c.inflight > 0 {
				nc.unknown = true
				label = fmt.Sprintf("%s's release stops waiting for its writes after a lease duration", name)
			}
			if nc.unknown {
				// What follows is the shipped Quiesce's answer (gate.go).
				if withdraw, after := releaseAfterUnknown(); withdraw {
					label += fmt.Sprintf(" (one's outcome is unknown: it waits %v more)", after)
				} else {
					nc.phase, nc.fenced = cLost, c.token
					label += fmt.Sprintf(" (one's outcome is unknown: it keeps its request, renews no more and lets the tenure of token %d expire)", c.token)
				}
			}
			out = append(out, succ{pClient0 + i, label, n})
		}
	}
	if c.phase == cReleasing && c.withdrawing == nil && m.quiesced(s, i) {
		n := s.clone()
		nc := &n.clients[i]
		nc.withdrawing, nc.withdrawSent, nc.unknown = n.lease, n.t, false
		out = append(out, succ{pClient0 + i, fmt.Sprintf("%s sends the withdraw of its request (built on rev %d)", name, n.lease.rev), n})
	}
	if c.withdrawing != nil {
		out = append(out, m.withdraw(s, i))
	}
	// Queue (again): only once the controller no longer names it as holder.
	if idx < 0 && !holder && c.phase != cLeading && c.phase != cReleasing && (c.phase == cIdle || c.joins < spec.Joins) {
		out = append(out, m.join(s, i, spec.Identity, c.phase != cIdle))
	}
	return out
}

// join appends a request of identity for client i (an update with the
// resourceVersion it read).
func (m *model) join(s *state, i int, identity string, counts bool) succ {
	spec := &m.cfg.Clients[i]
	n := s.clone()
	updated := n.lease.obj.DeepCopy()
	updated.Spec.Requests = append(updated.Spec.Requests, coordv1alpha1.LeaseRequest{HolderIdentity: identity, User: spec.Name, Heartbeat: m.heartbeatOf(i)})
	label := fmt.Sprintf("%s queues a request as %q", spec.Name, identity)
	if counts {
		n.clients[i].joins++
	}
	if err := m.updateLease(n, m.clientWriter(i), updated, true); err != nil {
		return succ{pClient0 + i, label + fmt.Sprintf(": refused: %v", err), n}
	}
	if !spec.Malicious {
		n.clients[i].phase = cQueued
	}
	return succ{pClient0 + i, label + fmt.Sprintf(": committed at rev %d", n.rev), n}
}

// quiesced tells whether client i's release may withdraw its request
// (fence.Writes.Quiesce): no write of the tenure is under way, or a lease
// duration passed; and if one ended without an answer (or is still under
// way), as the shipped Quiesce answered the probe (gate.go): never (the
// release kept the request), or after the wait it measured.
func (m *model) quiesced(s *state, i int) bool {
	c := &s.clients[i]
	if m.cfg.Clients[i].NoQuiesce {
		return true
	}
	if c.quiet < 0 {
		return false
	}
	if !c.unknown {
		return true
	}
	withdraw, after := releaseAfterUnknown()
	return withdraw && s.t-c.quiet >= m.cfg.ticks(after)
}

// withdraw is client i's withdraw patch (protocol.WithdrawPatch, built on
// the version it read, testing its request as it was) reaching the API
// server; if the test fails the Elector reads the lease and sends it again.
func (m *model) withdraw(s *state, i int) succ {
	spec := &m.cfg.Clients[i]
	n := s.clone()
	nc := &n.clients[i]
	base := nc.withdrawing
	nc.withdrawing = nil
	p := protocol.WithdrawPatch(base.obj, spec.Identity)
	if base.obj == nil || p == nil {
		nc.phase = cLost
		return succ{pAPIServer, fmt.Sprintf("%s's withdraw: no request left to withdraw", spec.Name), n}
	}
	if err := m.patchLease(n, m.clientWriter(i), p); err != nil {
		return succ{pAPIServer, fmt.Sprintf("%s's withdraw: refused: %v (it reads the lease and sends it again)", spec.Name, err), n}
	}
	nc.phase = cLost
	return succ{pAPIServer, fmt.Sprintf("%s's withdraw commits at rev %d", spec.Name, n.rev), n}
}

// send starts a guarded write of client i, counted in flight: it reaches
// the fencing webhook at once, with the guarded object as it is now (its
// oldObject).
func (m *model) send(s *state, i int, tokenless bool, token int64, label string) succ {
	n := s.clone()
	c := &n.clients[i]
	if tokenless {
		c.tokenless++
	} else {
		c.writes++
	}
	c.inflight++
	n.writes = append(n.writes, write{client: i, tokenless: tokenless, token: token, arrived: n.t, old: n.obj})
	return succ{pClient0 + i, label, n}
}

// renew sends client i's renewal (ack: the one acknowledging its grant):
// one JSON patch testing its request, stamped with its clock; its deadline
// counts from then if the answer still names it with the token.
func (m *model) renew(s *state, i int, ack bool) succ {
	spec := &m.cfg.Clients[i]
	n := s.clone()
	c := &n.clients[i]
	lease := n.lease.obj
	token := lease.Status.FencingToken
	if !ack {
		token = c.token
	}
	sent := n.now(m.cfg, pClient0+i)
	what := "renews"
	if ack {
		what = fmt.Sprintf("acknowledges its grant of token %d", token)
	}
	if !ack || c.acked == token {
		c.renewals++
	}
	if ack {
		c.acked = token
	}
	if !ack && (lease.Status.HolderIdentity != spec.Identity || lease.Status.FencingToken != token) {
		// The Elector renews only a tenure its view still shows.
		c.phase = cLost
		return succ{pClient0 + i, fmt.Sprintf("%s would renew, but the lease no longer names it with token %d: lease lost", spec.Name, token), n}
	}
	p, err := protocol.RenewPatch(lease, spec.Identity, sent)
	if err == nil {
		err = m.patchLease(n, m.clientWriter(i), p)
	}
	if err != nil {
		return succ{pClient0 + i, fmt.Sprintf("%s %s: refused: %v", spec.Name, what, err), n}
	}
	answer := n.lease.obj
	if answer.Status.HolderIdentity != spec.Identity || answer.Status.FencingToken != token {
		c.phase = cLost
		return succ{pClient0 + i, fmt.Sprintf("%s %s (stamp %s), committed at rev %d, but the answer names %q/%d: lease lost",
			spec.Name, what, m.fmtClock(sent), n.rev, answer.Status.HolderIdentity, answer.Status.FencingToken), n}
	}
	cfg := fence.Config{}
	deadline, err := cfg.Deadline(sent, time.Duration(answer.Status.LeaseDurationSeconds)*time.Second)
	if err != nil {
		return succ{pClient0 + i, fmt.Sprintf("%s %s: %v", spec.Name, what, err), n}
	}
	c.phase, c.token, c.deadline = cLeading, token, deadline
	if o := n.ownerOf(token); o != i {
		m.violate(n, propNotHolder, fmt.Sprintf("%s leads token %d, granted to a request of %s", spec.Name, token, m.clientName(o)))
	}
	return succ{pClient0 + i, fmt.Sprintf("%s %s (stamp %s), committed at rev %d; its deadline is %s", spec.Name, what, m.fmtClock(sent), n.rev, m.fmtClock(deadline)), n}
}

// maliciousActions: client i appends requests under any identity, renews
// its own requests with the latest stamp allowed, and writes without a
// gate: tokenless, or with the lease's current token.
func (m *model) maliciousActions(s *state, i int, out []succ) []succ {
	spec := &m.cfg.Clients[i]
	c := &s.clients[i]
	lease := s.lease.obj
	if lease == nil {
		return out
	}
	if c.joins < spec.Joins {
		for _, other := range m.cfg.Clients {
			if coordv1alpha1.RequestIndex(lease.Spec.Requests, other.Identity) < 0 {
				out = append(out, m.join(s, i, other.Identity, true))
			}
		}
	}
	if c.renewals < spec.Renewals {
		for _, r := range lease.Spec.Requests {
			if r.User != spec.Name {
				continue
			}
			n := s.clone()
			n.clients[i].renewals++
			stamp := n.now(m.cfg, pLeaseWebhook).Add(m.cfg.Skew)
			p, err := protocol.RenewPatch(n.lease.obj, r.HolderIdentity, stamp)
			if err == nil {
				err = m.patchLease(n, m.clientWriter(i), p)
			}
			label := fmt.Sprintf("%s renews the request of %q (stamp %s)", spec.Name, r.HolderIdentity, m.fmtClock(stamp))
			if err != nil {
				label += fmt.Sprintf(": refused: %v", err)
			} else {
				label += fmt.Sprintf(": committed at rev %d", n.rev)
			}
			out = append(out, succ{pClient0 + i, label, n})
		}
	}
	if c.tokenless < spec.Tokenless && s.obj.exists {
		out = append(out, m.send(s, i, true, 0, fmt.Sprintf("%s sends a tokenless /status write", spec.Name)))
	}
	if t := lease.Status.FencingToken; c.writes < spec.Writes && t > 0 {
		out = append(out, m.send(s, i, false, t, fmt.Sprintf("%s sends a guarded write with the lease's token %d", spec.Name, t)))
	}
	return out
}

func (m *model) clientName(i int) string {
	if i < 0 {
		return "nobody"
	}
	return m.cfg.Clients[i].Name
}

// writeActions move guarded write j on: its lease read, its answer, its
// commit.
func (m *model) writeActions(s *state, j int, out []succ) []succ {
	w := &s.writes[j]
	name := m.cfg.Clients[w.client].Name
	switch w.phase {
	case wArrived:
		// The lease read, then the decision: answered now or later, within
		// the decision delay.
		for at := s.t; at <= w.arrived+m.cfg.DecisionDelay; at++ {
			n := s.clone()
			nw := &n.writes[j]
			nw.verdict = m.admitGuarded(n, nw, at)
			nw.phase, nw.answerAt, nw.readRev = wDecided, at, n.lease.rev
			nw.checked = w.token
			if w.tokenless && n.lease.obj != nil {
				nw.checked = n.lease.obj.Status.FencingToken
			}
			out = append(out, succ{pFencing, fmt.Sprintf("the fencing webhook reads the lease for %s's write (rev %d); it will answer at %s",
				name, n.lease.rev, m.fmtClock(base.Add(time.Duration(at)*m.cfg.Tick+s.offsets[pFencing]))), n})
		}
	case wDecided:
		if s.t < w.answerAt {
			break
		}
		n := s.clone()
		nw := &n.writes[j]
		v := w.verdict
		what := fmt.Sprintf("write (token %d)", w.token)
		if w.tokenless {
			what = "tokenless write"
		}
		label := fmt.Sprintf("the fencing webhook answers %s's %s (decision started at %s, lease rev %d): %s",
			name, what, m.fmtClock(base.Add(time.Duration(w.arrived)*m.cfg.Tick+s.offsets[pFencing])), w.readRev, v)
		if v.allowed {
			nw.phase, nw.answered = wAnswered, n.t
			return append(out, succ{pFencing, label, n})
		}
		m.endWrite(n, j)
		c := &n.clients[w.client]
		if v.stale && !m.cfg.Clients[w.client].Malicious {
			if n.live.token == w.token && n.live.owner == w.client && m.leading(n, w.client) {
				m.violate(n, propLiveRefused, fmt.Sprintf("%s's write with token %d was refused as stale while its tenure is live and %s is inside its deadline %s",
					name, w.token, name, m.fmtClock(c.deadline)))
			}
			if c.phase == cLeading && c.token == w.token {
				// FencedClient's OnStale: the Elector steps down, and does
				// not lead that token again.
				c.phase, c.fenced = cLost, w.token
				label += "; it steps down"
			}
		}
		out = append(out, succ{pFencing, label, n})
	case wAnswered:
		n := s.clone()
		if n.obj.rev != w.old.rev {
			if w.retries < m.cfg.WriteRetries {
				nw := &n.writes[j]
				nw.phase, nw.arrived, nw.old = wArrived, n.t, n.obj
				nw.retries++
				return append(out, succ{pAPIServer, fmt.Sprintf("%s's write meets a newer object at its commit: admitted again", name), n})
			}
			m.endWrite(n, j)
			return append(out, succ{pAPIServer, fmt.Sprintf("%s's write conflicts at its commit", name), n})
		}
		n.rev++
		n.obj.rev = n.rev
		label := fmt.Sprintf("%s's tokenless write (admitted as the holder of token %d) commits at rev %d", name, w.checked, n.rev)
		if !w.tokenless {
			n.obj.exists, n.obj.hasToken, n.obj.token = true, true, w.token
			label = fmt.Sprintf("%s's write with token %d commits at rev %d", name, w.token, n.rev)
		}
		switch owner := n.ownerOf(w.checked); {
		case w.tokenless && owner != w.client:
			m.violate(n, propNotHolder, fmt.Sprintf("%s's tokenless write committed as the holder of token %d, which was granted to a request of %s",
				name, w.checked, m.clientName(owner)))
		case w.checked < n.maxGranted:
			m.violate(n, propStaleCommit, fmt.Sprintf("%s's write admitted under token %d committed after token %d was granted", name, w.checked, n.maxGranted))
		}
		m.endWrite(n, j)
		out = append(out, succ{pAPIServer, label, n})
	}
	return out
}

// endWrite removes write j: it returned to its client (unless the client
// gave up on it).
func (m *model) endWrite(s *state, j int) {
	if !s.writes[j].abandoned {
		s.clients[s.writes[j].client].inflight--
	}
	s.writes = append(s.writes[:j:j], s.writes[j+1:]...)
}
