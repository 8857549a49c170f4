package checker

import (
	"fmt"
	"sort"
)

// Kinds of a Version.
const (
	// KindWidget is a guarded object.
	KindWidget = "Widget"
	// KindLease is a FencedLease.
	KindLease = "FencedLease"
)

// Version is one committed version of a guarded object (a Widget) or of a
// FencedLease, as the harness's watch delivered it (CommitRecorder). Revision
// is its resourceVersion: the etcd revision of the commit that wrote it (of
// the delete, for a deletion). The run has one etcd, so revisions order every
// commit of the run, guarded writes and lease writes alike, whatever any
// client's clock says.
type Version struct {
	Kind     string `json:"kind"`
	Name     string `json:"name"`
	Revision int64  `json:"rv"`
	// Deleted: this is the deletion of the object.
	Deleted bool   `json:"deleted,omitempty"`
	UID     string `json:"uid,omitempty"`

	// A Widget's guard label (its lease), the entries this version appended
	// to the previous version's (Rewritten: its list does not start with the
	// previous version's, Added is then the whole list), its list's length
	// and chain hash (Chain, as the ops log them), and its token annotation.
	Lease     string   `json:"lease,omitempty"`
	Added     []string `json:"added,omitempty"`
	Rewritten bool     `json:"rewritten,omitempty"`
	Len       int      `json:"len,omitempty"`
	Hash      string   `json:"hash,omitempty"`
	Token     int64    `json:"token,omitempty"`
	HasToken  bool     `json:"hasToken,omitempty"`

	// A FencedLease's status: its holder and token.
	Holder       string `json:"holder,omitempty"`
	FencingToken int64  `json:"fencingToken,omitempty"`

	// Seen is when the harness received the version, in nanoseconds since the
	// run's start (the ops' time base): for reading the log only, the checker
	// orders by Revision.
	Seen int64 `json:"seen,omitempty"`
}

// CommitStats describes a commit log.
type CommitStats struct {
	// Versions recorded: of Widgets, and of FencedLeases.
	WidgetVersions, LeaseVersions int
	// Transitions of the leases, placed by revision: grants (a status naming
	// a holder with a token no earlier version named), of which hand-overs (the
	// grant ended the previous holder's tenure in the same commit), tenure
	// ends without a grant in the same commit (the status names no holder),
	// and deletions.
	Grants, HandOvers, Ends, Deletions int
	// LateCommits are guarded writes committed after the commit that ended
	// their token's tenure (a status naming no holder, or the lease's
	// deletion) but before any status named a larger token: allowed (the
	// controller waits the commit lag between an operator's revocation, or a
	// deletion, and the next grant), and the sign that commits did come late.
	LateCommits int
	// MaxLateBy is the largest number of revisions a late commit came after
	// its tenure's end.
	MaxLateBy int64
}

// tenure is one token's time in a lease's status, by revision.
type tenure struct {
	token  int64
	holder string
	// granted is the revision of the first status naming token with a holder,
	// ended the revision of the first later version that does not (another
	// token or holder, no holder, or the deletion); 0 when it never did.
	granted, ended int64
}

// leaseLog is one lease's status over the run.
type leaseLog struct {
	// revs and maxToken: maxToken[i] is the largest token any version up to
	// revs[i] named.
	revs     []int64
	maxToken []int64
	names    []string // the holder at revs[i]
	tenures  map[int64]*tenure
}

// firstAbove returns the index of the first version naming a token above t,
// or -1.
func (l *leaseLog) firstAbove(t int64) int {
	i := sort.Search(len(l.revs), func(i int) bool { return l.maxToken[i] > t })
	if i == len(l.revs) {
		return -1
	}
	return i
}

// sortedVersions returns the versions of kind, by revision (the watch
// delivers them so; the checker does not rely on it).
func sortedVersions(log []Version, kind string) []Version {
	var out []Version
	for _, v := range log {
		if v.Kind == kind {
			out = append(out, v)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Revision < out[j].Revision })
	return out
}

