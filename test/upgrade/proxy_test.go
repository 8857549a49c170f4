package upgrade

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// webhookService stands for the operator's webhook Service: it listens where
// the API server calls the webhooks (envtest's address and certificate) and
// spreads the calls over the ready replicas, one request at a time, round
// robin, as kube-proxy spreads connections over a Service's endpoints (here
// per request, so that every replica judges a share even over the API
// server's kept-alive connections). It counts what each replica served.
type webhookService struct {
	srv *http.Server

	mu       sync.Mutex
	replicas []*replica
	next     int
}

type replica struct {
	name  string
	proxy *httputil.ReverseProxy
	// served counts the requests per webhook path.
	served map[string]int
	// inflight counts the calls under way.
	inflight sync.WaitGroup
}

// startWebhookService serves on addr with the certificate in certDir
// (tls.crt, tls.key); the replicas are called over TLS verified with caPEM.
func startWebhookService(addr, certDir string, caPEM []byte) (*webhookService, error) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key"))
	if err != nil {
		return nil, fmt.Errorf("loading the webhook certificate: %w", err)
	}
	ln, err := tls.Listen("tcp", addr, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, fmt.Errorf("listening on the webhook address %s: %w", addr, err)
	}
	s := &webhookService{}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// ServeHTTP hands the call to the next replica; with none ready the call
// fails, as a Service without endpoints does (the webhooks fail closed).
func (s *webhookService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if len(s.replicas) == 0 {
		s.mu.Unlock()
		http.Error(w, "no webhook replica is ready", http.StatusServiceUnavailable)
		return
	}
	rep := s.replicas[s.next%len(s.replicas)]
	s.next++
	rep.served[r.URL.Path]++
	rep.inflight.Add(1)
	s.mu.Unlock()
	defer rep.inflight.Done()
	rep.proxy.ServeHTTP(w, r)
}

// add makes the replica serving on port (with the same certificate) ready.
func (s *webhookService) add(name string, port int, caPEM []byte) error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return errors.New("the webhook CA is not PEM")
	}
	target := &url.URL{Scheme: "https", Host: net.JoinHostPort("127.0.0.1", fmt.Sprint(port))}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ErrorLog = log.New(os.Stderr, "webhook service, replica "+name+": ", log.LstdFlags|log.Lmicroseconds)
	rp.Transport = &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     30 * time.Second,
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replicas = append(s.replicas, &replica{name: name, proxy: rp, served: map[string]int{}})
	return nil
}

// remove takes the replica out of the Service (its endpoint is gone) and
// waits for the calls it has under way.
func (s *webhookService) remove(name string) {
	s.mu.Lock()
	var gone *replica
	for i, r := range s.replicas {
		if r.name == name {
			gone = r
			s.replicas = append(s.replicas[:i], s.replicas[i+1:]...)
			break
		}
	}
	s.mu.Unlock()
	if gone != nil {
		gone.inflight.Wait()
	}
}

// takeCounts returns, per replica, the fencing and FencedLease calls served
// since the last call, and resets them.
func (s *webhookService) takeCounts() map[string]served {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]served{}
	for _, r := range s.replicas {
		var c served
		for path, n := range r.served {
			if strings.HasPrefix(path, "/fence") {
				c.fencing += n
			} else {
				c.leases += n
			}
		}
		out[r.name] = c
		r.served = map[string]int{}
	}
	return out
}

type served struct{ fencing, leases int }

func (s *webhookService) close() { _ = s.srv.Close() }
