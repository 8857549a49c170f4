package fencing

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// DefaultReadTimeout bounds one live read of a lease: well inside the
// webhooks' 3 s timeout, so that a slow read is refused (fail closed) with a
// message rather than cut off by the API server.
const DefaultReadTimeout = 2 * time.Second

// LeaseSource is where the fencing handler reads the leases its decisions
// depend on. LeaseReader is the one the operator serves (a benchmark serves
// an earlier reader through it, side by side).
type LeaseSource interface {
	// Read returns the state of lease namespace/name from a read sent to the
	// API server after arrived, the instant the decision arrived (on the
	// monotonic clock of time.Now).
	Read(ctx context.Context, namespace, name string, arrived time.Time) (LeaseState, error)
}

// LeaseReader reads FencedLeases from the API server for the fencing rule.
//
// Every read is linearizable: a plain GET (no resourceVersion) is a quorum
// read from etcd, so it reflects every write committed before it was sent.
// Concurrent decisions about one lease share reads (single flight), but a
// decision only joins a read *sent after the decision arrived*: a read sent
// earlier might miss a grant or a tenure end committed just before the write
// arrived. So there is at most one read in flight and one queued per lease,
// whatever the write rate, and a flood of writes naming one lease (forged
// tokens among them) costs at most that lease's queue. Reads take turns of
// the reader's own budget (NewLeaseReader: LeaseReadQPS, apart from the
// manager's), fairly between namespaces and, within one, leases known to
// exist first (turns): a flood of forged lease *names* waits for its own
// namespace's turns.
//
// The read path is one place: read (the GET, after its turn) and readLease
// (what the rule needs of the object). A decision that finds no read of its
// lease under way sends one itself, on its own goroutine; only the reads
// queued behind it run on another.
type LeaseReader struct {
	// Reader reads from the API server, never from a cache.
	Reader client.Reader
	// Timeout bounds one read (default DefaultReadTimeout).
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
	turns *turns
	// now is the clock reads are timed on against a decision's arrival
	// (default time.Now; tests set it).
	now func() time.Time

	mu      sync.Mutex
	flights map[types.NamespacedName]*leaseFlights
	// known are the leases whose latest read found them: their reads take
	// turns before those of names not known to exist.
	known map[types.NamespacedName]bool
	// reads counts the API reads made (for tests and benchmarks).
	reads int64
}

var _ LeaseSource = (*LeaseReader)(nil)

type leaseFlights struct {
	// running is the read under way (sent, or waiting for its turn); next
	// is the one queued behind it, sent when it ends.
	running, next *flight
}

type flight struct {
	done chan struct{}
	// sent is when the read was sent (zero while it waits for its turn):
	// only decisions that arrived before it may share it. Set under
	// LeaseReader.mu.
	sent time.Time
	st   LeaseState
	err  error
}

// Reads is how many API reads the reader has made.
func (r *LeaseReader) Reads() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reads
}

func (r *LeaseReader) clock() time.Time {
	if r.now != nil {
		return r.now()
	}
	return time.Now()
}

// Read returns the lease's state from a read sent after arrived.
//
// The rule: a decision joins the read under way if that read was sent
// strictly after the decision arrived, or has not been sent yet (it will
// be, later than now); otherwise it waits for the next read, which is sent
// when the one under way ends. A read sent at or before arrival is never
// shared with the decision (TestLeaseReaderJoinsOnlyReadsSentAfterArrival).
func (r *LeaseReader) Read(ctx context.Context, namespace, name string, arrived time.Time) (LeaseState, error) {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	r.mu.Lock()
	if r.flights == nil {
		r.flights = map[types.NamespacedName]*leaseFlights{}
	}
	lf := r.flights[key]
	if lf == nil {
		lf = &leaseFlights{}
		r.flights[key] = lf
	}
	var f *flight
	switch {
	case lf.running == nil:
		// Nothing under way: send a read now, from this goroutine.
		f = &flight{done: make(chan struct{})}
		lf.running = f
		r.reads++
		r.mu.Unlock()
		r.run(key, lf, f)
		return f.st, f.err
	case lf.running.sent.IsZero() || lf.running.sent.After(arrived):
		// The read under way is sent after this decision arrived.
		f = lf.running
	default:
		// The read under way was sent before this decision arrived (or at
		// the same instant): wait for the next one.
		if lf.next == nil {
			lf.next = &flight{done: make(chan struct{})}
		}
		f = lf.next
	}
	r.mu.Unlock()
	select {
	case <-f.done:
		return f.st, f.err
	case <-ctx.Done():
		return LeaseState{}, ctx.Err()
	}
}

