package fencing

import (
	"context"
	"sync"

	"k8s.io/client-go/util/flowcontrol"
)

// Lease read budget of a replica's webhook (NewLeaseReader): every live read
// of a lease takes one turn of it.
const (
	LeaseReadQPS   = 500
	LeaseReadBurst = 1000
)

// turns hands out a rate budget one read at a time, fairly: round robin over
// the namespaces that have reads waiting, and within a namespace to leases
// known to exist before the others, each in arrival order.
//
// So a flood of reads naming leases that do not exist (dry-run creates
// labelled kubefence.io/lease=<random name>: each name a new flight, each a
// live GET) waits for its own namespace's turns. A read in another namespace
// waits for at most one turn per namespace with reads waiting, and a read
// of a lease known to exist for at most the known leases of its namespace
// queued ahead of it (one flight each), whatever the flood. The flood's own
// reads wait, and fail closed when their turn does not come within the read
// timeout.
type turns struct {
	budget flowcontrol.RateLimiter

	mu sync.Mutex
	// queues are the turns waiting per namespace; order is the namespaces
	// with turns waiting, in round-robin order.
	queues  map[string]*namespaceTurns
	order   []string
	running bool
}

type namespaceTurns struct {
	known, unknown []*turn
}

type turn struct {
	ready     chan struct{}
	granted   bool
	abandoned bool
}

func newTurns(budget flowcontrol.RateLimiter) *turns {
	return &turns{budget: budget, queues: map[string]*namespaceTurns{}}
}

// wait returns once it is the caller's turn to read a lease of namespace
// (known: the lease existed at its last read), or with ctx's error.
func (t *turns) wait(ctx context.Context, namespace string, known bool) error {
	t.mu.Lock()
	if !t.running && t.budget.TryAccept() {
		// No turn waits and the budget has a token: this is the turn,
		// without a hand-over to the dispatcher (the common case).
		t.mu.Unlock()
		return nil
	}
	tn := &turn{ready: make(chan struct{})}
	q := t.queues[namespace]
	if q == nil {
		q = &namespaceTurns{}
		t.queues[namespace] = q
		t.order = append(t.order, namespace)
	}
	if known {
		q.known = append(q.known, tn)
	} else {
		q.unknown = append(q.unknown, tn)
	}
	if !t.running {
		t.running = true
		go t.dispatch()
	}
	t.mu.Unlock()

	select {
	case <-tn.ready:
		return nil
	case <-ctx.Done():
		t.mu.Lock()
		defer t.mu.Unlock()
		if tn.granted {
			return nil
		}
		tn.abandoned = true
		return ctx.Err()
	}
}

// dispatch takes the budget's tokens one by one and gives each to the next
// turn, until no turn waits. Each token is taken before the turn is chosen,
// so a read that arrives while the dispatcher waits for a token competes
// for it.
func (t *turns) dispatch() {
	for {
		t.mu.Lock()
		if len(t.order) == 0 {
			t.running = false
			t.mu.Unlock()
			return
		}
		t.mu.Unlock()
		t.budget.Accept()
		t.mu.Lock()
		if tn := t.next(); tn != nil {
			tn.granted = true
			close(tn.ready)
		}
		t.mu.Unlock()
	}
}

// next pops the next turn in round-robin order (nil when every waiting turn
// was abandoned); t.mu is held.
func (t *turns) next() *turn {
	for len(t.order) > 0 {
		ns := t.order[0]
		t.order = t.order[1:]
		q := t.queues[ns]
		tn := q.pop()
		if len(q.known)+len(q.unknown) > 0 {
			t.order = append(t.order, ns)
		} else {
			delete(t.queues, ns)
		}
		if tn != nil {
			return tn
		}
	}
	return nil
}

// pop takes the first turn not abandoned, known leases first.
func (q *namespaceTurns) pop() *turn {
	for _, list := range []*[]*turn{&q.known, &q.unknown} {
		for len(*list) > 0 {
			tn := (*list)[0]
			(*list)[0] = nil
			*list = (*list)[1:]
			if !tn.abandoned {
				return tn
			}
		}
	}
	return nil
}
