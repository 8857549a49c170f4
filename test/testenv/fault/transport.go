package fault

import (
	"context"
	"io"
	"net/http"
)

// RoundTripperFunc is an http.RoundTripper made of a function: the fault
// transports the suites wrap a client's transport with (rest.Config.Wrap).
type RoundTripperFunc func(*http.Request) (*http.Response, error)

// RoundTrip calls f.
func (f RoundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// Stall wraps rt so that a client's traffic stalls while g is closed, as a
// paused process or a network partition would: new requests wait (until
// their context ends), and so do reads of response bodies already streaming
// (watches).
func (g *Gate) Stall(rt http.RoundTripper) http.RoundTripper {
	return RoundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if err := g.Wait(req.Context()); err != nil {
			return nil, err
		}
		resp, err := rt.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		resp.Body = &stalledBody{ReadCloser: resp.Body, g: g, ctx: req.Context()}
		return resp, nil
	})
}

type stalledBody struct {
	io.ReadCloser
	g   *Gate
	ctx context.Context
}

func (b *stalledBody) Read(p []byte) (int, error) {
	if err := b.g.Wait(b.ctx); err != nil {
		return 0, err
	}
	return b.ReadCloser.Read(p)
}

// StallWrites wraps rt so that, while g is closed, every write (any method
// but GET) waits, as a stalled process or network path would; a stalled
// request is sent once g opens, unless its context ends first. Reads pass.
func (g *Gate) StallWrites(rt http.RoundTripper) http.RoundTripper {
	return RoundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method != http.MethodGet {
			if err := g.Wait(req.Context()); err != nil {
				return nil, err
			}
		}
		return rt.RoundTrip(req)
	})
}
