package checker

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// commitLog writes hand-made commit logs: each call is one commit, at the
// next revision.
type commitLog struct {
	rev   int64
	log   []Version
	lists map[string][]string
}

func newCommitLog() *commitLog { return &commitLog{rev: 100, lists: map[string][]string{}} }

// status commits a status of lease naming holder ("" for none) and token.
func (c *commitLog) status(lease, holder string, token int64) int64 {
	c.rev++
	c.log = append(c.log, Version{Kind: KindLease, Name: lease, Revision: c.rev, Holder: holder, FencingToken: token})
	return c.rev
}

// deleteLease commits the deletion of lease, whose last status named
// holder and token.
func (c *commitLog) deleteLease(lease, holder string, token int64) int64 {
	c.rev++
	c.log = append(c.log, Version{Kind: KindLease, Name: lease, Revision: c.rev, Deleted: true, Holder: holder, FencingToken: token})
	return c.rev
}

// write commits one append of value to obj, guarded by obj's lease.
func (c *commitLog) write(obj, value string) int64 {
	c.rev++
	c.lists[obj] = append(c.lists[obj], value)
	l := c.lists[obj]
	tok, _ := TokenOf(value)
	c.log = append(c.log, Version{Kind: KindWidget, Name: obj, Revision: c.rev, Lease: leaseOf(obj), Added: []string{value},
		Len: len(l), Hash: HashList(l), Token: tok, HasToken: true})
	return c.rev
}

// finals is every object's final state: its last committed list.
func (c *commitLog) finals() []Final {
	var fs []Final
	for obj, l := range c.lists {
		fs = append(fs, Final{Object: obj, Lease: leaseOf(obj), Exists: true, Entries: append([]string(nil), l...)})
	}
	return fs
}

// check judges the commit log alone (no ops, no final state).
func (c *commitLog) check() Result {
	return Check(nil, nil, Options{Commits: c.log})
}

// TestCommitOrderAcceptsACleanLog: every way a tenure ends, with a write
// that commits after its tenure's end but before the next grant (an
// operator's revocation, where the controller waits the commit lag): no
// violation, one late commit.
func TestCommitOrderAcceptsACleanLog(t *testing.T) {
	c := newCommitLog()
	c.status("job", "", 0) // created
	c.status("job", "alice", 1)
	c.write("job-0", "alice:1:1")
	c.write("job-1", "alice:1:2")
	c.status("job", "bob", 2) // alice released or expired; bob granted in the same write
	c.write("job-0", "bob:2:3")
	c.status("job", "", 2) // an operator revoked bob's tenure
	c.write("job-1", "bob:2:4")
	c.status("job", "carol", 3) // the commit lag later
	c.write("job-1", "carol:3:5")
	c.deleteLease("job", "carol", 3)
	c.status("job", "", 0) // created again
	c.status("job", "dave", 4)
	c.write("job-0", "dave:4:6")
	c.status("other", "alice", 1) // another lease's tokens do not count
	res := c.check()
	if res.Counts[CommitOrder] != 0 || len(res.CommitLogGaps) > 0 {
		t.Fatalf("violations in a clean log: %v; gaps: %v", res.Violations, res.CommitLogGaps)
	}
	if !res.CommitOrderChecked {
		t.Error("CommitOrderChecked is false with a commit log")
	}
	want := CommitStats{WidgetVersions: 6, LeaseVersions: 9, Grants: 5, HandOvers: 1, Ends: 1, Deletions: 1, LateCommits: 1, MaxLateBy: 1}
	if res.Commits != want {
		t.Errorf("stats %+v, want %+v", res.Commits, want)
	}
}

// TestCommitOrderDetectsACommitAfterTheNextGrant: alice's write was invoked
// while she held the lease and answered after bob's first write was
// acknowledged, on the object bob had not written: every property judged by
// the clients' times passes, and only the commit order shows that it
// committed after bob's grant.
func TestCommitOrderDetectsACommitAfterTheNextGrant(t *testing.T) {
	b := newBuilder()
	b.append("alice", "job-0", 1, OK, true, 0, 10)
	b.append("bob", "job-0", 2, OK, true, 30, 40)
	late := b.append("alice", "job-1", 1, OK, true, 20, 60) // admitted before the grant, committed after it

	c := newCommitLog()
	c.status("job", "alice", 1)
	c.write("job-0", b.lists["job-0"][0])
	grant := c.status("job", "bob", 2)
	c.write("job-0", b.lists["job-0"][1])
	commit := c.write("job-1", late)

	res := Check(b.ops, b.finals(100), Options{Commits: c.log})
	expect(t, res, CommitOrder)
	want := fmt.Sprintf("committed at revision %d, after revision %d where the lease's status named token 2", commit, grant)
	if !strings.Contains(fmt.Sprint(res.Violations), want) || !strings.Contains(fmt.Sprint(res.Violations), late) {
		t.Errorf("the violation does not name the write and both revisions (%q): %v", want, res.Violations)
	}
	if len(res.CommitLogGaps) > 0 {
		t.Errorf("gaps: %v", res.CommitLogGaps)
	}
	// Without the commit log the same history passes.
	if res := Check(b.ops, b.finals(100), Options{}); !res.OK() || res.CommitOrderChecked {
		t.Errorf("without a commit log: %v (checked %v)", res.Violations, res.CommitOrderChecked)
	}
}

