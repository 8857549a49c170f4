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
// informer fed from it, lag while the server goes on serving. And it can
// delay one resource's writes on their way to etcd (SetWriteDelay, with
// newEtcdProxy): a write kube-apiserver has admitted then commits late, the
// commit lag that fencing's commit-lag bound is about.
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
	// writes is set before the first connection (newEtcdProxy): it picks out
	// the etcd writes that SetWriteDelay delays.
	writes     *writeMatch
	writeDelay time.Duration
	holdUp     bool          // client to server held
	holdDn     bool          // server to client held
	healed     chan struct{} // closed when a hold is lifted
	conns      map[net.Conn]struct{}
	closed     bool
	counter    struct{ conns, resets, marked, delayedWrites int }
}

// writeMatch picks out one resource's writes among the bytes a kube-apiserver
// sends etcd. kube-apiserver keeps one etcd client, so one connection, per
// resource: a connection whose bytes have carried key (the resource's etcd
// key prefix) is that resource's. On it, a write (an etcd Txn putting an
// object) carries the object's stored JSON, and only a write does: reads and
// watches carry keys only. So a chunk that carries value (a string in every
// stored object of the resource, such as its kind) is a write.
type writeMatch struct{ key, value []byte }

func newFaultProxy(target string) (*faultProxy, error) {
	return newMarkingProxy(target, nil)
}

// newEtcdProxy is a proxy from a kube-apiserver to etcd that marks the
// connections carrying mark (nil: none), as newMarkingProxy does, and whose
// SetWriteDelay delays the writes that writes picks out.
func newEtcdProxy(etcd string, mark []byte, writes writeMatch) (*faultProxy, error) {
	p, err := newMarkingProxy(etcd, mark)
	if err == nil {
		p.writes = &writes
	}
	return p, err
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
		m, wm := &marker{}, &marker{}
		go p.pipe(c, s, true, m, wm)
		go p.pipe(s, c, false, m, wm)
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
	// write: the chunk carries a write that SetWriteDelay delays.
	write bool
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
// writer delivers each after the delay in force, and not while held; a chunk
// waits for the ones before it, so order is kept. m and wm are the
// connection's markers (for the mark and for the writes' key): the reader of
// bytes going up feeds them.
func (p *faultProxy) pipe(src, dst net.Conn, up bool, m, wm *marker) {
	queue := make(chan chunk, 256)
	go func() {
		defer close(queue)
		var tail []byte // the last bytes read, for a write's value split across reads
		for {
			buf := make([]byte, 32*1024)
			n, err := src.Read(buf)
			if n > 0 {
				c := chunk{data: buf[:n], at: time.Now()}
				if up && m.observe(buf[:n], p.mark) {
					p.mu.Lock()
					p.counter.marked++
					p.mu.Unlock()
				}
				if up && p.writes != nil {
					wm.observe(buf[:n], p.writes.key)
					seen := append(tail, buf[:n]...)
					c.write = wm.isMarked() && bytes.Contains(seen, p.writes.value)
					tail = append([]byte(nil), seen[max(0, len(seen)-len(p.writes.value)+1):]...)
					if c.write {
						p.mu.Lock()
						if p.writeDelay > 0 {
							p.counter.delayedWrites++
						}
						p.mu.Unlock()
					}
				}
				queue <- c
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
			downDelay, markedOnly, writeDelay := p.downDelay, p.downMarkedOnly, p.writeDelay
			p.mu.Unlock()
			if !up && downDelay > delay && (!markedOnly || m.isMarked()) {
				delay = downDelay
			}
			if up && c.write && writeDelay > delay {
				delay = writeDelay
			}
			if held {
				<-healed
				continue
			}
			if wait := time.Until(c.at.Add(delay)); wait > 0 {
				// In steps, so that a fault lifted meanwhile frees it.
				time.Sleep(min(wait, 20*time.Millisecond))
				continue
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

// SetWriteDelay delays every write that the proxy's writeMatch picks out
// (newEtcdProxy) by d on its way to etcd, and with it what follows on its
// connection (order is kept): a write kube-apiserver has admitted commits d
// late. Heal ends it.
func (p *faultProxy) SetWriteDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.writeDelay = d
}

// DelayedWrites is the number of writes delayed so far.
func (p *faultProxy) DelayedWrites() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counter.delayedWrites
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
	p.delay, p.downDelay, p.writeDelay, p.holdUp, p.holdDn = 0, 0, 0, false, false
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
	dial := func(addr string) net.Conn {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		return conn
	}
	p, err := newFaultProxy(echo.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := dial(p.Addr())
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
	marked, plain := dial(mp.Addr()), dial(mp.Addr())
	defer marked.Close()
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

	// A write delay: on the connection that carried the resource's key, the
	// bytes carrying its value (even split across reads) wait; reads there,
	// and the value on another connection, do not.
	ep, err := newEtcdProxy(echo.Addr().String(), nil, writeMatch{key: []byte("/registry/w/"), value: []byte(`"kind":"W"`)})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	resource, other := dial(ep.Addr()), dial(ep.Addr())
	defer resource.Close()
	defer other.Close()
	c = resource
	if _, err := roundTrip("watch /registry/w/", time.Second); err != nil {
		t.Fatal(err)
	}
	ep.SetWriteDelay(300 * time.Millisecond)
	if d, err := roundTrip("range /registry/w/ns/a", time.Second); err != nil || d > 200*time.Millisecond {
		t.Fatalf("a read under a write delay: %v, %v", d, err)
	}
	if d, err := roundTrip(`txn /registry/w/ns/a {"kind":"W"}`, 2*time.Second); err != nil || d < 300*time.Millisecond || d > 550*time.Millisecond {
		t.Fatalf("a write under a 300ms write delay: %v, %v", d, err)
	}
	if d, err := roundTrip(`txn /registry/w/ns/b {"ki`, time.Second); err != nil || d > 200*time.Millisecond {
		t.Fatalf("the first half of a write: %v, %v", d, err)
	}
	if d, err := roundTrip(`nd":"W"}`, 2*time.Second); err != nil || d < 300*time.Millisecond {
		t.Fatalf("the second half of a write, which completes its value: %v, %v", d, err)
	}
	c = other
	if d, err := roundTrip(`txn /registry/crds/w {"kind":"W"}`, time.Second); err != nil || d > 200*time.Millisecond {
		t.Fatalf("the value on another resource's connection: %v, %v", d, err)
	}
	if n := ep.DelayedWrites(); n != 2 {
		t.Errorf("%d writes delayed, want 2", n)
	}
	// Lifting the delay frees a write already waiting.
	c = resource
	ep.SetWriteDelay(time.Hour)
	go func() {
		time.Sleep(200 * time.Millisecond)
		ep.SetWriteDelay(0)
	}()
	if d, err := roundTrip(`txn /registry/w/ns/c {"kind":"W"}`, 2*time.Second); err != nil || d > 500*time.Millisecond {
		t.Fatalf("a held write after the delay was lifted: %v, %v", d, err)
	}
}
