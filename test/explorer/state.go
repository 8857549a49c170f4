package explorer

import (
	"encoding/binary"
	"encoding/json"
	"hash/maphash"
	"reflect"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/fencedlease"
)

const maxClients = 3

// pAPIServer stands for the API server's commits in traces: they are
// placed by true time (it has no clock the rules read).
const pAPIServer = -2

// pOperator stands for an operator's kubectl fence actions in traces.
const pOperator = -3

// Parties, by index: their clocks.
const (
	pController = iota
	pFencing
	pLeaseWebhook
	pClient0
	maxParties = pClient0 + maxClients
)

var partyNames = [pClient0]string{"controller", "fencing webhook", "lease webhook"}

// base is true time 0.
var base = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// version is one stored version of the lease (nil obj: it does not exist),
// immutable once made.
type version struct {
	obj *coordv1alpha1.FencedLease
	// rev is its etcd revision, at the tick it was committed.
	rev int64
	at  int
	// key hashes its content without its times and its resourceVersion;
	// times are its times, in a fixed order: a state's key takes them
	// relative to its now, so that versions that differ only by when they
	// were written compare equal.
	key   [2]uint64
	times []time.Time
}

var seeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

func newVersion(obj *coordv1alpha1.FencedLease, rev int64, at int) *version {
	v := &version{obj: obj, rev: rev, at: at}
	var data []byte
	if obj != nil {
		c := obj.DeepCopy()
		c.ResourceVersion = ""
		v.times = takeTimes(reflect.ValueOf(c).Elem(), nil)
		var err error
		if data, err = json.Marshal(c); err != nil {
			panic(err)
		}
	}
	for i := range v.key {
		v.key[i] = maphash.Bytes(seeds[i], data)
	}
	return v
}

var (
	timeType  = reflect.TypeFor[metav1.Time]()
	microType = reflect.TypeFor[metav1.MicroTime]()
)

// takeTimes moves every non-zero time in v into times (replacing it with
// the Unix epoch, so that the content still tells a set time from an unset
// one), in the order of the walk.
func takeTimes(v reflect.Value, times []time.Time) []time.Time {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			times = takeTimes(v.Elem(), times)
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			times = takeTimes(v.Index(i), times)
		}
	case reflect.Map:
		// Labels, annotations: no times.
	case reflect.Struct:
		var t *time.Time
		switch v.Type() {
		case timeType:
			t = &v.Addr().Interface().(*metav1.Time).Time
		case microType:
			t = &v.Addr().Interface().(*metav1.MicroTime).Time
		}
		if t != nil {
			if !t.IsZero() {
				times = append(times, *t)
				*t = time.Unix(0, 0)
			}
			return times
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				times = takeTimes(v.Field(i), times)
			}
		}
	}
	return times
}

// lookback is how far back a time can still decide anything: a tenure's
// expiry counts at most L plus its allowance from its latest observation or
// stamp, the fencing webhook's bound subtracts the skew, clocks differ by the
// skew, and the environment's delays come on top (a decision compares with
// the time it started). Every rule compares a time older than that with now
// (or with a later time) the same way, so older times are all alike.
func (m *model) lookback() time.Duration {
	c := m.cfg
	l := time.Duration(c.LeaseSeconds) * time.Second
	return l + c.Timing.Allowance(l) + 2*c.Skew +
		time.Duration(c.DecisionDelay+c.CommitDelay+c.ControllerDelay+c.ClientDelay+2)*c.Tick
}

// instance is one request in the lease's spec, as the model knows it: who
// made it (a request withdrawn and made again is a new instance).
type instance struct {
	identity string
	id       int
	owner    int // client index
}

// guarded is the one guarded object.
type guarded struct {
	exists   bool
	hasToken bool
	token    int64
	rev      int64
}

// ctrlState is the controller process.
type ctrlState struct {
	up  bool
	mem fencedlease.Memory
	// cache is the version its informer cache has (with Config.CacheLag);
	// loop the version its reconcile loop goes on with (its own write's, or
	// the one it read after a conflict), nil when the loop has ended.
	cache, loop *version
	// done is the revision of the lease version it last reconciled (-1:
	// none), requeue the tick it asked to be woken at (-1: none).
	done    int64
	requeue int
	// restarts counts its restarts; operator counts the operator's actions.
	restarts, operator int
	// live is the heartbeat its loop read live for its next decision
	// (Step.NeedsLiveHeartbeat), nil when none.
	live *fencedlease.Heartbeat
}

// Client phases.
const (
	cIdle      = iota // no request
	cQueued           // request made, not leading
	cLeading          // acknowledged its grant: leads until its deadline
	cLost             // knows its tenure ended (or released it); may queue again
	cCrashed          // stopped for good
	cReleasing        // released: the gate is closed, the request goes once its writes returned
)

