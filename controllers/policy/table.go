package policy

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// Entry is one lease's line in the tenure table.
type Entry struct {
	// Token is the current token while Held, the last one otherwise.
	Token int64
	// Held tells whether a holder is named; User is the holder's user (the
	// user of its request).
	Held bool
	User string
	// Pod is the holder's identity with identityBinding Pod (the requester's
	// pod must be named so; "!" when the identity could not be a pod name),
	// "" otherwise.
	Pod string
	// Attempt tells this write from any other of the same tenure (random):
	// a grant whose status write failed is undone only while the entry is
	// still the one it wrote (Tenures.undo).
	Attempt string
}

// Same tells whether e and o describe the same tenure (Attempt aside).
func (e Entry) Same(o Entry) bool {
	e.Attempt, o.Attempt = "", ""
	return e == o
}

// encode is the entry as the policy reads it: "<token>" without a holder,
// "<token> <attempt> <pod> <user>" with one (pod "-" without Pod binding).
// The user is last, so that it may contain spaces.
func (e Entry) encode() string {
	t := strconv.FormatInt(e.Token, 10)
	if !e.Held {
		return t
	}
	pod := e.Pod
	if pod == "" {
		pod = "-"
	}
	attempt := e.Attempt
	if attempt == "" {
		attempt = "0"
	}
	return strings.Join([]string{t, attempt, pod, e.User}, " ")
}

// check refuses an entry that would not be one line of the table: a user
// or pod name with a line break could write a line for another lease.
func (e Entry) check() error {
	if strings.ContainsAny(e.User+e.Pod, "\n\r") {
		return fmt.Errorf("the holder's user %q or pod %q contains a line break: it cannot be written to the tenure table, so the lease cannot be granted to it in policy mode", e.User, e.Pod)
	}
	return nil
}

func decodeEntry(s string) (Entry, error) {
	parts := strings.SplitN(s, " ", 4)
	t, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return Entry{}, fmt.Errorf("tenure table entry %q: token: %w", s, err)
	}
	e := Entry{Token: t}
	if len(parts) == 1 {
		return e, nil
	}
	if len(parts) != 4 {
		return Entry{}, fmt.Errorf("tenure table entry %q: expected \"<token>\" or \"<token> <attempt> <pod> <user>\"", s)
	}
	e.Held, e.Attempt, e.Pod, e.User = true, parts[1], parts[2], parts[3]
	if e.Pod == "-" {
		e.Pod = ""
	}
	return e, nil
}

// EntryFor is the entry that says what status (of lease) says, but for a
// tenure that has ended in the API server before status says so: an entry
// names a holder only while a request carries the tenure
// (coordv1alpha1.HolderRequestIndex), with that request's user, never that
// of a request made again under the holder's identity.
func EntryFor(lease *coordv1alpha1.FencedLease, st *coordv1alpha1.FencedLeaseStatus) Entry {
	e := Entry{Token: st.FencingToken}
	i := coordv1alpha1.HolderRequestIndex(lease.Spec.Requests, st)
	if i < 0 {
		return e
	}
	e.Held = true
	if lease.Spec.IdentityBinding == coordv1alpha1.IdentityBindingPod {
		e.Pod = st.HolderIdentity
		if e.Pod == "-" || strings.ContainsAny(e.Pod, " \t\n") {
			e.Pod = "!" // names no pod: nobody passes the identity path
		}
	}
	e.User = lease.Spec.Requests[i].User
	return e
}

// Table reads and writes tenure tables, always from the API server (a cache
// could miss an entry written a moment ago). Every write is
// compare-and-swap: it reads the table, decides from what it read and writes
// with that resourceVersion.
//
// Every write also reads the installed fencing policy's incarnation
// (InstalledIncarnation) and marks the table with it (IncarnationKey): a
// table marked otherwise (or not at all) was written for another
// installation, which the policy does not trust, so the write drops all its
// entries first and each lease's entry is written anew from the lease.
type Table struct {
	Reader client.Reader
	Writer client.Client
	// Owner, if set, owns every table (an ownerReference added when the
	// table is created, or at its next write if it has none): while the
	// owner is missing (an uninstall) no table is created.
	Owner *Owner

	resets atomic.Int64
}

// Resets counts the tables this Table found written for another
// incarnation and emptied: every entry remembered from before is gone.
func (t *Table) Resets() int64 { return t.resets.Load() }

// Get returns the entry of lease ns/name (found false when there is none),
// with the table's resourceVersion.
func (t *Table) Get(ctx context.Context, ns, name string) (e Entry, found bool, err error) {
	var cm corev1.ConfigMap
	if err := t.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: coordv1alpha1.TenureTableName}, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return Entry{}, false, nil
		}
		return Entry{}, false, fmt.Errorf("reading the tenure table %s/%s: %w", ns, coordv1alpha1.TenureTableName, err)
	}
	return lookup(&cm, name)
}

func lookup(cm *corev1.ConfigMap, name string) (Entry, bool, error) {
	v, ok := findLine(cm.Data[coordv1alpha1.TenureTableKey], name)
	if !ok {
		return Entry{}, false, nil
	}
	e, err := decodeEntry(v)
	return e, err == nil, err
}

