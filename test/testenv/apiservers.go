package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// The addresses of the two kube-apiservers of Input.TwoAPIServers. Each
// binds a loopback address, the same port on both (--bind-address), and
// advertises a documentation address (TEST-NET-3, routed nowhere;
// --advertise-address): kube-apiserver refuses a loopback advertise address
// with its endpoint reconciler ("may not be in the loopback range"), so the
// endpoints of the default/kubernetes Service list the advertised addresses,
// and Cluster.Config dials each advertised address at its server's bound one,
// as a network address translation would.
//
// The second server has the first's flags, certificates, service-account keys
// and client CA. Both use the lease endpoint reconciler (kube-apiserver's
// default), so each lists itself in the endpoints of default/kubernetes and a
// killed one leaves them when its master lease expires. The serving
// certificate is envtest's, shared: valid for localhost and firstIP, not for
// secondIP. A client that addresses the second server directly verifies it
// under a name the certificate holds (tls ServerName firstIP), as a client of
// a real control plane verifies every member under the load balancer's name.
// It works on Linux only (it reads the first server's command line from
// /proc).
const (
	firstIP  = "127.0.0.1"
	secondIP = "127.0.0.2"

	firstAdvertisedIP  = "203.0.113.1"
	secondAdvertisedIP = "203.0.113.2"
)

// twoStartTimeout bounds the start of the second kube-apiserver and the wait
// for both to be listed in the kubernetes Service's endpoints.
const twoStartTimeout = 60 * time.Second

// APIServerProcess is one kube-apiserver process of Input.TwoAPIServers.
type APIServerProcess struct {
	// Host is the address it advertises, IP:port, as the endpoints of the
	// kubernetes Service list it (reachable with Cluster.Config's Dial).
	Host string
	// Bind is the address it listens on, IP:port.
	Bind string
	// owned tells whether this package started it (and may kill and restart it).
	owned bool
	path  string
	args  []string

	mu   sync.Mutex
	pid  int
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited; nil while not running
	out  *tail         // the end of the process's output, for errors
}

// tail keeps the last 8 KiB written to it.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - 8<<10; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(b), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// bindFirst binds env's kube-apiserver to firstIP, on a port free on
// secondIP too, advertising firstAdvertisedIP; it returns the port.
func bindFirst(env *envtest.Environment) (string, error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	api := env.ControlPlane.GetAPIServer()
	api.SecureServing.Address = firstIP
	api.SecureServing.Port = port
	// Without it kube-apiserver advertises the host's default interface
	// (a loopback bind address does not count), the same for both.
	api.Configure().Set("advertise-address", firstAdvertisedIP)
	return port, nil
}

// freePort is a port free on both firstIP and secondIP.
func freePort() (string, error) {
	for range 10 {
		l1, err := net.Listen("tcp", net.JoinHostPort(firstIP, "0"))
		if err != nil {
			return "", err
		}
		_, port, _ := net.SplitHostPort(l1.Addr().String())
		l2, err := net.Listen("tcp", net.JoinHostPort(secondIP, port))
		_ = l1.Close()
		if err == nil {
			_ = l2.Close()
			return port, nil
		}
	}
	return "", fmt.Errorf("no port free on both %s and %s after 10 tries", firstIP, secondIP)
}

// startSecond starts the second kube-apiserver: the first's flags, but bound
// to and advertising the second address, reaching etcd through etcdVia if
// not nil.
func (c *Cluster) startSecond(port string, etcdVia func(etcd string) (string, error)) error {
	api := c.Env.ControlPlane.APIServer
	if api.SecureServing.Address != firstIP {
		return fmt.Errorf("envtest's kube-apiserver listens on %s, not on %s", api.SecureServing.Address, firstIP)
	}
	pid, args, err := findProcess(api.Path, "--cert-dir="+api.CertDir)
	if err != nil {
		return fmt.Errorf("finding envtest's kube-apiserver: %w", err)
	}
	c.First = &APIServerProcess{
		Host: net.JoinHostPort(firstAdvertisedIP, port), Bind: net.JoinHostPort(firstIP, port),
		path: api.Path, args: args, pid: pid,
	}
	// The same flags, but bound to and advertising the second address; the
	// service-account issuer (derived from the first's address) stays the
	// first's, so that both accept the same tokens.
	second := slices.DeleteFunc(slices.Clone(args), func(a string) bool {
		return strings.HasPrefix(a, "--bind-address=") || strings.HasPrefix(a, "--advertise-address=")
	})
	second = append(second, "--bind-address="+secondIP, "--advertise-address="+secondAdvertisedIP)
	if etcdVia != nil {
		if second, err = viaEtcd(second, etcdVia); err != nil {
			return err
		}
	}
	c.Second = &APIServerProcess{
		Host: net.JoinHostPort(secondAdvertisedIP, port), Bind: net.JoinHostPort(secondIP, port),
		owned: true, path: api.Path, args: second,
	}
	c.Config.Dial = c.dial
	ctx, cancel := context.WithTimeout(context.Background(), twoStartTimeout)
	defer cancel()
	if err := c.Second.Start(ctx, c.Config); err != nil {
		return err
	}
	return c.WaitListed(ctx, c.First.Host, c.Second.Host)
}

