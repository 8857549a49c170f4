package history

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// configMapsKey is the etcd key prefix of ConfigMaps (kube-apiserver's
// default --etcd-prefix): the connection of the second kube-apiserver's
// ConfigMap storage carries it, in its watch and its reads. The tenure tables
// are ConfigMaps, and the fencing policy's parameters come from the
// ConfigMap watch cache.
const configMapsKey = "/registry/configmaps/"

// widgetWrites picks out the Widget writes among what a kube-apiserver sends
// etcd: on the Widget storage's connection (it carries their key prefix,
// "/registry/<group>/<resource>/"), the Txns that carry a Widget's stored
// JSON. The CustomResourceDefinition storage's writes of the Widget CRD carry
// the kind too, but not on that connection.
var widgetWrites = writeMatch{key: []byte("/registry/example.kubefence.io/widgets/"), value: []byte(`"kind":"Widget"`)}

// connectProxy is an HTTP CONNECT proxy (the operator's HTTPS_PROXY) that
// reaches the addresses the kube-apiservers advertise, and only those,
// through dial (testenv.Cluster.Config's with two servers: each advertised address at
// its server's bound one, as a network address translation would). The
// operator addresses its configured server on a loopback address, which Go
// never proxies; its barrier addresses every server at the address the
// kubernetes Service lists, through this proxy.
type connectProxy struct {
	srv   *http.Server
	ln    net.Listener
	dial  func(ctx context.Context, network, address string) (net.Conn, error)
	hosts map[string]bool

	mu    sync.Mutex
	conns map[net.Conn]struct{} // both ends of every tunnel
}

func newConnectProxy(dial func(ctx context.Context, network, address string) (net.Conn, error), hosts ...string) (*connectProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &connectProxy{ln: ln, dial: dial, hosts: map[string]bool{}, conns: map[net.Conn]struct{}{}}
	for _, h := range hosts {
		p.hosts[h] = true
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// URL is the proxy's address for HTTPS_PROXY.
func (p *connectProxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *connectProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect {
		http.Error(w, "only CONNECT", http.StatusMethodNotAllowed)
		return
	}
	if !p.hosts[r.Host] {
		http.Error(w, "not an API server's advertised address: "+r.Host, http.StatusForbidden)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	up, err := p.dial(ctx, "tcp", r.Host)
	cancel()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		_ = up.Close()
		http.Error(w, "cannot hijack", http.StatusInternalServerError)
		return
	}
	down, rw, err := hj.Hijack()
	if err != nil {
		_ = up.Close()
		return
	}
	if _, err := down.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		_ = up.Close()
		_ = down.Close()
		return
	}
	p.mu.Lock()
	p.conns[up], p.conns[down] = struct{}{}, struct{}{}
	p.mu.Unlock()
	end := func() {
		_ = up.Close()
		_ = down.Close()
		p.mu.Lock()
		delete(p.conns, up)
		delete(p.conns, down)
		p.mu.Unlock()
	}
	go func() {
		defer end()
		_, _ = io.Copy(up, rw) // what the client sent after the CONNECT, then the rest
	}()
	go func() {
		defer end()
		_, _ = io.Copy(down, up)
	}()
}

// Close stops the proxy and closes its tunnels.
func (p *connectProxy) Close() {
	_ = p.srv.Close() // the listener; hijacked connections are not the server's
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}
