package checker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// SyncName begins the names of the objects CommitRecorder.Sync creates; the
// recorder and ReadFinals leave them out.
const SyncName = "commit-log-sync"

// watchRetry bounds how long a watch may fail to start again before the
// recorder gives up (the run then fails).
const watchRetry = 30 * time.Second

// CommitRecorder records a run's commit log: every version of the Widgets and
// FencedLeases of one namespace, from watches started before the first of
// them is written, each with its resourceVersion (its commit's etcd
// revision). A watch that ends is started again from the last
// resourceVersion it delivered; one that has lost its place ("too old
// resource version": the API server's watch cache no longer holds the
// versions after it) fails the recording (Err) rather than relisting, which
// would skip the versions committed meanwhile without a trace.
type CommitRecorder struct {
	namespace string
	start     time.Time
	out       io.Writer

	mu       sync.Mutex
	versions []Version
	// lists and hashes are each Widget's last recorded entries and their
	// chain hash, uids its incarnation.
	lists  map[string][]string
	hashes map[string]string
	uids   map[string]string
	// synced: the sync markers ("<kind>/<name>") the watches have delivered;
	// syncs counts Sync's calls.
	synced map[string]bool
	syncs  int
	err    error

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// source is one kind's list and watch.
type source struct {
	kind  string
	list  func(ctx context.Context) (rv string, items []runtime.Object, err error)
	watch func(ctx context.Context, rv string) (watch.Interface, error)
}

// StartCommitRecorder lists the Widgets and FencedLeases of namespace (their
// current versions are the first of the log), then watches both until Stop.
// Every version is also written to out (JSON lines) if it is not nil. Start
// it before the run writes either kind. Times are taken relative to start.
func StartCommitRecorder(ctx context.Context, c client.WithWatch, namespace string, start time.Time, out io.Writer) (*CommitRecorder, error) {
	widgets := func() client.ObjectList {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(widgetListGVK)
		return l
	}
	kinds := map[string]func() client.ObjectList{
		KindWidget: widgets,
		KindLease:  func() client.ObjectList { return &coordv1alpha1.FencedLeaseList{} },
	}
	var sources []source
	for _, kind := range []string{KindWidget, KindLease} {
		newList := kinds[kind]
		sources = append(sources, source{
			kind: kind,
			list: func(ctx context.Context) (string, []runtime.Object, error) {
				l := newList()
				if err := c.List(ctx, l, client.InNamespace(namespace)); err != nil {
					return "", nil, err
				}
				items, err := meta.ExtractList(l)
				return l.GetResourceVersion(), items, err
			},
			watch: func(ctx context.Context, rv string) (watch.Interface, error) {
				return c.Watch(ctx, newList(), &client.ListOptions{Namespace: namespace,
					Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}})
			},
		})
	}
	return startRecorder(ctx, namespace, start, out, sources)
}

func startRecorder(ctx context.Context, namespace string, start time.Time, out io.Writer, sources []source) (*CommitRecorder, error) {
	r := &CommitRecorder{namespace: namespace, start: start, out: out,
		lists: map[string][]string{}, hashes: map[string]string{}, uids: map[string]string{}, synced: map[string]bool{}}
	rvs := map[string]string{}
	for _, s := range sources {
		rv, items, err := s.list(ctx)
		if err != nil {
			return nil, fmt.Errorf("commit log: listing %ss: %w", s.kind, err)
		}
		for _, o := range items {
			if err := r.record(s.kind, watch.Added, o); err != nil {
				return nil, err
			}
		}
		rvs[s.kind] = rv
	}
	wctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	for _, s := range sources {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.run(wctx, s, rvs[s.kind])
		}()
	}
	return r, nil
}

// run watches one kind from rv until ctx ends or the watch loses its place.
func (r *CommitRecorder) run(ctx context.Context, s source, rv string) {
	failing := time.Time{}
	for ctx.Err() == nil {
		w, err := s.watch(ctx, rv)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if expired(err) {
				r.fail(gapError(s.kind, rv, err))
				return
			}
			if failing.IsZero() {
				failing = time.Now()
			} else if time.Since(failing) > watchRetry {
				r.fail(fmt.Errorf("commit log: the %s watch could not be started again from resourceVersion %s for %v: %w", s.kind, rv, watchRetry, err))
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		failing = time.Time{}
		var stop bool
		rv, stop = r.drain(ctx, s.kind, w, rv)
		w.Stop()
		if stop {
			return
		}
	}
}

// drain records what w delivers until it ends; it returns the last
// resourceVersion delivered, and stop when the recording must end.
func (r *CommitRecorder) drain(ctx context.Context, kind string, w watch.Interface, rv string) (string, bool) {
	for {
		var ev watch.Event
		var ok bool
		select {
		case <-ctx.Done():
			return rv, true
		case ev, ok = <-w.ResultChan():
		}
		if !ok {
			return rv, false
		}
		switch ev.Type {
		case watch.Error:
			err := apierrors.FromObject(ev.Object)
			if expired(err) {
				r.fail(gapError(kind, rv, err))
				return rv, true
			}
			return rv, false // start again from rv
		case watch.Bookmark:
			if m, err := meta.Accessor(ev.Object); err == nil && m.GetResourceVersion() != "" {
				rv = m.GetResourceVersion()
			}
		default:
			if err := r.record(kind, ev.Type, ev.Object); err != nil {
				r.fail(err)
				return rv, true
			}
			if m, err := meta.Accessor(ev.Object); err == nil {
				rv = m.GetResourceVersion()
			}
		}
	}
}

func expired(err error) bool {
	return apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
}

func gapError(kind, rv string, err error) error {
	return fmt.Errorf("commit log: the %s watch lost its place after resourceVersion %s (%v): the versions committed since are not in the log, "+
		"so commit order cannot be judged (relisting would skip them without a trace)", kind, rv, err)
}

func (r *CommitRecorder) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
	}
}

