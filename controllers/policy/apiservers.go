package policy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// APIServer is one kube-apiserver of the cluster, addressed directly.
type APIServer struct {
	// Host is its address, IP:port, as the kubernetes Service's endpoints
	// list it.
	Host string
	// Config reaches this server and no other: base's credentials, Host as
	// its host, TLS verified under base's server name, and a per-request
	// timeout (RequestTimeout unless base has one).
	Config *rest.Config
}

// RequestTimeout is the timeout (rest.Config.Timeout: connection, TLS
// handshake, request and response together) of each request through an
// APIServer's Config when the base configuration sets none. A paused or
// unreachable server then fails a request after this long instead of hanging
// the caller; a live one answers a dry-run write in milliseconds.
const RequestTimeout = 2 * time.Second

// IdentityLeaseFreshness is how recently a kube-apiserver identity lease
// must have been renewed to count as a live server's in APIServers'
// cross-check: three of kube-apiserver's renewal periods (10 s, not a flag).
const IdentityLeaseFreshness = 30 * time.Second

// The labels APIServers selects by.
const (
	kubernetesService = "kubernetes"
	// identityLabel marks kube-apiserver identity leases in kube-system.
	identityLabel = "apiserver.kubernetes.io/identity"
	identityValue = "kube-apiserver"
)

// ErrNotAddressable is wrapped by APIServers' error when the kube-apiservers
// cannot be addressed one by one: the kubernetes Service has no endpoints
// (--endpoint-reconciler-type=none, as some managed control planes run), or
// more servers renew identity leases than the endpoints list (servers
// advertising a shared load-balancer address, say). A caller that must reach
// every server cannot on such a cluster; see docs/design.md, "Policy mode:
// addressing every API server", for what to do instead.
var ErrNotAddressable = errors.New("the kube-apiservers cannot be addressed one by one")

// APIServers returns one configuration per kube-apiserver of the cluster, from
// the endpoints of the default/kubernetes Service (its EndpointSlices,
// which every kube-apiserver keeps listing itself in), read through c. Use an
// uncached reader (the manager's APIReader): each call then sees the
// servers of that moment, and the operator holds no cluster-wide informer on
// EndpointSlices. It needs get and list on EndpointSlices in the default
// namespace, and list on Leases in kube-system.
//
// Each configuration is a copy of base addressing its server's IP:port, with
// TLS verified as for base: under base's TLSClientConfig.ServerName, or else
// the host name of base.Host (a load balancer's name or the Service's
// cluster IP, which every server's certificate must hold for base to work
// at all). Every endpoint listed is returned, ready or not: leaving out a
// server that still serves is the unsafe mistake for a caller that must
// reach them all.
//
// As a cross-check, the kube-apiserver identity leases in kube-system renewed
// within IdentityLeaseFreshness must be no more than the servers listed: an
// identity lease is named after its server's host name, so servers sharing a
// host share one, and fewer leases than endpoints is normal; more means live
// servers the endpoints do not list, and APIServers returns an error wrapping
// ErrNotAddressable. So does a Service without endpoints.
//
// A server killed without shutting down stays listed until its master lease
// expires (15 s after its last renewal) and a surviving server reconciles the
// endpoints (every 10 s): 5-25 s after its death. One that shuts down
// gracefully removes itself at once. One paused for longer than its lease
// leaves the list too, and returns when it resumes: absent is not dead (see
// docs/design.md), so a barrier uses Tracker, not APIServers alone.
func APIServers(ctx context.Context, c client.Reader, base *rest.Config) ([]APIServer, error) {
	return apiServers(ctx, c, base, time.Now())
}

// apiServers is APIServers with the time the identity leases' freshness is
// judged at.
func apiServers(ctx context.Context, c client.Reader, base *rest.Config, now time.Time) ([]APIServer, error) {
	serverName, err := tlsServerName(base)
	if err != nil {
		return nil, err
	}
	hosts, err := listedHosts(ctx, c)
	if err != nil {
		return nil, err
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("%w: the default/%s Service has no endpoints (is kube-apiserver's --endpoint-reconciler-type none?)",
			ErrNotAddressable, kubernetesService)
	}
	live, err := liveIdentities(ctx, c, now)
	if err != nil {
		return nil, err
	}
	if live > len(hosts) {
		return nil, fmt.Errorf("%w: %d kube-apiserver identity leases were renewed in the last %v, but the default/%s Service lists %d endpoints (%s)",
			ErrNotAddressable, live, IdentityLeaseFreshness, kubernetesService, len(hosts), strings.Join(hosts, ", "))
	}
	servers := make([]APIServer, 0, len(hosts))
	for _, h := range hosts {
		cfg := rest.CopyConfig(base)
		cfg.Host = "https://" + h
		cfg.TLSClientConfig.ServerName = serverName
		if cfg.Timeout == 0 {
			cfg.Timeout = RequestTimeout
		}
		servers = append(servers, APIServer{Host: h, Config: cfg})
	}
	return servers, nil
}

