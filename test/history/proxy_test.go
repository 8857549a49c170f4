package history

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// faultProxy is a loopback TCP proxy between one worker and the API server.
// It forwards bytes unchanged (TLS passes through end to end) and can be told
// to delay them, to hold them (a partition, in one or both directions), and to
// reset every connection. Held bytes are delivered when the partition heals,
// unless the connections are reset: a request held past its client's timeout
// may still reach the API server, late, which is what a lossy network does.
type faultProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	delay   time.Duration
	holdUp  bool          // client to server held
	holdDn  bool          // server to client held
	healed  chan struct{} // closed when a hold is lifted
	conns   map[net.Conn]struct{}
	closed  bool
	counter struct{ conns, resets int }
}

func newFaultProxy(target string) (*faultProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &faultProxy{ln: ln, target: target, healed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	go p.serve()
	return p, nil
}

// Addr is where clients connect.
func (p *faultProxy) Addr() string { return p.ln.Addr().String() }

func (p *faultProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !p.track(c, s) {
			return
		}
		go p.pipe(c, s, true)
		go p.pipe(s, c, false)
	}
}

func (p *faultProxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range conns {
			_ = c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	p.counter.conns++
	return true
}

type chunk struct {
	data []byte
	at   time.Time
}

// pipe copies src to dst: a reader queues chunks with their arrival time, a
// writer delivers each after the delay in force, and not while held.
func (p *faultProxy) pipe(src, dst net.Conn, up bool) {
	queue := make(chan chunk, 256)
	go func() {
		defer close(queue)
		for {
			buf := make([]byte, 32*1024)
			n, err := src.Read(buf)
			if n > 0 {
				queue <- chunk{data: buf[:n], at: time.Now()}
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		_ = dst.Close()
		_ = src.Close()
		go func() { // let the reader finish
			for range queue {
			}
		}()
		p.mu.Lock()
		delete(p.conns, src)
		delete(p.conns, dst)
		p.mu.Unlock()
	}()
	for c := range queue {
		for {
			p.mu.Lock()
			delay, held, healed := p.delay, (up && p.holdUp) || (!up && p.holdDn), p.healed
			p.mu.Unlock()
			if held {
				<-healed
				continue
			}
			if wait := time.Until(c.at.Add(delay)); wait > 0 {
				time.Sleep(wait)
				continue // the fault may have changed meanwhile
			}
			break
		}
		if _, err := dst.Write(c.data); err != nil {
			return
		}
	}
}

// SetDelay delays every byte by d (0: no delay).
func (p *faultProxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// Hold holds bytes going up (to the API server) and/or down (to the worker).
func (p *faultProxy) Hold(up, down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holdUp, p.holdDn = up, down
}

// Heal lifts holds and delay; with reset, every connection is closed first,
// dropping what was held.
func (p *faultProxy) Heal(reset bool) {
	if reset {
		p.Reset()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay, p.holdUp, p.holdDn = 0, false, false
	close(p.healed)
	p.healed = make(chan struct{})
}

// Reset closes every connection (the worker sees a reset and reconnects).
func (p *faultProxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.counter.resets++
}

// Close stops the proxy and closes its connections.
func (p *faultProxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.Heal(true)
}

// TestFaultProxy checks the proxy's faults on an echo server.
func TestFaultProxy(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	p, err := newFaultProxy(echo.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	roundTrip := func(msg string, timeout time.Duration) (time.Duration, error) {
		start := time.Now()
		if _, err := c.Write([]byte(msg)); err != nil {
			return 0, err
		}
		_ = c.SetReadDeadline(time.Now().Add(timeout))
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(c, buf); err != nil {
			return time.Since(start), err
		}
		if !bytes.Equal(buf, []byte(msg)) {
			t.Fatalf("echo = %q, want %q", buf, msg)
		}
		return time.Since(start), nil
	}

	if d, err := roundTrip("plain", time.Second); err != nil || d > 200*time.Millisecond {
		t.Fatalf("plain round trip: %v, %v", d, err)
	}
	p.SetDelay(100 * time.Millisecond)
	if d, err := roundTrip("slow", 2*time.Second); err != nil || d < 200*time.Millisecond {
		t.Fatalf("delayed round trip (100ms each way): %v, %v", d, err)
	}
	p.Heal(false)

	// Held answers arrive once the partition heals without a reset.
	p.Hold(false, true)
	if _, err := roundTrip("held", 300*time.Millisecond); err == nil {
		t.Fatal("an answer got through a held link")
	}
	p.Heal(false)
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "held" {
		t.Fatalf("held answer after healing: %q, %v", buf, err)
	}

	// A reset closes the connection.
	p.Hold(true, true)
	p.Heal(true)
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := c.Read(buf); err == nil {
		t.Fatal("the connection survived a reset")
	}
}