// viaEtcd replaces the etcd address of --etcd-servers=http://<host:port> in
// args with the one via returns for it.
func viaEtcd(args []string, via func(etcd string) (string, error)) ([]string, error) {
	const flag = "--etcd-servers="
	i := slices.IndexFunc(args, func(a string) bool { return strings.HasPrefix(a, flag) })
	if i < 0 {
		return nil, fmt.Errorf("envtest's kube-apiserver has no %s flag", strings.TrimSuffix(flag, "="))
	}
	u, err := url.Parse(strings.TrimPrefix(args[i], flag))
	if err != nil || u.Host == "" || strings.Contains(args[i], ",") {
		return nil, fmt.Errorf("envtest's kube-apiserver has %s: expected one etcd URL", args[i])
	}
	host, err := via(u.Host)
	if err != nil {
		return nil, fmt.Errorf("the second kube-apiserver's way to etcd: %w", err)
	}
	u.Host = host
	args = slices.Clone(args)
	args[i] = flag + u.String()
	return args, nil
}

// dial dials the advertised address of either server at its bound address,
// and any other address as it is.
func (c *Cluster) dial(ctx context.Context, network, address string) (net.Conn, error) {
	for _, p := range []*APIServerProcess{c.First, c.Second} {
		if address == p.Host {
			address = p.Bind
		}
	}
	var d net.Dialer
	return d.DialContext(ctx, network, address)
}

// stopSecond resumes a paused server and stops the second kube-apiserver.
func (c *Cluster) stopSecond() error {
	var errs []error
	for _, p := range []*APIServerProcess{c.First, c.Second} {
		if p != nil {
			errs = append(errs, p.Resume())
		}
	}
	if c.Second != nil {
		errs = append(errs, c.Second.Stop())
	}
	return errors.Join(errs...)
}

// Listed are the addresses (IP:port) the endpoints of the kubernetes Service
// list, sorted, read through the first server.
func (c *Cluster) Listed(ctx context.Context) ([]string, error) {
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return nil, err
	}
	list, err := cs.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=kubernetes",
	})
	if err != nil {
		return nil, fmt.Errorf("listing the endpoints of the kubernetes Service: %w", err)
	}
	var hosts []string
	for _, s := range list.Items {
		for _, p := range s.Ports {
			for _, e := range s.Endpoints {
				for _, a := range e.Addresses {
					if p.Port != nil {
						hosts = append(hosts, net.JoinHostPort(a, strconv.Itoa(int(*p.Port))))
					}
				}
			}
		}
	}
	sortUnique(&hosts)
	return hosts, nil
}

// WaitListed waits until the endpoints of the kubernetes Service list exactly
// hosts.
func (c *Cluster) WaitListed(ctx context.Context, hosts ...string) error {
	want := slices.Clone(hosts)
	sortUnique(&want)
	var got []string
	var err error
	for {
		if got, err = c.Listed(ctx); err == nil && slices.Equal(got, want) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the kubernetes Service's endpoints list %v, not %v (last error: %v): %w", got, want, err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func sortUnique(s *[]string) {
	slices.Sort(*s)
	*s = slices.Compact(*s)
}

// Start starts an owned kube-apiserver that is not running and waits until it
// is ready (its /readyz, asked with admin, the admin's configuration, answers
// ok).
func (p *APIServerProcess) Start(ctx context.Context, admin *rest.Config) error {
	if !p.owned {
		return fmt.Errorf("the kube-apiserver at %s is envtest's: it cannot be started here", p.Host)
	}
	p.mu.Lock()
	if p.done != nil {
		p.mu.Unlock()
		return fmt.Errorf("the kube-apiserver at %s is already running", p.Host)
	}
	cmd := exec.Command(p.path, p.args...)
	out := &tail{}
	cmd.Stdout, cmd.Stderr = out, out
	// If the test binary dies, the kernel kills the server too. Pdeathsig
	// fires when the *thread* that forked the server exits, and the Go runtime
	// ends a thread when a goroutine locked to it returns (as the history
	// test's process waiters do): so the server is forked on a thread locked
	// to the goroutine that waits for it, which lives exactly as long as the
	// server. Forked from any thread, it was killed when a locked goroutine
	// that later ran on that thread returned.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	done := make(chan struct{})
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		close(done)
	}()
	if err := <-started; err != nil {
		p.mu.Unlock()
		return fmt.Errorf("starting the kube-apiserver at %s: %w", p.Host, err)
	}
	p.pid, p.cmd, p.done, p.out = cmd.Process.Pid, cmd, done, out
	p.mu.Unlock()
	if err := p.waitReady(ctx, admin, done); err != nil {
		_ = p.Kill()
		return err
	}
	return nil
}