// read waits for the read's turn, if the reader has a budget, and reads
// the lease; it remembers whether the lease exists.
func (r *LeaseReader) read(ctx context.Context, key types.NamespacedName, f *flight, timeout time.Duration) (LeaseState, error) {
	if r.turns != nil {
		r.mu.Lock()
		known := r.known[key]
		r.mu.Unlock()
		if err := r.turns.wait(ctx, key.Namespace, known); err != nil {
			return LeaseState{}, fmt.Errorf("no turn to read lease %s within %v: the webhook's lease reads (%d a second, shared fairly between namespaces) are busy with other reads of namespace %s (%w)",
				key, timeout, LeaseReadQPS, key.Namespace, err)
		}
	}
	r.mu.Lock()
	f.sent = r.clock()
	r.mu.Unlock()
	st, err := readLease(ctx, r.Reader, key.Namespace, key.Name)
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

// run makes read f and ends it; if a read was queued behind it meanwhile,
// it makes that one (and any queued behind it in turn) on another goroutine.
func (r *LeaseReader) run(key types.NamespacedName, lf *leaseFlights, f *flight) {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = DefaultReadTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	f.st, f.err = r.read(ctx, key, f, timeout)
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
	next := lf.next
	lf.next = nil
	lf.running = next
	if next == nil {
		delete(r.flights, key)
	} else {
		r.reads++
	}
	r.mu.Unlock()
	if next != nil {
		go r.run(key, lf, next)
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
func readLease(ctx context.Context, r client.Reader, namespace, name string) (LeaseState, error) {
	var l coordv1alpha1.FencedLease
	if err := r.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &l); err != nil {
		if apierrors.IsNotFound(err) {
			return LeaseState{}, nil
		}
		return LeaseState{}, err
	}
	st := LeaseState{Exists: true, Token: l.Status.FencingToken, Holder: l.Status.HolderIdentity, Binding: l.Spec.IdentityBinding,
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
	hb, err := heartbeatStamp(ctx, r, &l, req)
	if err != nil {
		return LeaseState{}, err
	}
	if hb.After(st.RenewStamp) {
		st.RenewStamp = hb
	}
	return st, nil
}

// NewLeaseReader is a LeaseReader with a client of its own for cfg: its own
// connection pool and its own budget (LeaseReadQPS, burst LeaseReadBurst,
// handed out fairly by turns), so that the webhook's reads neither wait
// behind the manager's other requests nor starve them, and a namespace's
// flood of reads does not starve the others. The client itself does not
// wait: the budget is taken before the read (in policy mode a flight's
// tenure-table read rides on its lease read's turn).
func NewLeaseReader(cfg *rest.Config, scheme *runtime.Scheme) (*LeaseReader, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("creating the fencing webhook's lease client: %w", err)
	}
	return newLeaseReader(c), nil
}

// newLeaseReader is NewLeaseReader's reader around c.
func newLeaseReader(c client.Reader) *LeaseReader {
	return &LeaseReader{Reader: c, turns: newTurns(flowcontrol.NewTokenBucketRateLimiter(LeaseReadQPS, LeaseReadBurst))}
}
