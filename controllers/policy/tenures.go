package policy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// Tenures keeps the tenure tables in step with the FencedLeases (the
// fencedlease.TenureTable of the reconciler in policy mode):
//
//   - a grant is written to the table first, with the resourceVersion of the
//     lease it is decided on as its Attempt, and the barrier proves every API
//     server enforces it; only then does the controller write it to status;
//   - every other change (a tenure ended, an entry missing, a grant whose
//     status write failed) is Sync: the entry is made to say what the lease,
//     read live, says, unless a grant written to the table may still commit.
type Tenures struct {
	Table   *Table
	Barrier *Barrier
	// Leases reads FencedLeases live (never a cache).
	Leases client.Reader
	// Excluded namespaces are not fenced: no barrier there.
	Excluded []string
	// Recorder, if set, records a Warning event on a lease whose grant a
	// barrier probe refused by something other than the fencing policy
	// (ErrProbeRefusedElsewhere): the grant waits until that is resolved.
	Recorder events.EventRecorder
	// CommitLag bounds the time from a write's admission to its commit
	// (--max-commit-lag). A grant that follows a tenure its holder did not
	// release itself is written to status no sooner than CommitLag after
	// the barrier proved every API server enforces its table entry: writes
	// the old holder had admitted before the API servers saw the entry have
	// committed by then.
	CommitLag time.Duration
	// RecheckAfter bounds how long Sync trusts its memory of an entry
	// instead of reading the table (default DefaultRecheckAfter): the
	// table may have been written by another process since (a deposed
	// leader's grant, landing late), and a table naming a token no status
	// names would otherwise stay so until this process restarted.
	RecheckAfter time.Duration

	mu    sync.Mutex
	known map[types.UID]knownEntry
	// resets is Table.Resets() when known was last valid: a table emptied
	// since (written for another incarnation) invalidates everything known.
	resets int64
}

// DefaultRecheckAfter is Tenures.RecheckAfter's default: a lease whose
// reconciles come every few seconds (its holder's renewals) reads its table
// entry once per this long.
const DefaultRecheckAfter = 10 * time.Second

// knownEntry is an entry as this process last wrote or read it, and when.
type knownEntry struct {
	Entry
	at time.Time
}

// remembered returns the entry this process last wrote or read for uid, if
// that was less than RecheckAfter ago and it sent no write to the entry
// since whose outcome it does not know.
func (t *Tenures) remembered(uid types.UID) (Entry, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.forgetAfterReset()
	e, ok := t.known[uid]
	recheck := t.RecheckAfter
	if recheck <= 0 {
		recheck = DefaultRecheckAfter
	}
	if !ok || time.Since(e.at) >= recheck {
		return Entry{}, false
	}
	return e.Entry, true
}

func (t *Tenures) forgetAfterReset() {
	if r := t.Table.Resets(); r != t.resets {
		t.known, t.resets = nil, r
	}
}

func (t *Tenures) remember(uid types.UID, e *Entry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.forgetAfterReset()
	if t.known == nil {
		t.known = map[types.UID]knownEntry{}
	}
	if e == nil {
		delete(t.known, uid)
		return
	}
	t.known[uid] = knownEntry{Entry: *e, at: time.Now()}
}

// EventBarrierBlocked is the reason of the Warning event a lease gets when
// a barrier probe is refused by something other than the fencing policy.
const EventBarrierBlocked = "BarrierBlocked"

// IsGrant tells whether a status write from cur to next grants a tenure.
func IsGrant(cur, next *coordv1alpha1.FencedLeaseStatus) bool {
	return next.HolderIdentity != "" && (next.HolderIdentity != cur.HolderIdentity || next.FencingToken != cur.FencingToken)
}