// waitReady polls the server's /readyz directly (with the TLS server name of
// admin's host) until it answers 200.
func (p *APIServerProcess) waitReady(ctx context.Context, admin *rest.Config, done <-chan struct{}) error {
	cfg := rest.CopyConfig(admin)
	cfg.TLSClientConfig.ServerName = hostname(admin.Host)
	cfg.Host = "https://" + p.Bind
	cfg.Timeout = 2 * time.Second
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	defer hc.CloseIdleConnections()
	var last string
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+"/readyz", nil)
		if err != nil {
			return err
		}
		if resp, err := hc.Do(req); err != nil {
			last = err.Error()
		} else {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		}
		select {
		case <-done:
			return fmt.Errorf("the kube-apiserver at %s exited while starting: %s", p.Host, p.output())
		case <-ctx.Done():
			return fmt.Errorf("the kube-apiserver at %s is not ready (last answer: %s): %w", p.Host, last, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// output is the end of the process's output.
func (p *APIServerProcess) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.out == nil {
		return ""
	}
	return p.out.String()
}

func hostname(host string) string {
	h := strings.TrimPrefix(strings.TrimPrefix(host, "https://"), "http://")
	if hn, _, err := net.SplitHostPort(h); err == nil {
		return hn
	}
	return h
}

// Pause stops the process (SIGSTOP) and waits until all its threads have
// stopped: it keeps its connections and its port but answers nothing, renews
// nothing and sees no watch event until Resume; its caches fall behind.
func (p *APIServerProcess) Pause() error {
	if err := p.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	p.mu.Lock()
	pid := p.pid
	p.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for !stopped(pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("the kube-apiserver at %s did not stop within 5 s of SIGSTOP", p.Host)
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// stopped tells whether every thread of process pid is stopped (state T in
// /proc/pid/task/*/stat), or the process is gone.
func stopped(pid int) bool {
	stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(stats) == 0 {
		return true
	}
	for _, f := range stats {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue // the thread is gone
		}
		// pid (comm) state ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(raw, ')')
		if i < 0 || i+2 >= len(raw) || raw[i+2] != 'T' {
			return false
		}
	}
	return true
}

// Resume continues a paused process (SIGCONT). Resuming one that runs does
// nothing.
func (p *APIServerProcess) Resume() error { return p.signal(syscall.SIGCONT) }

func (p *APIServerProcess) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pid == 0 || (p.owned && p.done == nil) {
		return nil // not running
	}
	if err := syscall.Kill(p.pid, sig); err != nil {
		return fmt.Errorf("sending %v to the kube-apiserver at %s: %w", sig, p.Host, err)
	}
	return nil
}

// Kill kills an owned kube-apiserver (SIGKILL) and waits for it to exit: it
// removes nothing on its way out, so it stays in the kubernetes Service's
// endpoints until its master lease expires.
func (p *APIServerProcess) Kill() error { return p.end(syscall.SIGKILL) }

// Stop stops an owned kube-apiserver gracefully (SIGTERM) and waits for it to
// exit: it removes itself from the kubernetes Service's endpoints on the way.
func (p *APIServerProcess) Stop() error { return p.end(syscall.SIGTERM) }

func (p *APIServerProcess) end(sig syscall.Signal) error {
	if !p.owned {
		return fmt.Errorf("the kube-apiserver at %s is envtest's: stop the environment instead", p.Host)
	}
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if done == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a paused process cannot act on SIGTERM
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("sending %v to the kube-apiserver at %s: %w", sig, p.Host, err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
	p.mu.Lock()
	p.pid, p.cmd, p.done = 0, nil, nil
	p.mu.Unlock()
	return nil
}

// findProcess finds the process whose executable is path and whose arguments
// include arg, and returns its pid and arguments (without argv[0]).
func findProcess(path, arg string) (int, []string, error) {
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return 0, nil, err
	}
	for _, d := range dirs {
		raw, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || len(raw) == 0 {
			continue // gone, or a kernel thread
		}
		argv := strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
		if argv[0] != path || !slices.Contains(argv[1:], arg) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			return 0, nil, err
		}
		return pid, argv[1:], nil
	}
	return 0, nil, fmt.Errorf("no process runs %s with %s", path, arg)
}