func TestCommitOrderDetectsACommitAfterANewIncarnationsGrant(t *testing.T) {
	c := newCommitLog()
	c.status("job", "alice", 1)
	c.deleteLease("job", "alice", 1)
	c.status("job", "", 0)
	c.status("job", "bob", 2)
	c.write("job-0", "alice:1:1")
	expect(t, c.check(), CommitOrder)
}

func TestCommitOrderDetectsACommitBeforeItsGrant(t *testing.T) {
	c := newCommitLog()
	c.status("job", "alice", 1)
	c.write("job-0", "bob:2:1") // token 2 is not granted yet
	c.status("job", "bob", 2)
	res := c.check()
	expect(t, res, CommitOrder)
	if !strings.Contains(fmt.Sprint(res.Violations), "before its token was granted: it was granted at revision") {
		t.Errorf("unexpected wording: %v", res.Violations)
	}
	d := newCommitLog()
	d.status("job", "alice", 1)
	d.write("job-0", "mallory:7:1") // never issued
	expect(t, d.check(), CommitOrder)
	e := newCommitLog()
	e.write("orphan-0", "alice:1:1") // a lease never recorded
	expect(t, e.check(), CommitOrder)
}

func TestCommitLogGapsAreReported(t *testing.T) {
	c := newCommitLog()
	c.status("job", "alice", 1)
	c.write("job-0", "alice:1:1")
	c.write("job-0", "alice:1:2")
	c.log = append(c.log[:2], c.log[3:]...) // the second version went missing
	c.write("job-0", "alice:1:3")
	c.log[len(c.log)-1].Added = []string{"alice:1:2", "alice:1:3"}
	res := c.check()
	if len(res.CommitLogGaps) != 1 || !strings.Contains(res.CommitLogGaps[0], "added 2 entries") {
		t.Errorf("a missing version: gaps %v", res.CommitLogGaps)
	}
	if res.Counts[CommitOrder] != 0 {
		t.Errorf("a gap reported as a violation: %v", res.Violations)
	}

	d := newCommitLog()
	d.status("job", "alice", 1)
	d.write("job-0", "alice:1:1")
	d.lists["job-0"] = append(d.lists["job-0"], "alice:1:2") // in the final state, not in the log
	res = Check(nil, d.finals(), Options{Commits: d.log})
	if len(res.CommitLogGaps) != 1 || !strings.Contains(res.CommitLogGaps[0], "the final state 2") {
		t.Errorf("a log that stops early: gaps %v", res.CommitLogGaps)
	}

	e := newCommitLog()
	e.status("job", "alice", 1)
	e.write("job-0", "alice:1:1")
	e.log[len(e.log)-1].Rewritten = true
	if res := e.check(); len(res.CommitLogGaps) != 1 || !strings.Contains(res.CommitLogGaps[0], "do not extend") {
		t.Errorf("a rewritten list: gaps %v", res.CommitLogGaps)
	}
}

// fakeSource is a kind's list and watches for the recorder, fed by hand.
type fakeSource struct {
	items    []runtime.Object
	watches  chan *watch.FakeWatcher
	watchRVs chan string
}

func newFakeSource(items ...runtime.Object) *fakeSource {
	return &fakeSource{items: items, watches: make(chan *watch.FakeWatcher, 4), watchRVs: make(chan string, 4)}
}

func (f *fakeSource) source(kind string) source {
	return source{
		kind: kind,
		list: func(context.Context) (string, []runtime.Object, error) { return "100", f.items, nil },
		watch: func(ctx context.Context, rv string) (watch.Interface, error) {
			f.watchRVs <- rv
			select {
			case w := <-f.watches:
				return w, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
	}
}

func widget(name, uid, rv, token string, entries ...string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: "example.kubefence.io", Version: "v1", Kind: "Widget"})
	u.SetName(name)
	u.SetUID(k8stypes.UID("u-" + uid))
	u.SetResourceVersion(rv)
	u.SetLabels(map[string]string{coordv1alpha1.GuardLeaseLabel: "job"})
	u.SetAnnotations(map[string]string{coordv1alpha1.FencingTokenAnnotation: token})
	_ = unstructured.SetNestedStringSlice(u.Object, entries, "spec", "entries")
	return u
}

func lease(rv, holder string, token int64) *coordv1alpha1.FencedLease {
	return &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Name: "job", ResourceVersion: rv},
		Status: coordv1alpha1.FencedLeaseStatus{HolderIdentity: holder, FencingToken: token}}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (r *CommitRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.versions)
}

