package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// errFrozen is what a frozen client's requests fail with: the holder has
// stopped talking to the API server (a crash or a partition, as far as the
// server can tell).
var errFrozen = errors.New("bench: client frozen")

// isWrite: the clients send GET (reads and watches), POST, PUT, PATCH, DELETE.
func isWrite(method string) bool { return method != http.MethodGet }

func isWatch(req *http.Request) bool {
	return req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1"
}

// holderTransport wraps one candidate's API connection. It counts the reads
// the candidate sends (GET and LIST, not watches), remembers when the last
// successful write was sent, and can be frozen: from then on every new
// request fails at once, so the candidate renews no more.
type holderTransport struct {
	mu       sync.Mutex
	frozen   bool
	reads    int
	lastSent time.Time
}

// wrap is a rest.Config WrapTransport.
func (t *holderTransport) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper{next: rt, fn: t.roundTrip}
}

// roundTripper binds a counting function to one underlying transport (a
// config may be turned into more than one HTTP client).
type roundTripper struct {
	next http.RoundTripper
	fn   func(http.RoundTripper, *http.Request) (*http.Response, error)
}

func (r roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return r.fn(r.next, req) }

func (t *holderTransport) roundTrip(next http.RoundTripper, req *http.Request) (*http.Response, error) {
	write := isWrite(req.Method)
	t.mu.Lock()
	if t.frozen {
		t.mu.Unlock()
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, errFrozen
	}
	if req.Method == http.MethodGet && !isWatch(req) {
		t.reads++
	}
	t.mu.Unlock()

	sent := time.Now()
	resp, err := next.RoundTrip(req)
	if write && err == nil && resp.StatusCode < 300 {
		t.mu.Lock()
		if sent.After(t.lastSent) {
			t.lastSent = sent
		}
		t.mu.Unlock()
	}
	return resp, err
}

// freeze makes every later request fail. Requests already in flight finish.
func (t *holderTransport) freeze() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.frozen = true
}

// lastWriteSent is the send time of the newest successful write.
func (t *holderTransport) lastWriteSent() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastSent
}

func (t *holderTransport) readsSent() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.reads
}

// Controller write categories.
const (
	catStatusGrant   = "status: grant / end of tenure"
	catStatusRenewal = "status: renewal observed"
	catStatusQueue   = "status: waiting list"
	catStatusOther   = "status: conditions / other"
	catSpecExpiry    = "spec: expiry (request removed)"
	catSpecOther     = "spec: finalizer / other"
	catEvents        = "events"
	catOther         = "other (epoch store, ...)"
	catFailed        = "(of which refused, e.g. conflict)"
)

var categoryOrder = []string{catStatusGrant, catStatusRenewal, catStatusQueue, catStatusOther, catSpecExpiry, catSpecOther, catEvents, catOther, catFailed}

// writeCounts counts writes by category.
type writeCounts map[string]int

func (w writeCounts) total() int {
	return w[catStatusGrant] + w[catStatusRenewal] + w[catStatusQueue] + w[catStatusOther] + w[catSpecExpiry] + w[catSpecOther] + w[catEvents] + w[catOther]
}

func (w writeCounts) sub(o writeCounts) writeCounts {
	out := writeCounts{}
	for k, v := range w {
		out[k] = v - o[k]
	}
	return out
}

// controllerTransport wraps the controller manager's API connection and sorts
// its writes, per namespace, into what they were for. Status writes are told
// apart by comparing each with the previous status this controller wrote for
// the same lease (only the controller writes status).
type controllerTransport struct {
	mu          sync.Mutex
	counts      map[string]writeCounts // namespace -> category -> writes
	lastStatus  map[string]coordv1alpha1.FencedLeaseStatus
	lastExpired map[string]string
	log         []ctrlWrite
}

// ctrlWrite is one controller write to a FencedLease, kept to take a
// takeover or a hand-over apart afterwards.
type ctrlWrite struct {
	namespace, name, category string
	sent, done                time.Time
	ok                        bool
	holder                    string // status.holderIdentity written (status writes)
}