type clientState struct {
	phase int
	token int64
	// fenced is the token it stepped down from on a stale refusal, acked
	// the last it acknowledged.
	fenced, acked int64
	// ackSince is the tick since which it has a grant to acknowledge (-1:
	// none).
	ackSince int
	// deadline is its local deadline (its clock), valid while leading.
	deadline time.Time
	// renewals, writes, tokenless, joins and releases count what it did.
	renewals, writes, tokenless, joins, releases int
	// inflight counts its guarded writes under way (fence.Writes); taken
	// counts the writes that took the token but were not counted yet
	// (Config.SplitGate); unknown is set when one ended without an answer.
	inflight, taken int
	unknown         bool
	timeouts        int
	// A release: released is the tick its gate closed, quiet the tick its
	// quiesce saw no write under way (-1: not yet); withdrawing is the lease
	// version its withdraw patch was built on while the patch is under way
	// (sent at withdrawSent).
	released, quiet, withdrawSent int
	withdrawing                   *version
}

// Write phases.
const (
	wArrived  = iota // at the fencing webhook
	wDecided         // its lease read and decision are done, its answer is due at answerAt
	wAnswered        // admitted, not committed yet
)

// write is one guarded write under way.
type write struct {
	client    int
	tokenless bool
	token     int64
	phase     int
	// arrived is the tick the webhook took it (its decision's start),
	// answered the tick of the answer (due: answerAt).
	arrived, answerAt, answered int
	// old is the guarded object its admission saw (oldObject); a commit on
	// a newer one admits it again.
	old guarded
	// abandoned: its client gave up waiting for the answer (it may still
	// commit).
	abandoned bool
	// checked is the token of the tenure the webhook admitted a tokenless
	// write under (the lease's, as it read it).
	checked int64
	// verdict is the webhook's answer, decided on the lease it read (at
	// readRev).
	verdict verdict
	readRev int64
	retries int
}

// state is one state of the model. Values are copied on every step; the
// lease versions are shared and never changed.
type state struct {
	t   int
	rev int64
	// offsets are the parties' clock offsets from the controller's.
	offsets [maxParties]time.Duration

	// lease is the stored lease (lease.obj nil: there is none); epoch the
	// epoch store's entry for its name.
	lease *version
	epoch int64
	// incarnation counts the lease's re-creations.
	incarnation int
	insts       []instance
	nextInst    int
	obj         guarded
	ctrl        ctrlState
	clients     [maxClients]clientState
	writes      []write
	// hb is the heartbeat Lease (heartbeat.go).
	hb hbState

	// Ground truth: the live tenure (token 0: none), the highest token
	// granted (by commit order) and who owns each granted token (the client
	// whose request instance was granted it).
	live       tenure
	maxGranted int64
	owners     []tokenOwner

	// violation is set on the state in which an invariant broke.
	violation *violation
}

type tokenOwner struct {
	token int64
	owner int
}

// ownerOf is the client that owns the tenure of token (-1: none).
func (s *state) ownerOf(token int64) int {
	for _, o := range s.owners {
		if o.token == token {
			return o.owner
		}
	}
	return -1
}

// tenure is a grant as the model knows it: which request instance got it.
type tenure struct {
	token    int64
	identity string
	inst     int
	owner    int
}

func (s *state) clone() *state {
	c := *s
	c.insts = append([]instance(nil), s.insts...)
	c.writes = append([]write(nil), s.writes...)
	c.owners = append([]tokenOwner(nil), s.owners...)
	return &c
}

// now is party p's clock.
func (s *state) now(cfg *Config, p int) time.Time {
	return base.Add(time.Duration(s.t)*cfg.Tick + s.offsets[p])
}

// key hashes everything that decides what can happen next, with times
// relative to now (older than the lookback: clamped) and revisions and
// request instances renamed by rank: states that differ only by when they
// happened compare equal, so the exploration needs no horizon.
func (m *model) key(s *state) [2]uint64 {
	b := m.keyBytes(s)
	return [2]uint64{maphash.Bytes(seeds[0], b), maphash.Bytes(seeds[1], b)}
}