// tlsServerName is the name a direct connection to any server verifies the
// serving certificate under: base's own.
func tlsServerName(base *rest.Config) (string, error) {
	if base.TLSClientConfig.ServerName != "" {
		return base.TLSClientConfig.ServerName, nil
	}
	h := base.Host
	if !strings.Contains(h, "://") {
		h = "https://" + h // a host without a scheme, as rest.Config allows
	}
	u, err := url.Parse(h)
	if err != nil || u.Hostname() == "" {
		return "", fmt.Errorf("the API server configuration's host %q has no host name to verify the API servers' certificates under", base.Host)
	}
	if u.Scheme != "https" {
		return "", fmt.Errorf("the API server configuration's host %q is not https: the API servers cannot be verified", base.Host)
	}
	return u.Hostname(), nil
}

// listedHosts are the addresses, IP:port, of the default/kubernetes
// Service's endpoints, sorted and without repeats.
func listedHosts(ctx context.Context, c client.Reader) ([]string, error) {
	var list discoveryv1.EndpointSliceList
	if err := c.List(ctx, &list, client.InNamespace(metav1.NamespaceDefault),
		client.MatchingLabels{discoveryv1.LabelServiceName: kubernetesService}); err != nil {
		return nil, fmt.Errorf("listing the endpoints of the default/%s Service: %w", kubernetesService, err)
	}
	var hosts []string
	for _, s := range list.Items {
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			return nil, fmt.Errorf("the endpoints of the default/%s Service (EndpointSlice %s) have address type %s, not an IP",
				kubernetesService, s.Name, s.AddressType)
		}
		port, err := httpsPort(s)
		if err != nil {
			return nil, err
		}
		for _, e := range s.Endpoints {
			for _, a := range e.Addresses {
				if net.ParseIP(a) == nil {
					return nil, fmt.Errorf("the endpoints of the default/%s Service (EndpointSlice %s) list %q, not an IP",
						kubernetesService, s.Name, a)
				}
				hosts = append(hosts, net.JoinHostPort(a, strconv.Itoa(int(port))))
			}
		}
	}
	slices.Sort(hosts)
	return slices.Compact(hosts), nil
}

// httpsPort is the port of s that kube-apiserver serves on: the one named
// https (as kube-apiserver names it), or the only one.
func httpsPort(s discoveryv1.EndpointSlice) (int32, error) {
	for _, p := range s.Ports {
		if p.Port != nil && (len(s.Ports) == 1 || p.Name != nil && *p.Name == "https") {
			return *p.Port, nil
		}
	}
	return 0, fmt.Errorf("the endpoints of the default/%s Service (EndpointSlice %s) have no port named https", kubernetesService, s.Name)
}

// liveIdentities counts the kube-apiserver identity leases renewed within
// IdentityLeaseFreshness before now.
func liveIdentities(ctx context.Context, c client.Reader, now time.Time) (int, error) {
	var leases coordinationv1.LeaseList
	if err := c.List(ctx, &leases, client.InNamespace(metav1.NamespaceSystem),
		client.MatchingLabels{identityLabel: identityValue}); err != nil {
		return 0, fmt.Errorf("listing the kube-apiserver identity leases: %w", err)
	}
	n := 0
	for _, l := range leases.Items {
		if r := l.Spec.RenewTime; r != nil && now.Sub(r.Time) < IdentityLeaseFreshness {
			n++
		}
	}
	return n, nil
}

// DefaultGrace is Tracker's Grace when it is zero.
const DefaultGrace = time.Minute

// departureDialTimeout bounds Tracker's check that a departed server's
// address refuses connections.
const departureDialTimeout = time.Second

