package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/webhooks/fencing"
)

// The fencing webhook's lease reader as shipped at 73a2e0a (main before
// the webhook-read change): controllers/webhooks/fencing/leases.go and
// turns.go of that commit, renamed, and otherwise unchanged. A decision
// there joined only the read queued behind the one under way; every read
// ran on a goroutine of its own and took its turn from the dispatcher's.
// The guarded-writes phase serves it beside today's reader
// (-baseline-writes), so that before and after are measured in one run.
// Remove it with that pass.

// newMainLeaseReader is 73a2e0a's NewLeaseReader.
func newMainLeaseReader(cfg *rest.Config, c client.Options) (*mainLeaseReader, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	cl, err := client.New(cfg, c)
	if err != nil {
		return nil, err
	}
	return &mainLeaseReader{Reader: cl, turns: newMainTurns(flowcontrol.NewTokenBucketRateLimiter(fencing.LeaseReadQPS, fencing.LeaseReadBurst))}, nil
}

// Read is 73a2e0a's Read; it takes no arrival (that reader ordered a
// decision's read only by when the decision asked).
func (r *mainLeaseReader) Read(ctx context.Context, namespace, name string, _ time.Time) (fencing.LeaseState, error) {
	return r.read0(ctx, namespace, name)
}

type mainLeaseReader struct {
	// Reader reads from the API server, never from a cache.
	Reader client.Reader
	// Timeout bounds one read (default fencing.DefaultReadTimeout).
	Timeout time.Duration
	// Tenures, in policy mode, reads a lease's entry in its namespace's
	// tenure table live (controllers/policy; the operator wires it): the
	// token it names and whether it names a holder. A tenure the table no
	// longer names counts as ended. The table is written before a grant's
	// barrier and commit-lag wait, and in policy mode a holder's renewTime
	// is bounded by no clock, so the stamp cannot bound the tenure for the
	// /scale and eviction paths; the table can. Nil in webhook mode.
	Tenures func(ctx context.Context, namespace, name string) (token int64, held bool, err error)

	// turns, when set, is the budget every read waits for its turn of.
	turns *mainTurns

	mu      sync.Mutex
	flights map[types.NamespacedName]*mainLeaseFlights
	// known are the leases whose latest read found them: their reads take
	// turns before those of names not known to exist.
	known map[types.NamespacedName]bool
	// reads counts the API reads made (for tests and benchmarks).
	reads int64
}

type mainLeaseFlights struct {
	running, next *mainFlight
}

type mainFlight struct {
	done chan struct{}
	st   fencing.LeaseState
	err  error
}

// Read returns the lease's state from a read that started after Read was called.
func (r *mainLeaseReader) read0(ctx context.Context, namespace, name string) (fencing.LeaseState, error) {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	r.mu.Lock()
	if r.flights == nil {
		r.flights = map[types.NamespacedName]*mainLeaseFlights{}
	}
	lf := r.flights[key]
	if lf == nil {
		lf = &mainLeaseFlights{}
		r.flights[key] = lf
	}
	var f *mainFlight
	if lf.running == nil {
		// Nothing in flight: start a read now.
		f = &mainFlight{done: make(chan struct{})}
		lf.running = f
		r.reads++
		r.mu.Unlock()
		go r.run(key, lf, f)
	} else {
		// A read is in flight, but it started before this call: wait for the
		// next one, which starts when it ends.
		if lf.next == nil {
			lf.next = &mainFlight{done: make(chan struct{})}
		}
		f = lf.next
		r.mu.Unlock()
	}
	select {
	case <-f.done:
		return f.st, f.err
	case <-ctx.Done():
		return fencing.LeaseState{}, ctx.Err()
	}
}

// read waits for the read's turn, if the reader has a budget, and reads
// the lease; it remembers whether the lease exists.
func (r *mainLeaseReader) read(ctx context.Context, key types.NamespacedName, timeout time.Duration) (fencing.LeaseState, error) {
	if r.turns != nil {
		r.mu.Lock()
		known := r.known[key]
		r.mu.Unlock()
		if err := r.turns.wait(ctx, key.Namespace, known); err != nil {
			return fencing.LeaseState{}, fmt.Errorf("no turn to read lease %s within %v: the webhook's lease reads (%d a second, shared fairly between namespaces) are busy with other reads of namespace %s (%w)",
				key, timeout, fencing.LeaseReadQPS, key.Namespace, err)
		}
	}
	st, err := mainReadLease(ctx, r.Reader, key.Namespace, key.Name)
	if err == nil {
		r.mu.Lock()
		if st.Exists {
			if r.known == nil {
				r.known = map[types.NamespacedName]bool{}
			}
			r.known[key] = true
		} else {
			delete(r.known, key)
		}
		r.mu.Unlock()
	}
	return st, err
}