func (m *model) keyBytes(s *state) []byte {
	var b []byte
	put := func(vs ...int64) {
		for _, v := range vs {
			b = binary.AppendVarint(b, v)
		}
	}
	now := base.Add(time.Duration(s.t) * m.cfg.Tick)
	lookback := m.lookback()
	putTime := func(t time.Time) {
		if t.IsZero() {
			put(-1 << 40)
		} else {
			put(int64(max(t.Sub(now), -lookback) / time.Microsecond))
		}
	}
	// A commit's tick only tells whether the controller must react by now.
	ticksAgo := func(at int) int64 { return int64(min(s.t-at, m.cfg.ControllerDelay+1)) }
	// Revisions and instances by rank.
	var revs []int64
	addRev := func(r int64) {
		if !slices.Contains(revs, r) {
			revs = append(revs, r)
		}
	}
	addRev(s.lease.rev)
	if s.ctrl.cache != nil && m.cfg.CacheLag > 0 {
		addRev(s.ctrl.cache.rev)
	}
	if s.ctrl.loop != nil {
		addRev(s.ctrl.loop.rev)
	}
	for i := range m.cfg.Clients {
		if v := s.clients[i].withdrawing; v != nil {
			addRev(v.rev)
		}
	}
	addRev(s.ctrl.done)
	addRev(s.obj.rev)
	for _, w := range s.writes {
		addRev(w.old.rev)
	}
	slices.Sort(revs)
	rank := func(r int64) int64 { return int64(slices.Index(revs, r)) }
	var ids []int
	for _, in := range s.insts {
		ids = append(ids, in.id)
	}
	if s.live.token != 0 {
		ids = append(ids, s.live.inst)
	}
	slices.Sort(ids)
	idRank := func(id int) int64 { return int64(slices.Index(ids, id)) }

	for _, o := range s.offsets {
		put(int64(o))
	}
	putVersion := func(v *version) {
		if v == nil {
			put(-1)
			return
		}
		if v.obj == nil {
			put(0, rank(v.rev), ticksAgo(v.at))
			return
		}
		put(1, int64(v.key[0]), int64(v.key[1]), rank(v.rev), ticksAgo(v.at))
		for _, t := range v.times {
			putTime(t)
		}
	}
	putVersion(s.lease)
	if m.cfg.CacheLag > 0 {
		putVersion(s.ctrl.cache)
	}
	putVersion(s.ctrl.loop)
	put(s.epoch, int64(s.incarnation))
	for _, in := range s.insts {
		b = append(b, in.identity...)
		put(idRank(in.id), int64(in.owner))
	}
	put(b2i(s.obj.exists), b2i(s.obj.hasToken), s.obj.token, rank(s.obj.rev))
	put(b2i(s.ctrl.up), rank(s.ctrl.done), int64(s.ctrl.restarts), int64(s.ctrl.operator))
	if s.ctrl.requeue >= 0 {
		put(int64(max(s.ctrl.requeue-s.t, -m.cfg.ControllerDelay-1)))
	} else {
		put(-1 << 40)
	}
	if o, ok := s.ctrl.mem.Observed(); ok {
		b = append(b, o.Holder...)
		put(o.Token, o.RenewSequence, b2i(o.Acknowledged))
		putTime(o.At)
		putTime(o.Recorded)
	} else {
		put(-2)
	}
	for i := range m.cfg.Clients {
		c := &s.clients[i]
		put(int64(c.phase), c.token, c.fenced, c.acked, int64(c.renewals), int64(c.writes), int64(c.tokenless), int64(c.joins), int64(c.releases), int64(c.inflight))
		put(int64(c.taken), b2i(c.unknown), int64(c.timeouts))
		if c.phase == cReleasing {
			// Quiesce gives up a lease duration after the release, and
			// waits what the probe measured after an unknown outcome
			// (gate.go): older is alike.
			put(int64(min(s.t-c.released, m.cfg.ticks(time.Duration(m.cfg.LeaseSeconds)*time.Second)+1)))
			if c.quiet >= 0 {
				_, after := releaseAfterUnknown()
				put(int64(min(s.t-c.quiet, m.cfg.ticks(after)+1)))
			} else {
				put(-1)
			}
		}
		if c.withdrawing != nil {
			put(int64(s.t - c.withdrawSent))
			putVersion(c.withdrawing)
		}
		if c.ackSince >= 0 {
			put(int64(s.t - c.ackSince))
		} else {
			put(-1)
		}
		if c.phase == cLeading && s.now(m.cfg, pClient0+i).Before(c.deadline) {
			putTime(c.deadline)
		} else {
			put(-3)
		}
	}
	for _, w := range s.writes {
		put(int64(w.client), b2i(w.tokenless), w.token, w.checked, int64(w.phase), int64(s.t-w.arrived), int64(w.retries), b2i(w.abandoned))
		switch w.phase {
		case wDecided:
			put(int64(w.answerAt-s.t), b2i(w.verdict.allowed), b2i(w.verdict.stale), int64(w.verdict.code))
		case wAnswered:
			put(int64(s.t - w.answered))
		}
		put(b2i(w.old.exists), b2i(w.old.hasToken), w.old.token, rank(w.old.rev))
	}
	m.hbKey(s, put, putTime)
	b = append(b, s.live.identity...)
	put(s.live.token, int64(s.live.owner), s.maxGranted)
	for _, o := range s.owners {
		put(o.token, int64(o.owner))
	}
	if s.live.token != 0 {
		put(idRank(s.live.inst))
	}
	return b
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