func newControllerTransport() *controllerTransport {
	return &controllerTransport{counts: map[string]writeCounts{}, lastStatus: map[string]coordv1alpha1.FencedLeaseStatus{}, lastExpired: map[string]string{}}
}

func (t *controllerTransport) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper{next: rt, fn: t.roundTrip}
}

// counted returns the writes counted so far in namespace ns ("": in all).
func (t *controllerTransport) counted(ns string) writeCounts {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := writeCounts{}
	for n, c := range t.counts {
		for k, v := range c {
			if ns == "" || n == ns {
				out[k] += v
			}
		}
	}
	return out
}

// trace returns the controller's writes to FencedLeases in namespace ns sent
// after since, oldest first.
func (t *controllerTransport) trace(ns string, since time.Time) []ctrlWrite {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []ctrlWrite
	for _, w := range t.log {
		if w.namespace == ns && w.sent.After(since) {
			out = append(out, w)
		}
	}
	return out
}

func (t *controllerTransport) roundTrip(next http.RoundTripper, req *http.Request) (*http.Response, error) {
	if !isWrite(req.Method) {
		return next.RoundTrip(req)
	}
	// .../namespaces/<ns>/<resource>[/<name>[/<sub>]]
	_, rest, _ := strings.Cut(req.URL.Path, "/namespaces/")
	parts := append(strings.Split(rest, "/"), "", "", "", "")
	ns, resource, name, sub := parts[0], parts[1], parts[2], parts[3]
	key := ns + "/" + name
	cat := catOther
	var obj *coordv1alpha1.FencedLease
	switch resource {
	case "fencedleases":
		obj = &coordv1alpha1.FencedLease{}
		if body, err := req.GetBody(); err != nil || json.NewDecoder(body).Decode(obj) != nil {
			obj = nil
		}
		t.mu.Lock()
		cat = t.classifyLease(key, sub, obj)
		t.mu.Unlock()
	case "events":
		cat = catEvents
	}

	sent := time.Now()
	resp, err := next.RoundTrip(req)
	ok := err == nil && resp.StatusCode < 300
	done := time.Now()

	t.mu.Lock()
	defer t.mu.Unlock()
	if resource == "fencedleases" {
		w := ctrlWrite{namespace: ns, name: name, category: cat, sent: sent, done: done, ok: ok}
		if obj != nil && sub == "status" {
			w.holder = obj.Status.HolderIdentity
		}
		t.log = append(t.log, w)
	}
	if t.counts[ns] == nil {
		t.counts[ns] = writeCounts{}
	}
	t.counts[ns][cat]++
	if !ok {
		t.counts[ns][catFailed]++
	}
	if ok && obj != nil {
		switch sub {
		case "status":
			t.lastStatus[key] = obj.Status
		case "":
			if v, found := obj.Annotations[coordv1alpha1.ExpiredAnnotation]; found {
				t.lastExpired[key] = v
			}
		}
	}
	return resp, err
}

// classifyLease names a controller write to a FencedLease; t.mu is held.
func (t *controllerTransport) classifyLease(key, sub string, obj *coordv1alpha1.FencedLease) string {
	switch {
	case sub == "status" && obj == nil:
		return catStatusOther
	case obj == nil:
		return catSpecOther
	case sub == "status":
		prev, s := t.lastStatus[key], obj.Status
		switch {
		case s.HolderIdentity != prev.HolderIdentity || s.FencingToken != prev.FencingToken:
			return catStatusGrant
		case s.RenewSequence != prev.RenewSequence:
			return catStatusRenewal
		case !slices.EqualFunc(s.Waiting, prev.Waiting, func(a, b coordv1alpha1.WaitingRequest) bool { return a.HolderIdentity == b.HolderIdentity }):
			return catStatusQueue
		}
		return catStatusOther
	}
	if v, found := obj.Annotations[coordv1alpha1.ExpiredAnnotation]; found && v != t.lastExpired[key] {
		return catSpecExpiry
	}
	return catSpecOther
}