// Tracker is APIServers for a barrier that must not stop waiting for a server
// merely because it left the kubernetes Service's endpoints: a kube-apiserver
// paused for longer than its master lease (15 s) leaves them and, once it
// resumes, admits writes with its old parameters for a few milliseconds (see
// docs/design.md, "Absent is not dead"). Tracker returns the servers listed
// now and, besides, each server it saw listed before that has left, until
// that server is proven gone: its address refuses TCP connections (a dead
// process on a live host), or Grace has passed since Tracker first saw it
// absent (a lost machine, or a pause longer than Grace). A paused server
// accepts connections (the kernel completes the handshake) and so stays, and
// a barrier's probes to it time out until it resumes and catches up.
//
// A Tracker knows only what it has seen. Started as a manager runnable
// (Start, on every replica), it looks at the list every RefreshInterval, so
// a replica that becomes leader already knows every server listed since it
// started, not only those listed at its first grant. Calls are serialised.
type Tracker struct {
	// Reader and Base are APIServers' arguments.
	Reader client.Reader
	Base   *rest.Config
	// Grace bounds how long a server that left the list is still returned
	// while its address does not refuse connections; zero means DefaultGrace.
	Grace time.Duration
	// RefreshInterval is how often Start looks at the list; zero means
	// DefaultRefreshInterval.
	RefreshInterval time.Duration
	// Clock, if set, replaces the real clock.
	Clock clock.PassiveClock

	mu    sync.Mutex
	known map[string]*trackedServer // by Host: every server seen listed and not yet proven gone
}

// DefaultRefreshInterval is Tracker's RefreshInterval when it is zero: well
// under a kube-apiserver's master lease (15 s), so that a server listed for
// one lease period is seen.
const DefaultRefreshInterval = 5 * time.Second

// Start looks at the servers every RefreshInterval until ctx ends (a
// manager runnable). An error is logged when it first occurs and when it
// changes; the barrier's own calls report it with the grant they fail.
func (t *Tracker) Start(ctx context.Context) error {
	interval := t.RefreshInterval
	if interval <= 0 {
		interval = DefaultRefreshInterval
	}
	log := logf.FromContext(ctx).WithName("apiservers")
	last := ""
	for {
		_, err := t.APIServers(ctx)
		if msg := fmt.Sprint(err); err != nil && msg != last {
			log.Error(err, "Listing the API servers for the propagation barrier failed; retrying", "every", interval)
			last = msg
		} else if err == nil {
			last = ""
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

// NeedLeaderElection is false: a replica learns the servers before it leads.
func (t *Tracker) NeedLeaderElection() bool { return false }

type trackedServer struct {
	server APIServer
	left   time.Time // when first seen absent from the list; zero while listed
}

// APIServers returns the servers listed now and those that left the list but
// are not proven gone (see Tracker), sorted by Host; its errors are
// APIServers'.
func (t *Tracker) APIServers(ctx context.Context) ([]APIServer, error) {
	clk := t.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	grace := t.Grace
	if grace == 0 {
		grace = DefaultGrace
	}
	listed, err := apiServers(ctx, t.Reader, t.Base, clk.Now())
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.known == nil {
		t.known = map[string]*trackedServer{}
	}
	servers := slices.Clone(listed)
	for _, s := range listed {
		t.known[s.Host] = &trackedServer{server: s}
	}
	for host, k := range t.known {
		if slices.ContainsFunc(listed, func(s APIServer) bool { return s.Host == host }) {
			continue
		}
		if k.left.IsZero() {
			k.left = clk.Now()
		}
		if clk.Since(k.left) >= grace || refusesConnections(ctx, t.Base, host) {
			delete(t.known, host)
			continue
		}
		servers = append(servers, k.server)
	}
	slices.SortFunc(servers, func(a, b APIServer) int { return strings.Compare(a.Host, b.Host) })
	return servers, nil
}

// refusesConnections tells whether a TCP connection to host (IP:port),
// dialed as base dials, is refused.
func refusesConnections(ctx context.Context, base *rest.Config, host string) bool {
	ctx, cancel := context.WithTimeout(ctx, departureDialTimeout)
	defer cancel()
	dial := base.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	conn, err := dial(ctx, "tcp", host)
	if err == nil {
		_ = conn.Close()
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}