// findLine is the entry of lease name in the table's lines, as the fencing
// policy finds it: what follows "\n<name> " up to the next line.
func findLine(lines, name string) (string, bool) {
	_, rest, ok := strings.Cut(lines, "\n"+name+" ")
	if !ok {
		return "", false
	}
	v, _, _ := strings.Cut(rest, "\n")
	return v, true
}

// setLine is lines with lease name's entry set to v: the lines sorted by
// lease name, each "\n<name> <entry>" (TenureTableKey).
func setLine(lines, name, v string) string {
	entries := map[string]string{}
	for l := range strings.SplitSeq(lines, "\n") {
		if k, e, ok := strings.Cut(l, " "); ok {
			entries[k] = e
		}
	}
	entries[name] = v
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(entries)) {
		b.WriteString("\n" + k + " " + entries[k])
	}
	return b.String()
}

// EntryOf is lease's entry as written in tenure table cm ("" when there is
// none): "<token>", or "<token> <attempt> <pod> <user>" (tests and tools
// read it; the controller reads entries through Table).
func EntryOf(cm *corev1.ConfigMap, lease string) string {
	v, _ := findLine(cm.Data[coordv1alpha1.TenureTableKey], lease)
	return v
}

// SetEntryOf sets lease's entry in tenure table cm to v, as EntryOf reads
// it (tests and benchmarks write tables with it).
func SetEntryOf(cm *corev1.ConfigMap, lease, v string) {
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[coordv1alpha1.TenureTableKey] = setLine(cm.Data[coordv1alpha1.TenureTableKey], lease, v)
}

// trusted tells whether cm was written for incarnation inc in the format
// the fencing policy reads: its data holds the incarnation key and the
// entries' key, nothing else (an earlier version's table, one key per
// lease, is not trusted and is written anew).
func trusted(cm *corev1.ConfigMap, inc string) bool {
	_, lines := cm.Data[coordv1alpha1.TenureTableKey]
	return cm.Data[IncarnationKey] == inc && lines && len(cm.Data) == 2
}

// Update sets lease ns/name's entry to what decide returns for the current
// one (ok false: leave it), with the table's resourceVersion, retrying on
// conflicts; it creates the table at its first entry. It returns the entry
// written, or the current one when decide declined or the table is missing
// in a namespace being deleted (wrote false).
func (t *Table) Update(ctx context.Context, ns, name string, decide func(cur Entry, found bool) (Entry, bool)) (Entry, bool, error) {
	// Once per update, not per attempt: a conflict is about the table.
	inc, err := InstalledIncarnation(ctx, t.Reader)
	if err != nil {
		return Entry{}, false, err
	}
	var out Entry
	var wrote bool
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		wrote = false
		var cm corev1.ConfigMap
		err := t.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: coordv1alpha1.TenureTableName}, &cm)
		create := apierrors.IsNotFound(err)
		if err != nil && !create {
			return fmt.Errorf("reading the tenure table %s/%s: %w", ns, coordv1alpha1.TenureTableName, err)
		}
		reset := !create && !trusted(&cm, inc)
		if reset {
			// Written for another incarnation (or by an earlier version, one
			// key per lease): none of it is trusted.
			cm.Data = nil
		}
		cur, found, err := lookup(&cm, name)
		if err != nil {
			return err
		}
		next, ok := decide(cur, found)
		if !ok {
			out = cur
			return nil
		}
		if err := next.check(); err != nil {
			return fmt.Errorf("lease %s/%s: %w", ns, name, err)
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[IncarnationKey] = inc
		cm.Data[coordv1alpha1.TenureTableKey] = setLine(cm.Data[coordv1alpha1.TenureTableKey], name, next.encode())
		if create {
			cm.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: coordv1alpha1.TenureTableName,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "kubefence"}}
		}
		if !t.Owner.owned(&cm) {
			ref, err := t.Owner.Ref(ctx)
			if err != nil {
				return fmt.Errorf("owning the tenure table %s/%s: %w", ns, coordv1alpha1.TenureTableName, err)
			}
			cm.OwnerReferences = append(cm.OwnerReferences, *ref)
		}
		if create {
			err = t.Writer.Create(ctx, &cm)
			switch {
			case apierrors.IsAlreadyExists(err):
				return apierrors.NewConflict(corev1.Resource("configmaps"), coordv1alpha1.TenureTableName, err)
			case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
				// The namespace is being deleted and its table is gone
				// (the namespace controller deleted it): nothing can be
				// created there any more, no guarded object can be judged
				// against the entry, and no grant can pass the barrier,
				// whose probes are creates. Declined, as the epoch store
				// does (a deleted lease's finalizer completes).
				out = cur
				return nil
			}
		} else {
			err = t.Writer.Update(ctx, &cm)
		}
		if err != nil {
			return err
		}
		if reset {
			t.resets.Add(1)
		}
		out, wrote = next, true
		return nil
	})
	if err != nil {
		return Entry{}, false, fmt.Errorf("writing lease %s's entry in the tenure table %s/%s: %w", name, ns, coordv1alpha1.TenureTableName, err)
	}
	return out, wrote, nil
}
