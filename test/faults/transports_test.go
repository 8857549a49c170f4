package faults

import (
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/kubefence/kubefence/test/testenv/fault"
)

// The fault transports of the matrix: they wrap a controller's or a
// client's transport (rest.Config.Wrap) and lose, hold back or slow down its
// requests. A paused process or a partition is a fault.Gate (Stall).

var errInjected = errors.New("connection reset by peer (injected fault)")

// crashPoint says which write of the expiry-and-grant sequence a crashing
// controller loses.
type crashPoint int

const (
	// grantRequestLost: the status write that expires the holder and grants the
	// waiter, after the spec write that removed the expired request, never
	// reaches the API server.
	grantRequestLost crashPoint = iota
	// grantResponseLost: that status write is committed, but the controller
	// dies before it learns so.
	grantResponseLost
	// removalLost: the status write (expiry and grant) is committed, and the
	// spec write that removes the expired request afterwards is lost.
	removalLost
)

// crashingTransport makes a controller die at a crash point: once armed, the
// write at the crash point and everything after it fail (a dead process sends
// nothing more).
type crashingTransport struct {
	leasePath string
	point     crashPoint
	armed     atomic.Bool
	triggered atomic.Bool
	dead      atomic.Bool
	died      chan struct{}
}

func newCrashingTransport(ns, name string, point crashPoint) *crashingTransport {
	return &crashingTransport{
		leasePath: "/apis/coordination.kubefence.io/v1alpha1/namespaces/" + ns + "/fencedleases/" + name,
		point:     point,
		died:      make(chan struct{}),
	}
}

func (c *crashingTransport) wrap(rt http.RoundTripper) http.RoundTripper {
	return fault.RoundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if c.dead.Load() {
			return nil, errInjected
		}
		if !c.armed.Load() || req.Method != http.MethodPut {
			return rt.RoundTrip(req)
		}
		spec, status := req.URL.Path == c.leasePath, req.URL.Path == c.leasePath+"/status"
		trigger, target := spec, status
		if c.point == removalLost {
			trigger, target = status, spec
		}
		if target && c.triggered.Load() {
			c.dead.Store(true)
			defer close(c.died)
			if c.point == grantResponseLost {
				if resp, err := rt.RoundTrip(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
			}
			return nil, errInjected
		}
		resp, err := rt.RoundTrip(req)
		if trigger && err == nil && resp.StatusCode < 300 {
			c.triggered.Store(true)
		}
		return resp, err
	})
}

// delayingTransport holds back, once armed, the controller's next status
// write of one lease for a while before sending it: a slow API server or etcd
// commits the write late.
type delayingTransport struct {
	statusPath string
	delay      time.Duration
	armed      atomic.Bool
	fired      atomic.Bool
	sentAt     chan time.Time
}

func (d *delayingTransport) wrap(rt http.RoundTripper) http.RoundTripper {
	return fault.RoundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if d.armed.Load() && req.Method == http.MethodPut && req.URL.Path == d.statusPath && d.fired.CompareAndSwap(false, true) {
			time.Sleep(d.delay)
			d.sentAt <- time.Now()
		}
		return rt.RoundTrip(req)
	})
}

// slowWrites delays every write a client sends: a slower network path.
func slowWrites(d time.Duration) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return fault.RoundTripperFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method != http.MethodGet {
				time.Sleep(d)
			}
			return rt.RoundTrip(req)
		})
	}
}
