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
//
// Between a kube-apiserver and etcd it can also delay only what etcd sends
// (SetDownDelay), and only on the connections whose requests name a key
// prefix: kube-apiserver keeps one etcd client, so one connection, per
// resource, and a delay there makes that resource's watch cache, and every
// informer fed from it, lag while the server goes on serving.
type faultProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	delay time.Duration
	// mark is set before the first connection (newMarkingProxy): a
	// connection whose bytes to the target contain it is marked.
	mark []byte
	// downDelay delays bytes from the target, on the marked connections only
	// if downMarkedOnly.
	downDelay      time.Duration
	downMarkedOnly bool
	holdUp         bool          // client to server held
	holdDn         bool          // server to client held
	healed         chan struct{} // closed when a hold is lifted
	conns          map[net.Conn]struct{}
	closed         bool
	counter        struct{ conns, resets, marked int }
}

func newFaultProxy(target string) (*faultProxy, error) {
	return newMarkingProxy(target, nil)
}

// newMarkingProxy is a faultProxy that marks the connections whose bytes to
// the target contain mark, so that SetDownDelay can delay those only.
func newMarkingProxy(target string, mark []byte) (*faultProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &faultProxy{ln: ln, target: target, mark: mark, healed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
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
		m := &marker{}
		go p.pipe(c, s, true, m)
		go p.pipe(s, c, false, m)
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

// marker tells whether one connection's bytes to the target have contained
// the proxy's mark, across reads.
type marker struct {
	mu     sync.Mutex
	marked bool
	tail   []byte // the last bytes read, for a mark split across reads
}

// observe scans b, the connection's next bytes to the target, for mark, and
// tells whether that marked the connection.
func (m *marker) observe(b, mark []byte) bool {
	if len(mark) == 0 {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.marked {
		return false
	}
	buf := append(m.tail, b...)
	if bytes.Contains(buf, mark) {
		m.marked, m.tail = true, nil
		return true
	}
	if keep := len(mark) - 1; len(buf) > keep {
		buf = buf[len(buf)-keep:]
	}
	m.tail = append([]byte(nil), buf...)
	return false
}

func (m *marker) isMarked() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.marked
}

// pipe copies src to dst: a reader queues chunks with their arrival time, a
// writer delivers each after the delay in force, and not while held. m is the
// connection's marker: the reader of bytes going up feeds it.
func (p *faultProxy) pipe(src, dst net.Conn, up bool, m *marker) {
	queue := make(chan chunk, 256)
	go func() {
		defer close(queue)
		for {
			buf := make([]byte, 32*1024)
			n, err := src.Read(buf)
			if n > 0 {
				if up && m.observe(buf[:n], p.mark) {
					p.mu.Lock()
					p.counter.marked++
					p.mu.Unlock()
				}
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
			downDelay, markedOnly := p.downDelay, p.downMarkedOnly
			p.mu.Unlock()
			if !up && downDelay > delay && (!markedOnly || m.isMarked()) {
				delay = downDelay
			}
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

// SetDownDelay delays every byte from the target by d, keeping their order:
// with markedOnly on the marked connections only (newMarkingProxy), else on
// all. Heal ends it.
func (p *faultProxy) SetDownDelay(d time.Duration, markedOnly bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.downDelay, p.downMarkedOnly = d, markedOnly
}

// Marked is the number of connections marked so far.
func (p *faultProxy) Marked() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counter.marked
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
	p.delay, p.downDelay, p.holdUp, p.holdDn = 0, 0, false, false
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

	// A down delay on marked connections only: one whose bytes up carried the
	// mark (split across two writes) is delayed one way, another is not.
	mp, err := newMarkingProxy(echo.Addr().String(), []byte("/registry/configmaps/"))
	if err != nil {
		t.Fatal(err)
	}
	defer mp.Close()
	marked, err := net.Dial("tcp", mp.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer marked.Close()
	plain, err := net.Dial("tcp", mp.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	c = marked
	for _, part := range []string{"watch /registry/config", "maps/history"} {
		if _, err := roundTrip(part, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if n := mp.Marked(); n != 1 {
		t.Fatalf("%d connections marked, want 1", n)
	}
	mp.SetDownDelay(300*time.Millisecond, true)
	if d, err := roundTrip("lagging", 2*time.Second); err != nil || d < 300*time.Millisecond || d > 550*time.Millisecond {
		t.Fatalf("marked connection under a 300ms down delay: %v, %v", d, err)
	}
	c = plain
	if d, err := roundTrip("/registry/widgets/", time.Second); err != nil || d > 200*time.Millisecond {
		t.Fatalf("unmarked connection under a down delay of the marked ones: %v, %v", d, err)
	}
	mp.SetDownDelay(300*time.Millisecond, false)
	if d, err := roundTrip("every", 2*time.Second); err != nil || d < 300*time.Millisecond {
		t.Fatalf("unmarked connection under a down delay of every connection: %v, %v", d, err)
	}
	mp.Heal(false)
	c = marked
	if d, err := roundTrip("healed", time.Second); err != nil || d > 200*time.Millisecond {
		t.Fatalf("marked connection after healing: %v, %v", d, err)
	}
}