// leaseLogs builds every lease's status over the run, and counts transitions.
func leaseLogs(versions []Version, st *CommitStats) map[string]*leaseLog {
	logs := map[string]*leaseLog{}
	type current struct {
		holder string
		token  int64
	}
	cur := map[string]current{}
	for _, v := range versions {
		l := logs[v.Name]
		if l == nil {
			l = &leaseLog{tenures: map[int64]*tenure{}}
			logs[v.Name] = l
		}
		top := v.FencingToken
		if n := len(l.maxToken); n > 0 {
			top = max(top, l.maxToken[n-1])
		}
		holder, token := v.Holder, v.FencingToken
		if v.Deleted {
			holder, token = "", 0
		}
		l.revs, l.maxToken, l.names = append(l.revs, v.Revision), append(l.maxToken, top), append(l.names, holder)
		prev := cur[v.Name]
		if prev.holder != "" && (prev.holder != holder || prev.token != token) {
			if t := l.tenures[prev.token]; t != nil && t.ended == 0 {
				t.ended = v.Revision
			}
		}
		switch {
		case v.Deleted:
			st.Deletions++
		case holder != "" && l.tenures[token] == nil:
			l.tenures[token] = &tenure{token: token, holder: holder, granted: v.Revision}
			st.Grants++
			if prev.holder != "" {
				st.HandOvers++
			}
		case holder == "" && prev.holder != "":
			st.Ends++
		}
		cur[v.Name] = current{holder: holder, token: token}
	}
	return logs
}

// checkCommitOrder: property 5, on the commit log. A guarded write carrying
// token t (its appended entry's token) must commit at a revision below every
// status of its lease that names a larger token: once a newer token has been
// granted, no write carrying an older one commits, whatever the clients'
// clocks and the answers say. It must also commit after a status named t (a
// token is accepted only while it is current). Each object's versions must
// append exactly one entry each and end at the final state, or versions are
// missing from the log (a gap: reported in Result.CommitLogGaps, not as a
// violation of kubefence).
func checkCommitOrder(rp *reporter, res *Result, log []Version, finals []Final) {
	st := &res.Commits
	leases := leaseLogs(sortedVersions(log, KindLease), st)
	widgets := sortedVersions(log, KindWidget)
	st.LeaseVersions = len(log) - len(widgets)
	st.WidgetVersions = len(widgets)

	last := map[string]Version{}
	for _, v := range widgets {
		prev, seen := last[v.Name]
		last[v.Name] = v
		switch {
		case v.Deleted:
			continue
		case v.Rewritten:
			res.CommitLogGaps = append(res.CommitLogGaps, fmt.Sprintf(
				"%s at revision %d: its entries do not extend the previous version's (revision %d): a version is missing, or the list was rewritten",
				v.Name, v.Revision, prev.Revision))
		case len(v.Added) != 1:
			from := "its creation"
			if seen {
				from = fmt.Sprintf("the previous version (revision %d)", prev.Revision)
			}
			res.CommitLogGaps = append(res.CommitLogGaps, fmt.Sprintf(
				"%s at revision %d added %d entries to %s, every write adds one: versions are missing from the commit log",
				v.Name, v.Revision, len(v.Added), from))
		}
		for _, e := range v.Added {
			t, err := TokenOf(e)
			if err != nil {
				rp.add(CommitOrder, v.Name, "revision %d: %v", v.Revision, err)
				continue
			}
			l := leases[v.Lease]
			if l == nil {
				rp.add(CommitOrder, v.Name, "%q (token %d) committed at revision %d, guarded by lease %q, of which no version was recorded",
					e, t, v.Revision, v.Lease)
				continue
			}
			if tn := l.tenures[t]; tn == nil || tn.granted > v.Revision {
				granted := "no status of the lease ever named it"
				if tn != nil {
					granted = fmt.Sprintf("it was granted at revision %d", tn.granted)
				}
				rp.add(CommitOrder, v.Lease, "%s %q (token %d) committed at revision %d before its token was granted: %s",
					v.Name, e, t, v.Revision, granted)
				continue
			}
			if i := l.firstAbove(t); i >= 0 && l.revs[i] < v.Revision {
				rp.add(CommitOrder, v.Lease, "%s %q (token %d) committed at revision %d, after revision %d where the lease's status named token %d (holder %q)",
					v.Name, e, t, v.Revision, l.revs[i], l.maxToken[i], l.names[i])
				continue
			}
			if tn := l.tenures[t]; tn.ended != 0 && tn.ended < v.Revision {
				st.LateCommits++
				st.MaxLateBy = max(st.MaxLateBy, v.Revision-tn.ended)
			}
		}
	}
	for _, f := range finals {
		v, ok := last[f.Object]
		want, wantHash := len(f.Entries), HashList(f.Entries)
		if !f.Exists {
			want, wantHash = 0, Hash0
		}
		switch {
		case !ok && want > 0:
			res.CommitLogGaps = append(res.CommitLogGaps, fmt.Sprintf("%s: %d entries in the final state, no version in the commit log", f.Object, want))
		case ok && !v.Deleted && (v.Len != want || v.Hash != wantHash):
			res.CommitLogGaps = append(res.CommitLogGaps, fmt.Sprintf(
				"%s: the last version in the commit log (revision %d) has %d entries, the final state %d (or other ones)", f.Object, v.Revision, v.Len, want))
		}
	}
}