// Err is what ended the recording early (a watch that lost its place), or nil.
func (r *CommitRecorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// record adds one delivered version to the log.
func (r *CommitRecorder) record(kind string, typ watch.EventType, o runtime.Object) error {
	m, err := meta.Accessor(o)
	if err != nil {
		return fmt.Errorf("commit log: a %s event without metadata: %w", kind, err)
	}
	rev, err := strconv.ParseInt(m.GetResourceVersion(), 10, 64)
	if err != nil {
		return fmt.Errorf("commit log: %s %s: resourceVersion %q is not an etcd revision: %w", kind, m.GetName(), m.GetResourceVersion(), err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if strings.HasPrefix(m.GetName(), SyncName) {
		r.synced[kind+"/"+m.GetName()] = true
		return nil
	}
	v := Version{Kind: kind, Name: m.GetName(), Revision: rev, Deleted: typ == watch.Deleted, UID: string(m.GetUID()),
		Seen: time.Since(r.start).Nanoseconds()}
	switch kind {
	case KindWidget:
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			return fmt.Errorf("commit log: a Widget event with a %T", o)
		}
		r.widget(&v, u)
	case KindLease:
		l, ok := o.(*coordv1alpha1.FencedLease)
		if !ok {
			return fmt.Errorf("commit log: a FencedLease event with a %T", o)
		}
		v.Holder, v.FencingToken = l.Status.HolderIdentity, l.Status.FencingToken
	}
	r.versions = append(r.versions, v)
	if r.out != nil {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if _, err := r.out.Write(append(b, '\n')); err != nil {
			return fmt.Errorf("commit log: writing it out: %w", err)
		}
	}
	return nil
}

// widget fills v from a Widget's version: what it appended to the previous
// version of the same incarnation, its length, hash, lease and token.
func (r *CommitRecorder) widget(v *Version, u *unstructured.Unstructured) {
	v.Lease = u.GetLabels()[coordv1alpha1.GuardLeaseLabel]
	if tok, ok := u.GetAnnotations()[coordv1alpha1.FencingTokenAnnotation]; ok {
		if n, err := strconv.ParseInt(tok, 10, 64); err == nil {
			v.Token, v.HasToken = n, true
		}
	}
	if v.Deleted {
		delete(r.lists, v.Name)
		delete(r.hashes, v.Name)
		delete(r.uids, v.Name)
		return
	}
	entries, _, _ := unstructured.NestedStringSlice(u.Object, "spec", "entries")
	prev, hash := r.lists[v.Name], r.hashes[v.Name]
	if r.uids[v.Name] != v.UID {
		prev, hash = nil, Hash0
	}
	if len(prev) <= len(entries) && equal(prev, entries[:len(prev)]) {
		v.Added = append([]string(nil), entries[len(prev):]...)
		for _, e := range v.Added {
			hash = Chain(hash, e)
		}
	} else {
		v.Rewritten, v.Added, hash = true, append([]string(nil), entries...), HashList(entries)
	}
	v.Len, v.Hash = len(entries), hash
	r.lists[v.Name], r.hashes[v.Name], r.uids[v.Name] = entries, hash, v.UID
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Sync makes sure the log holds every version committed before it was
// called: it creates a Widget (unguarded) and a FencedLease, named SyncName
// and a number, in the recorder's namespace with c, and waits until both
// watches have delivered them (a watch delivers in commit order). The
// recorder leaves them out of the log.
func (r *CommitRecorder) Sync(ctx context.Context, c client.Client, timeout time.Duration) error {
	r.mu.Lock()
	r.syncs++
	name := fmt.Sprintf("%s-%d", SyncName, r.syncs)
	r.mu.Unlock()
	w := &unstructured.Unstructured{}
	w.SetGroupVersionKind(widgetListGVK.GroupVersion().WithKind(KindWidget))
	w.SetNamespace(r.namespace)
	w.SetName(name)
	l := &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: r.namespace, Name: name},
		Spec: coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: 10}}
	for _, o := range []client.Object{w, l} {
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("commit log: creating the sync marker %s: %w", name, err)
		}
	}
	deadline := time.Now().Add(timeout)
	for {
		r.mu.Lock()
		done, err := r.synced[KindWidget+"/"+name] && r.synced[KindLease+"/"+name], r.err
		r.mu.Unlock()
		switch {
		case err != nil:
			return err
		case done:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("commit log: the watches did not deliver the sync markers within %v", timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop ends the watches and returns the log, by arrival (each kind in
// revision order), and what ended the recording early, if anything.
func (r *CommitRecorder) Stop() ([]Version, error) {
	r.cancel()
	r.wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.versions, r.err
}