func (r *mainLeaseReader) run(key types.NamespacedName, lf *mainLeaseFlights, f *mainFlight) {
	for f != nil {
		timeout := r.Timeout
		if timeout <= 0 {
			timeout = fencing.DefaultReadTimeout
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		f.st, f.err = r.read(ctx, key, timeout)
		if f.err == nil && r.Tenures != nil && f.st.Holder != "" {
			// After the lease, so that a table write before this read is seen.
			token, held, err := r.Tenures(ctx, key.Namespace, key.Name)
			switch {
			case err != nil:
				f.err = err
			case !held || token != f.st.Token:
				f.st.Holder, f.st.HolderUser, f.st.ExpireTime = "", "", time.Time{}
			}
		}
		cancel()
		close(f.done)

		r.mu.Lock()
		f = lf.next
		lf.next = nil
		lf.running = f
		if f == nil {
			delete(r.flights, key)
		} else {
			r.reads++
		}
		r.mu.Unlock()
	}
}

// readLease reduces a FencedLease to what the fencing rule needs. A tenure
// counts as ended (no holder) as soon as it is ended in the API server, even
// before the controller records the end in status: when the lease is being
// deleted, or when no request carries the tenure
// (coordv1alpha1.HolderRequestIndex): the holder's request is gone (a
// release, or an operator's revocation), or it was withdrawn and made again
// (by another user than status.holderUser, or with a renewSequence below the
// one the controller acknowledged). The holder's user is that of the
// granted request, never of one made again under its identity.
func mainReadLease(ctx context.Context, r client.Reader, namespace, name string) (fencing.LeaseState, error) {
	var l coordv1alpha1.FencedLease
	if err := r.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &l); err != nil {
		if apierrors.IsNotFound(err) {
			return fencing.LeaseState{}, nil
		}
		return fencing.LeaseState{}, err
	}
	st := fencing.LeaseState{Exists: true, Token: l.Status.FencingToken, Holder: l.Status.HolderIdentity, Binding: l.Spec.IdentityBinding,
		TokenBase: l.Status.TokenBase, LeaseDuration: time.Duration(l.Status.LeaseDurationSeconds) * time.Second}
	if l.Status.ExpireTime != nil {
		st.ExpireTime = l.Status.ExpireTime.Time
	}
	if st.Holder == "" {
		return st, nil
	}
	i := coordv1alpha1.HolderRequestIndex(l.Spec.Requests, &l.Status)
	if i < 0 || !l.DeletionTimestamp.IsZero() {
		st.Holder, st.ExpireTime = "", time.Time{}
		return st, nil
	}
	req := &l.Spec.Requests[i]
	st.HolderUser = req.User
	if req.RenewTime != nil {
		st.RenewStamp = req.RenewTime.Time
	}
	return st, nil
}

type mainTurns struct {
	budget flowcontrol.RateLimiter

	mu sync.Mutex
	// queues are the turns waiting per namespace; order is the namespaces
	// with turns waiting, in round-robin order.
	queues  map[string]*mainNamespaceTurns
	order   []string
	running bool
}

type mainNamespaceTurns struct {
	known, unknown []*mainTurn
}

type mainTurn struct {
	ready     chan struct{}
	granted   bool
	abandoned bool
}

func newMainTurns(budget flowcontrol.RateLimiter) *mainTurns {
	return &mainTurns{budget: budget, queues: map[string]*mainNamespaceTurns{}}
}

// wait returns once it is the caller's turn to read a lease of namespace
// (known: the lease existed at its last read), or with ctx's error.
func (t *mainTurns) wait(ctx context.Context, namespace string, known bool) error {
	tn := &mainTurn{ready: make(chan struct{})}
	t.mu.Lock()
	q := t.queues[namespace]
	if q == nil {
		q = &mainNamespaceTurns{}
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
func (t *mainTurns) dispatch() {
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
func (t *mainTurns) next() *mainTurn {
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
func (q *mainNamespaceTurns) pop() *mainTurn {
	for _, list := range []*[]*mainTurn{&q.known, &q.unknown} {
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