// TestRecorderRecordsEveryVersionByRevision: listed and watched versions,
// what each Widget version appended, a watch that ends and is started again
// from the last resourceVersion it delivered (a bookmark's included).
func TestRecorderRecordsEveryVersionByRevision(t *testing.T) {
	widgets, leases := newFakeSource(), newFakeSource(lease("100", "", 0))
	r, err := startRecorder(context.Background(), "history", time.Now(), nil,
		[]source{widgets.source(KindWidget), leases.source(KindLease)})
	if err != nil {
		t.Fatal(err)
	}
	w1, l1 := watch.NewFake(), watch.NewFake()
	widgets.watches <- w1
	leases.watches <- l1
	if rv := <-widgets.watchRVs; rv != "100" {
		t.Errorf("the widget watch started at %q, not at the list's resourceVersion", rv)
	}
	l1.Modify(lease("101", "alice", 1))
	w1.Add(widget("job-0", "a", "102", "1", "alice:1:1"))
	w1.Modify(widget("job-0", "a", "104", "1", "alice:1:1", "alice:1:2"))
	w1.Action(watch.Bookmark, widget("", "", "110", ""))
	waitFor(t, "four versions", func() bool { return r.count() == 4 })
	w1.Stop() // the watch ends: started again from the bookmark's resourceVersion
	if rv := <-widgets.watchRVs; rv != "110" {
		t.Errorf("the widget watch started again at %q, want the last delivered 110", rv)
	}
	w2 := watch.NewFake()
	widgets.watches <- w2
	w2.Modify(widget("job-0", "a", "111", "2", "alice:1:1", "bob:2:3")) // not an append: rewritten
	w2.Delete(widget("job-0", "a", "112", "2", "alice:1:1", "bob:2:3"))
	w2.Add(widget("job-0", "b", "113", "2", "bob:2:4")) // a new incarnation starts empty
	waitFor(t, "seven versions", func() bool { return r.count() == 7 })
	log, err := r.Stop()
	if err != nil {
		t.Fatal(err)
	}
	// The kinds' watches run side by side: each kind's versions come in
	// order, the two interleaved as they arrive.
	sort.SliceStable(log, func(i, j int) bool { return log[i].Revision < log[j].Revision })
	got := []string{}
	for _, v := range log {
		got = append(got, fmt.Sprintf("%s/%s@%d holder=%s/%d added=%v len=%d rewritten=%v deleted=%v token=%d",
			v.Kind, v.Name, v.Revision, v.Holder, v.FencingToken, v.Added, v.Len, v.Rewritten, v.Deleted, v.Token))
	}
	want := []string{
		"FencedLease/job@100 holder=/0 added=[] len=0 rewritten=false deleted=false token=0",
		"FencedLease/job@101 holder=alice/1 added=[] len=0 rewritten=false deleted=false token=0",
		"Widget/job-0@102 holder=/0 added=[alice:1:1] len=1 rewritten=false deleted=false token=1",
		"Widget/job-0@104 holder=/0 added=[alice:1:2] len=2 rewritten=false deleted=false token=1",
		"Widget/job-0@111 holder=/0 added=[alice:1:1 bob:2:3] len=2 rewritten=true deleted=false token=2",
		"Widget/job-0@112 holder=/0 added=[] len=0 rewritten=false deleted=true token=2",
		"Widget/job-0@113 holder=/0 added=[bob:2:4] len=1 rewritten=false deleted=false token=2",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if h := log[3].Hash; h != HashList([]string{"alice:1:1", "alice:1:2"}) {
		t.Errorf("hash of the second version %s, want the chain of its list", h)
	}
}

// TestRecorderFailsWhenTheWatchLosesItsPlace: a watch that answers "too old
// resource version" fails the recording instead of relisting, which would
// skip versions without a trace.
func TestRecorderFailsWhenTheWatchLosesItsPlace(t *testing.T) {
	for _, how := range []string{"event", "start"} {
		t.Run(how, func(t *testing.T) {
			widgets, leases := newFakeSource(), newFakeSource()
			s := widgets.source(KindWidget)
			gone := apierrors.NewResourceExpired("too old resource version: 100 (250)")
			if how == "start" {
				s.watch = func(context.Context, string) (watch.Interface, error) { return nil, gone }
			}
			r, err := startRecorder(context.Background(), "history", time.Now(), nil, []source{s, leases.source(KindLease)})
			if err != nil {
				t.Fatal(err)
			}
			leases.watches <- watch.NewFake()
			if how == "event" {
				w := watch.NewFake()
				widgets.watches <- w
				w.Error(&gone.ErrStatus)
			}
			waitFor(t, "the recording to fail", func() bool { return r.Err() != nil })
			_, err = r.Stop()
			if err == nil || !strings.Contains(err.Error(), "lost its place after resourceVersion 100") {
				t.Errorf("Stop: %v", err)
			}
		})
	}
}
