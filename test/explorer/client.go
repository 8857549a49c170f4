package explorer

import (
	"fmt"
	"time"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence"
	"github.com/kubefence/kubefence/pkg/fence/protocol"
)

// An honest client is an Elector (pkg/fence) with a FencedClient: it queues,
// acknowledges its grant with a renewal (its deadline counts from when it
// sent it: fence.Config.Deadline), renews, writes only before its deadline,
// steps down on a stale refusal, and notices when the lease moved on.

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
	if spec.Malicious || c.phase == cCrashed || lease == nil || m.leading(s, i) {
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
		if c.renewals < spec.Renewals {
			out = append(out, m.renew(s, i, false))
		}
		if c.writes < spec.Writes {
			n := s.clone()
			n.clients[i].writes++
			n.clients[i].inflight++
			n.writes = append(n.writes, write{client: i, token: c.token, arrived: n.t, old: n.obj})
			out = append(out, succ{pClient0 + i, fmt.Sprintf("%s sends a guarded write with token %d", name, c.token), n})
		}
		if c.tokenless < spec.Tokenless && s.obj.exists {
			n := s.clone()
			n.clients[i].tokenless++
			n.clients[i].inflight++
			n.writes = append(n.writes, write{client: i, tokenless: true, token: c.token, arrived: n.t, old: n.obj})
			out = append(out, succ{pClient0 + i, fmt.Sprintf("%s sends a tokenless /status write (holding token %d)", name, c.token), n})
		}
		if !holder || lease.Status.FencingToken != c.token {
			// Its watch shows the lease moved on.
			n := s.clone()
			n.clients[i].phase = cLost
			out = append(out, succ{pClient0 + i, fmt.Sprintf("%s sees the lease no longer names it with token %d and stops leading", name, c.token), n})
		}
	}
	// Queue (again): only once the controller no longer names it as holder.
	if idx < 0 && !holder && c.phase != cLeading && (c.phase == cIdle || c.joins < spec.Joins) {
		n := s.clone()
		updated := lease.DeepCopy()
		updated.Spec.Requests = append(updated.Spec.Requests, coordv1alpha1.LeaseRequest{HolderIdentity: spec.Identity, User: spec.Name})
		label := fmt.Sprintf("%s queues a request", name)
		if err := m.updateLease(n, m.clientWriter(i), updated, true); err != nil {
			label += fmt.Sprintf(": refused: %v", err)
		} else {
			label += fmt.Sprintf(": committed at rev %d", n.rev)
			if c.phase != cIdle {
				n.clients[i].joins++
			}
			n.clients[i].phase = cQueued
		}
		out = append(out, succ{pClient0 + i, label, n})
	}
	return out
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
	return succ{pClient0 + i, fmt.Sprintf("%s %s (stamp %s), committed at rev %d; its deadline is %s", spec.Name, what, m.fmtClock(sent), n.rev, m.fmtClock(deadline)), n}
}

// writeActions move guarded write j on: its lease read, its answer, its
// commit.
func (m *model) writeActions(s *state, j int, out []succ) []succ {
	w := &s.writes[j]
	name := m.cfg.Clients[w.client].Name
	switch w.phase {
	case wArrived:
		n := s.clone()
		n.writes[j].snap, n.writes[j].phase = n.lease, wRead
		out = append(out, succ{pFencing, fmt.Sprintf("the fencing webhook reads the lease for %s's write (rev %d)", name, n.lease.rev), n})
	case wRead:
		n := s.clone()
		nw := &n.writes[j]
		v := m.admitGuarded(n, nw, nw.old)
		label := fmt.Sprintf("the fencing webhook answers %s's write (token %d, decision started at %s, lease rev %d): %s",
			name, w.token, m.fmtClock(base.Add(time.Duration(w.arrived)*m.cfg.Tick+s.offsets[pFencing])), w.snap.rev, v)
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
				nw.phase, nw.arrived, nw.old, nw.snap = wArrived, n.t, n.obj, nil
				nw.retries++
				return append(out, succ{pAPIServer, fmt.Sprintf("%s's write meets a newer object at its commit: admitted again", name), n})
			}
			m.endWrite(n, j)
			return append(out, succ{pAPIServer, fmt.Sprintf("%s's write conflicts at its commit", name), n})
		}
		n.rev++
		n.obj.rev = n.rev
		label := fmt.Sprintf("%s's tokenless write commits at rev %d", name, n.rev)
		if !w.tokenless {
			n.obj.exists, n.obj.hasToken, n.obj.token = true, true, w.token
			label = fmt.Sprintf("%s's write with token %d commits at rev %d", name, w.token, n.rev)
			if w.token <= n.maxEnded {
				m.violate(n, propStaleCommit, fmt.Sprintf("a write with token %d committed after the commit that ended that tenure (tokens up to %d have ended)", w.token, n.maxEnded))
			}
		} else if n.live.token == 0 || n.live.owner != w.client {
			who := "nobody"
			if n.live.token != 0 {
				who = fmt.Sprintf("%s (token %d)", m.cfg.Clients[n.live.owner].Name, n.live.token)
			}
			m.violate(n, propNotHolder, fmt.Sprintf("%s's tokenless write committed while the live tenure is %s's", name, who))
		}
		m.endWrite(n, j)
		out = append(out, succ{pAPIServer, label, n})
	}
	return out
}

// endWrite removes write j: it returned to its client.
func (m *model) endWrite(s *state, j int) {
	s.clients[s.writes[j].client].inflight--
	s.writes = append(s.writes[:j:j], s.writes[j+1:]...)
}