// Grant writes the grant lease -> next to the table and waits for the
// barrier. The caller writes next to status only when it returns nil, and
// then calls done with the outcome of that write.
func (t *Tenures) Grant(ctx context.Context, lease *coordv1alpha1.FencedLease, next *coordv1alpha1.FencedLeaseStatus) (done func(context.Context, error), err error) {
	noop := func(context.Context, error) {}
	if !IsGrant(&lease.Status, next) {
		return noop, nil
	}
	want := EntryFor(lease, next)
	want.Attempt = lease.ResourceVersion
	var prev *int64
	var ahead *Entry
	// Forgotten before the write is sent: a write whose answer is lost
	// (a timeout) may have taken effect, and an entry remembered from
	// before would make every later Sync skip the table, leaving the grant
	// in it with nobody to finish or undo it
	// (TestGrantWhoseTableWriteAnswerIsLost).
	t.remember(lease.UID, nil)
	if _, _, err := t.Table.Update(ctx, lease.Namespace, lease.Name, func(cur Entry, found bool) (Entry, bool) {
		prev, ahead = nil, nil
		if found {
			p := cur.Token
			prev = &p
			if cur.Token > want.Token {
				ahead = &cur
				return cur, false
			}
			if cur == want {
				return cur, false // this grant's entry, written by an earlier attempt
			}
		}
		return want, true
	}); err != nil {
		return nil, err
	}
	if ahead != nil {
		// A grant written to the table whose status write failed (or one
		// this controller has not seen yet): Sync undoes the first kind.
		if err := t.Sync(ctx, lease); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("the tenure table %s/%s names token %d for lease %s, above the grant's %d: deciding again", lease.Namespace, coordv1alpha1.TenureTableName, ahead.Token, lease.Name, want.Token)
	}
	if prev == nil && lease.Status.FencingToken > 0 {
		// No entry before (a table emptied as another incarnation's, or
		// written before a switch from webhook mode): the lease's last
		// token is the one to be refused.
		p := lease.Status.FencingToken
		prev = &p
	}
	if !slices.Contains(t.Excluded, lease.Namespace) {
		if err := t.Barrier.Wait(ctx, lease.Namespace, lease.Name, prev, want.Token); err != nil {
			if errors.Is(err, ErrProbeRefusedElsewhere) && t.Recorder != nil {
				t.Recorder.Eventf(lease, nil, corev1.EventTypeWarning, EventBarrierBlocked, "Grant",
					"granting token %d waits: the propagation barrier's dry-run ConfigMap in namespace %s was refused by something other than the fencing policy (a ResourceQuota on ConfigMaps, another admission policy or webhook?): %v",
					want.Token, lease.Namespace, err)
			}
			return nil, err
		}
		// Counted from the barrier's end, not the table write: until each
		// API server showed the entry, it could admit the old holder's
		// writes, and those may commit up to CommitLag later
		// (TestGrantWaitsTheCommitLagAfterTheBarrier). After every kind of
		// end, a holder's own release included: the table names the holder
		// until the controller writes it after the release, so a write with
		// the released token sent after the release is admitted too
		// (TestPolicyStaleWriteAfterReleaseCommitsBeforeTheNextGrant in
		// test/history).
		enforced := time.Now()
		if prev != nil {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Until(enforced.Add(t.CommitLag))):
			}
		}
	}
	return func(ctx context.Context, writeErr error) {
		if writeErr == nil {
			t.remember(lease.UID, &want)
			return
		}
		if err := t.Sync(ctx, lease); err != nil {
			logf.FromContext(ctx).Error(err, "Undoing a grant in the tenure table after its status write failed; retried at the next reconcile", "lease", client.ObjectKeyFromObject(lease))
		}
	}, nil
}

// Sync makes lease's table entry say what the lease says. It reads the
// table, then the lease live, then writes with the table's
// resourceVersion, so that no grant written to the table in between is
// overwritten. It moves an entry's token back only for a grant that can
// never commit: its Attempt (the resourceVersion the grant was decided on)
// is no longer the lease's, and the lease does not show it.
func (t *Tenures) Sync(ctx context.Context, lease *coordv1alpha1.FencedLease) error {
	if e, ok := t.remembered(lease.UID); ok && e.Same(EntryFor(lease, &lease.Status)) {
		return nil
	}
	t.remember(lease.UID, nil) // before any write to the entry, as in Grant
	var synced *Entry
	var readErr error
	_, _, err := t.Table.Update(ctx, lease.Namespace, lease.Name, func(cur Entry, found bool) (Entry, bool) {
		synced, readErr = nil, nil
		var live coordv1alpha1.FencedLease
		if err := t.Leases.Get(ctx, client.ObjectKeyFromObject(lease), &live); err != nil {
			readErr = client.IgnoreNotFound(err)
			return cur, false
		}
		if live.UID != lease.UID || !live.DeletionTimestamp.IsZero() {
			return cur, false // the finalizer records deleted leases (Deleted)
		}
		want := EntryFor(&live, &live.Status)
		want.Attempt = live.ResourceVersion
		switch {
		case !found, want.Token > cur.Token:
		case cur.Same(want):
			synced = &cur
			return cur, false
		case want.Token == cur.Token:
			// Same tenure, held or ended: the status is the truth.
		case cur.Attempt == live.ResourceVersion:
			return cur, false // that grant may still commit
		}
		synced = &want
		return want, true
	})
	if err == nil {
		err = readErr
	}
	if err != nil {
		return err
	}
	if synced != nil {
		t.remember(lease.UID, synced)
	}
	return nil
}

// Deleted records a deleted lease's highest token as its entry, without a
// holder (the epoch finalizer calls it before the lease goes): nothing is
// accepted for it until a new incarnation is granted a higher token.
func (t *Tenures) Deleted(ctx context.Context, lease *coordv1alpha1.FencedLease, high int64) error {
	want := Entry{Token: high}
	t.remember(lease.UID, nil)
	_, _, err := t.Table.Update(ctx, lease.Namespace, lease.Name, func(cur Entry, found bool) (Entry, bool) {
		return want, !found || cur != want
	})
	return err
}
