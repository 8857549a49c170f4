package explorer

import (
	"fmt"
	"time"
)

// Result is one exploration.
type Result struct {
	Config string
	// States counts the distinct states reached, Transitions the steps
	// taken, Depth the longest shortest path (in steps).
	States, Transitions, Depth int
	Elapsed                    time.Duration
	// Complete: every state within the bounds was explored (no state limit
	// was hit). A state in which an invariant broke is not explored further.
	Complete bool
	// Violations holds the shortest counterexample found to each invariant
	// that broke, in the order found.
	Violations []*Trace
}

// Violation returns the counterexample to prop, or nil.
func (r *Result) Violation(prop string) *Trace {
	for _, t := range r.Violations {
		if t.Prop == prop {
			return t
		}
	}
	return nil
}

func (r *Result) String() string {
	s := fmt.Sprintf("%s: %d states, %d transitions, depth %d, %v", r.Config, r.States, r.Transitions, r.Depth, r.Elapsed.Round(time.Millisecond))
	if r.Complete {
		s += ", exhaustive"
	} else {
		s += ", state limit reached"
	}
	if len(r.Violations) == 0 {
		return s + ", no violation"
	}
	for _, v := range r.Violations {
		s += fmt.Sprintf(", VIOLATION of %s (%d steps)", v.Prop, len(v.Steps))
	}
	return s
}

// node is a visited state: how it was first reached (breadth-first: by a
// shortest path).
type node struct {
	parent int32 // -1: an initial state
	k      uint16
}

// Explore runs cfg breadth-first until every state within its bounds was
// seen or maxStates states were reached (0: no limit). The first violation
// of each invariant found is on a shortest path to one.
func Explore(cfg Config, maxStates int) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m := &model{cfg: &cfg}
	start := time.Now()
	res := &Result{Config: cfg.Name}
	var nodes []node
	visited := map[[2]uint64]int32{}
	type item struct {
		s     *state
		node  int32
		depth int
	}
	var queue []item
	for k, s := range m.initial() {
		key := m.key(s)
		if _, seen := visited[key]; seen {
			continue
		}
		visited[key] = int32(len(nodes))
		nodes = append(nodes, node{parent: -1, k: uint16(k)})
		queue = append(queue, item{s, int32(len(nodes) - 1), 0})
	}
	for head := 0; head < len(queue); head++ {
		it := queue[head]
		queue[head] = item{}
		succs := m.successors(it.s)
		for k, sc := range succs {
			res.Transitions++
			key := m.key(sc.next)
			if _, seen := visited[key]; seen {
				continue
			}
			visited[key] = int32(len(nodes))
			nodes = append(nodes, node{parent: it.node, k: uint16(k)})
			res.Depth = max(res.Depth, it.depth+1)
			if v := sc.next.violation; v != nil {
				if res.Violation(v.prop) == nil {
					res.Violations = append(res.Violations, m.trace(nodes, int32(len(nodes)-1)))
				}
				continue
			}
			if maxStates > 0 && len(nodes) >= maxStates {
				res.States = len(nodes)
				res.Elapsed = time.Since(start)
				return res, nil
			}
			queue = append(queue, item{sc.next, int32(len(nodes) - 1), it.depth + 1})
		}
		if head > 1<<16 && head > len(queue)/2 {
			queue = append([]item(nil), queue[head+1:]...)
			head = -1
		}
	}
	res.States = len(nodes)
	res.Elapsed = time.Since(start)
	res.Complete = true
	return res, nil
}

// trace replays the path to node n from its initial state.
func (m *model) trace(nodes []node, n int32) *Trace {
	var path []uint16
	for ; nodes[n].parent >= 0; n = nodes[n].parent {
		path = append(path, nodes[n].k)
	}
	s := m.initial()[nodes[n].k]
	t := &Trace{cfg: m.cfg, m: m, Initial: s}
	for i := len(path) - 1; i >= 0; i-- {
		sc := m.successors(s)[path[i]]
		t.Steps = append(t.Steps, Step{Who: sc.who, Label: sc.label, State: sc.next, Before: s})
		s = sc.next
	}
	t.Prop, t.What = s.violation.prop, s.violation.what
	return t
}
