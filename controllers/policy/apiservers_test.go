package policy_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/kubefence/kubefence/controllers/policy"
	"github.com/kubefence/kubefence/test/testenv"
)

// TestAPIServers runs APIServers against a control plane of two
// kube-apiservers on one etcd (testenv.Input.TwoAPIServers).
func TestAPIServers(t *testing.T) {
	testenv.SkipIfShort(t)
	two, c := startTwo(t)
	ctx := t.Context()
	first, second := two.First.Host, two.Second.Host

	servers, err := policy.APIServers(ctx, c, two.Config)
	if err != nil {
		t.Fatal(err)
	}
	if got := hosts(servers); !equal(got, first, second) {
		t.Fatalf("APIServers lists %v, want %s and %s", got, first, second)
	}

	t.Run("each configuration reaches its own server, and a paused one times out", func(t *testing.T) {
		for i, paused := range []*testenv.APIServerProcess{two.First, two.Second} {
			other := servers[1-i]
			if err := paused.Pause(); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			err := version(servers[i].Config)
			took := time.Since(start)
			if err := paused.Resume(); err != nil {
				t.Fatal(err)
			}
			if err == nil {
				t.Fatalf("a request to %s answered while that server was paused", servers[i].Host)
			}
			if !strings.Contains(err.Error(), servers[i].Host) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("the error of a request to the paused %s names neither it nor the timeout: %v", servers[i].Host, err)
			}
			if took < policy.RequestTimeout || took > policy.RequestTimeout+time.Second {
				t.Errorf("a request to the paused %s failed after %v, want the request timeout %v", servers[i].Host, took, policy.RequestTimeout)
			}
			// The other server answered while this one was paused, and the
			// paused one still accepted TCP connections (the kernel answers).
			if err := paused.Pause(); err != nil {
				t.Fatal(err)
			}
			err = version(other.Config)
			conn, derr := net.DialTimeout("tcp", paused.Bind, time.Second)
			if rerr := paused.Resume(); rerr != nil {
				t.Fatal(rerr)
			}
			if err != nil {
				t.Errorf("a request to %s failed while only %s was paused: %v", other.Host, servers[i].Host, err)
			}
			if derr != nil {
				t.Errorf("the paused %s refused a TCP connection: %v", servers[i].Host, derr)
			} else {
				_ = conn.Close()
			}
		}
	})

	t.Run("TLS is verified under the base configuration's name", func(t *testing.T) {
		// The second server's certificate (envtest's, shared) does not hold
		// its IP: without the server name, verification fails.
		cfg := rest.CopyConfig(servers[1].Config)
		cfg.TLSClientConfig.ServerName = ""
		err := version(cfg)
		if err == nil || !strings.Contains(err.Error(), "x509") {
			t.Fatalf("a request to %s verified under its IP, want a certificate error: %v", servers[1].Host, err)
		}
		if err := version(servers[1].Config); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("more live identity leases than endpoints is an error", func(t *testing.T) {
		// Both servers run on one host, so they renew one identity lease.
		var leases coordinationv1.LeaseList
		if err := c.List(ctx, &leases, client.InNamespace(metav1.NamespaceSystem),
			client.MatchingLabels{"apiserver.kubernetes.io/identity": "kube-apiserver"}); err != nil {
			t.Fatal(err)
		}
		if len(leases.Items) != 1 {
			t.Fatalf("two kube-apiservers on one host hold %d identity leases, want 1", len(leases.Items))
		}
		// Two more hosts' servers that the endpoints do not list.
		for _, name := range []string{"apiserver-other-host-a", "apiserver-other-host-b"} {
			if err := c.Create(ctx, identityLease(name, time.Now())); err != nil {
				t.Fatal(err)
			}
		}
		_, err := policy.APIServers(ctx, c, two.Config)
		if !errors.Is(err, policy.ErrNotAddressable) || !strings.Contains(err.Error(), "3 kube-apiserver identity leases") {
			t.Errorf("APIServers with 3 live identity leases and 2 endpoints: %v, want ErrNotAddressable", err)
		}
		// Leases last renewed longer ago than IdentityLeaseFreshness are dead servers'.
		for _, name := range []string{"apiserver-other-host-a", "apiserver-other-host-b"} {
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: name}}
			if err := c.Get(ctx, client.ObjectKeyFromObject(l), l); err != nil {
				t.Fatal(err)
			}
			l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now().Add(-policy.IdentityLeaseFreshness - time.Second)}
			if err := c.Update(ctx, l); err != nil {
				t.Fatal(err)
			}
		}
		if servers, err := policy.APIServers(ctx, c, two.Config); err != nil || len(servers) != 2 {
			t.Errorf("APIServers with stale extra identity leases: %v, %v; want both servers", hosts(servers), err)
		}
		for _, name := range []string{"apiserver-other-host-a", "apiserver-other-host-b"} {
			if err := c.Delete(ctx, identityLease(name, time.Time{})); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("a resumed server admits with its old parameters until its watch catches up", func(t *testing.T) {
		resumedServerRounds(t, two, c, servers)
	})

	t.Run("a server that shuts down leaves at once, a killed one when its master lease expires", func(t *testing.T) {
		left := func(end func() error) time.Duration {
			t.Helper()
			if err := end(); err != nil {
				t.Fatal(err)
			}
			return untilListed(t, c, two.Config, first)
		}
		stopped := left(two.Second.Stop)
		t.Logf("after a graceful stop, %s left the list in %v", second, stopped)
		if stopped > 5*time.Second {
			t.Errorf("a gracefully stopped server left the list after %v, want at once", stopped)
		}

		restart, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := two.Second.Start(restart, two.Config); err != nil {
			t.Fatal(err)
		}
		if err := two.WaitListed(restart, first, second); err != nil {
			t.Fatal(err)
		}
		tracker := &policy.Tracker{Reader: c, Base: two.Config, Grace: time.Hour}
		if servers, err := tracker.APIServers(ctx); err != nil || !equal(hosts(servers), first, second) {
			t.Fatalf("the tracker returns %v (%v), want both servers", hosts(servers), err)
		}
		killed := left(two.Second.Kill)
		t.Logf("after SIGKILL, %s left the list in %v", second, killed)
		// Unlike a paused server, a killed one refuses connections, so the
		// tracker lets it go as soon as it leaves the list.
		if _, err := net.DialTimeout("tcp", two.Second.Bind, time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("a TCP connection to the killed %s: %v, want connection refused", second, err)
		}
		if servers, err := tracker.APIServers(ctx); err != nil || !equal(hosts(servers), first) {
			t.Errorf("after the killed server left the list, the tracker returns %v (%v), want only %s", hosts(servers), err, first)
		}
		// The master lease TTL (15 s) plus one reconcile period (10 s) of the
		// surviving server, plus slack for a loaded machine.
		if killed > 30*time.Second {
			t.Errorf("a killed server left the list after %v, want at most 25 s", killed)
		}
	})
}

// TestAPIServersPausedServerLeavesAndReturns shows why the list is not a
// proof of death: a kube-apiserver paused for longer than its master lease
// (15 s) leaves the list like a killed one, and returns when it resumes,
// with whatever its caches held when it stopped. It takes about 40 s, so it
// runs only with APISERVERS_LONG=1.
func TestAPIServersPausedServerLeavesAndReturns(t *testing.T) {
	testenv.SkipIfShort(t)
	if os.Getenv("APISERVERS_LONG") == "" {
		t.Skip("takes about 40 s: run with APISERVERS_LONG=1")
	}
	two, c := startTwo(t)
	first, second := two.First.Host, two.Second.Host
	tracker := &policy.Tracker{Reader: c, Base: two.Config, Grace: time.Hour}
	if servers, err := tracker.APIServers(t.Context()); err != nil || !equal(hosts(servers), first, second) {
		t.Fatalf("the tracker returns %v (%v), want both servers", hosts(servers), err)
	}
	if err := two.Second.Pause(); err != nil {
		t.Fatal(err)
	}
	left := untilListed(t, c, two.Config, first)
	t.Logf("paused, %s left the list in %v", second, left)
	// The paused server accepts connections: the tracker keeps it.
	if servers, err := tracker.APIServers(t.Context()); err != nil || !equal(hosts(servers), first, second) {
		t.Errorf("the tracker returns %v (%v) after the paused server left the list, want both servers", hosts(servers), err)
	}
	if err := two.Second.Resume(); err != nil {
		t.Fatal(err)
	}
	back := untilListed(t, c, two.Config, first, second)
	t.Logf("resumed, %s was back in the list in %v", second, back)
	if left > 30*time.Second || back > 15*time.Second {
		t.Errorf("a paused server left the list after %v and returned %v after resuming, want at most 25 s and 10 s", left, back)
	}
}

// startTwo starts a control plane of two kube-apiservers for t and a client
// of the first.
func startTwo(t *testing.T) (*testenv.Cluster, client.Client) {
	t.Helper()
	two, err := testenv.Start(t.Context(), testenv.Input{TwoAPIServers: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := two.Stop(); err != nil {
			t.Error(err)
		}
	})
	c, err := client.New(two.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return two, c
}

// untilListed polls APIServers until it lists exactly want, and returns how
// long that took (at most 45 s).
func untilListed(t *testing.T, c client.Reader, base *rest.Config, want ...string) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		servers, err := policy.APIServers(t.Context(), c, base)
		if err == nil && equal(hosts(servers), want...) {
			return time.Since(start)
		}
		if time.Since(start) > 45*time.Second {
			t.Fatalf("after 45 s APIServers lists %v (%v), want %v", hosts(servers), err, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func identityLease(name string, renewed time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: metav1.NamespaceSystem, Name: name,
			Labels: map[string]string{"apiserver.kubernetes.io/identity": "kube-apiserver"},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(name + "_test"),
			LeaseDurationSeconds: ptr.To[int32](3600),
			RenewTime:            &metav1.MicroTime{Time: renewed},
		},
	}
}

// version asks the server cfg addresses for its version.
func version(cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	_, err = cs.Discovery().ServerVersion()
	return err
}

func hosts(servers []policy.APIServer) []string {
	var h []string
	for _, s := range servers {
		h = append(h, s.Host)
	}
	return h
}

func equal(got []string, want ...string) bool {
	return fmt.Sprint(got) == fmt.Sprint(want)
}

// TestAPIServersInput covers how APIServers reads the endpoints and the base
// configuration (the fake client: parsing only, no fencing claim).
func TestAPIServersInput(t *testing.T) {
	slice := func(addressType discoveryv1.AddressType, port string, addresses ...string) *discoveryv1.EndpointSlice {
		s := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: metav1.NamespaceDefault, Name: "kubernetes" + string(addressType),
				Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"},
			},
			AddressType: addressType,
			Ports: []discoveryv1.EndpointPort{
				{Name: ptr.To("metrics"), Port: ptr.To[int32](9090)},
				{Name: ptr.To(port), Port: ptr.To[int32](6443)},
			},
		}
		for _, a := range addresses {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}})
		}
		return s
	}
	for _, tc := range []struct {
		name       string
		objects    []client.Object
		base       rest.Config
		wantHosts  []string
		wantServer string
		wantErr    string
	}{{
		name:       "IPv4 and IPv6, sorted, verified under the base host's name",
		objects:    []client.Object{slice(discoveryv1.AddressTypeIPv4, "https", "10.0.0.2", "10.0.0.1"), slice(discoveryv1.AddressTypeIPv6, "https", "fd00::1")},
		base:       rest.Config{Host: "https://api.example.com:443"},
		wantHosts:  []string{"10.0.0.1:6443", "10.0.0.2:6443", "[fd00::1]:6443"},
		wantServer: "api.example.com",
	}, {
		name:       "the base's server name wins",
		objects:    []client.Object{slice(discoveryv1.AddressTypeIPv4, "https", "10.0.0.1")},
		base:       rest.Config{Host: "10.96.0.1:443", TLSClientConfig: rest.TLSClientConfig{ServerName: "kubernetes.default.svc"}},
		wantHosts:  []string{"10.0.0.1:6443"},
		wantServer: "kubernetes.default.svc",
	}, {
		name:       "the in-cluster host",
		objects:    []client.Object{slice(discoveryv1.AddressTypeIPv4, "https", "10.0.0.1")},
		base:       rest.Config{Host: "https://10.96.0.1:443"},
		wantHosts:  []string{"10.0.0.1:6443"},
		wantServer: "10.96.0.1",
	}, {
		name:       "a host without a scheme",
		objects:    []client.Object{slice(discoveryv1.AddressTypeIPv4, "https", "10.0.0.1")},
		base:       rest.Config{Host: "10.96.0.1:443"},
		wantHosts:  []string{"10.0.0.1:6443"},
		wantServer: "10.96.0.1",
	}, {
		name:    "no endpoints",
		base:    rest.Config{Host: "https://api.example.com"},
		wantErr: "cannot be addressed one by one: the default/kubernetes Service has no endpoints",
	}, {
		name:    "no https port",
		objects: []client.Object{slice(discoveryv1.AddressTypeIPv4, "web", "10.0.0.1")},
		base:    rest.Config{Host: "https://api.example.com"},
		wantErr: "have no port named https",
	}, {
		name:    "an FQDN endpoint",
		objects: []client.Object{slice(discoveryv1.AddressTypeFQDN, "https", "api-1.example.com")},
		base:    rest.Config{Host: "https://api.example.com"},
		wantErr: "have address type FQDN, not an IP",
	}, {
		name:    "plain http",
		objects: []client.Object{slice(discoveryv1.AddressTypeIPv4, "https", "10.0.0.1")},
		base:    rest.Config{Host: "http://127.0.0.1:8080"},
		wantErr: "is not https",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(tc.objects...).Build()
			servers, err := policy.APIServers(t.Context(), c, &tc.base)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("APIServers: %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := hosts(servers); !equal(got, tc.wantHosts...) {
				t.Errorf("hosts %v, want %v", got, tc.wantHosts)
			}
			for _, s := range servers {
				if s.Config.Host != "https://"+s.Host || s.Config.ServerName != tc.wantServer || s.Config.Timeout != policy.RequestTimeout {
					t.Errorf("%s: host %q, server name %q, timeout %v; want https://%s, %q, %v",
						s.Host, s.Config.Host, s.Config.ServerName, s.Config.Timeout, s.Host, tc.wantServer, policy.RequestTimeout)
				}
			}
		})
	}
}

// resumedServerRounds measures what "absent is not dead" costs: a write that
// reaches a paused kube-apiserver is admitted or refused, once it resumes, by
// a ValidatingAdmissionPolicy whose parameter changed meanwhile. Each round
// pauses the second server, changes the parameter through the first (which
// then refuses the old value), sends a dry-run write with the old value to the
// paused server and resumes it.
func resumedServerRounds(t *testing.T, two *testenv.Cluster, c client.Client, servers []policy.APIServer) {
	ctx := t.Context()
	direct := make([]client.Client, len(servers))
	for i, s := range servers {
		var err error
		if direct[i], err = client.New(s.Config, client.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	const ns = "apiservers-lag"
	probeLabel := map[string]string{"apiservers-test/probe": "true"}
	param := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "epoch"}, Data: map[string]string{"token": "1"}}
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		param,
		&admissionregistrationv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "apiservers-test-epoch"},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
				FailurePolicy: ptr.To(admissionregistrationv1.Fail),
				ParamKind:     &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
				MatchConstraints: &admissionregistrationv1.MatchResources{
					ObjectSelector: &metav1.LabelSelector{MatchLabels: probeLabel},
					ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
						RuleWithOperations: admissionregistrationv1.RuleWithOperations{
							Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
							Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
						},
					}},
				},
				Validations: []admissionregistrationv1.Validation{{Expression: "object.data.token == params.data.token"}},
			},
		},
		&admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "apiservers-test-epoch"},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName: "apiservers-test-epoch",
				ParamRef: &admissionregistrationv1.ParamRef{
					Name: "epoch", Namespace: ns,
					ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction),
				},
				ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			},
		},
	} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	// probe sends a dry-run create with token through server i: nil if admitted.
	probe := func(i int, token int) error {
		return direct[i].Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "probe-", Labels: probeLabel},
			Data:       map[string]string{"token": strconv.Itoa(token)},
		}, client.DryRunAll)
	}
	// until waits until server i admits token and refuses token-1.
	until := func(i, token int) time.Duration {
		t.Helper()
		start := time.Now()
		for probe(i, token) != nil || probe(i, token-1) == nil {
			if time.Since(start) > 30*time.Second {
				t.Fatalf("after 30 s %s does not admit token %d alone", servers[i].Host, token)
			}
			time.Sleep(10 * time.Millisecond)
		}
		return time.Since(start)
	}
	until(0, 1)
	until(1, 1)

	const rounds = 5
	stale := 0
	for token := 2; token < 2+rounds; token++ {
		if err := two.Second.Pause(); err != nil {
			t.Fatal(err)
		}
		param.Data["token"] = strconv.Itoa(token)
		if err := c.Update(ctx, param); err != nil {
			t.Fatal(err)
		}
		until(0, token)
		result := make(chan error, 1)
		go func() { result <- probe(1, token-1) }()
		time.Sleep(300 * time.Millisecond) // the request waits in the paused server's socket
		if err := two.Second.Resume(); err != nil {
			t.Fatal(err)
		}
		err := <-result
		if err == nil {
			stale++
		} else if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
			t.Fatalf("the old token's write through the resumed %s: %v, want admitted or refused by the policy", servers[1].Host, err)
		}
		caughtUp := until(1, token)
		t.Logf("round %d: the resumed server %s the old token; it refused it %v later", token-1,
			map[bool]string{true: "admitted", false: "refused"}[err == nil], caughtUp)
	}
	t.Logf("a resumed kube-apiserver admitted a write with a replaced parameter in %d of %d rounds", stale, rounds)
}

// TestTracker covers how Tracker lets a departed server go (the fake client
// lists the endpoints; the departed servers' addresses are real sockets on
// this machine).
func TestTracker(t *testing.T) {
	// paused: a socket that completes TCP handshakes and answers nothing.
	paused, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = paused.Close() }()
	// dead: a port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	_ = l.Close()
	slice := func(name, host string) *discoveryv1.EndpointSlice { return endpointSlice(t, name, host) }
	const live = "10.0.0.1:6443"
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).
		WithObjects(slice("paused", paused.Addr().String()), slice("dead", dead), slice("live", live)).Build()
	clk := clocktesting.NewFakePassiveClock(time.Now())
	tracker := &policy.Tracker{Reader: c, Base: &rest.Config{Host: "https://api.example.com"}, Grace: time.Minute, Clock: clk}
	ctx := t.Context()
	check := func(when string, want ...string) {
		t.Helper()
		servers, err := tracker.APIServers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(want)
		if got := hosts(servers); !equal(got, want...) {
			t.Errorf("%s: the tracker returns %v, want %v", when, got, want)
		}
	}
	check("all listed", paused.Addr().String(), dead, live)
	for _, name := range []string{"paused", "dead"} {
		if err := c.Delete(ctx, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	check("two left the list", paused.Addr().String(), live)
	clk.SetTime(clk.Now().Add(time.Minute - time.Second))
	check("just before the grace period ends", paused.Addr().String(), live)
	clk.SetTime(clk.Now().Add(time.Second))
	check("when the grace period ends", live)
}

// listCounter counts the EndpointSlice lists read through it.
type listCounter struct {
	client.Reader
	mu    sync.Mutex
	lists int
}

func (l *listCounter) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*discoveryv1.EndpointSliceList); ok {
		l.mu.Lock()
		l.lists++
		l.mu.Unlock()
	}
	return l.Reader.List(ctx, list, opts...)
}

func (l *listCounter) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lists
}

// TestTrackerRefreshesInTheBackground: a started Tracker looks at the list
// by itself, so a server listed only before the barrier's first call (a
// paused one that left the list before this replica's first grant as
// leader) is still returned, until it is proven gone. Without the refresh
// the first call would never have seen it.
func TestTrackerRefreshesInTheBackground(t *testing.T) {
	paused, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = paused.Close() }()
	const live = "10.0.0.1:6443"
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).
		WithObjects(endpointSlice(t, "paused", paused.Addr().String()), endpointSlice(t, "live", live)).Build()
	reader := &listCounter{Reader: c}
	tracker := &policy.Tracker{Reader: reader, Base: &rest.Config{Host: "https://api.example.com"}, RefreshInterval: 10 * time.Millisecond}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- tracker.Start(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for reader.count() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the started tracker did not list the servers by itself within 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := c.Delete(t.Context(), &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "paused"}}); err != nil {
		t.Fatal(err)
	}
	servers, err := tracker.APIServers(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := hosts(servers); !equal(got, sortedHosts(paused.Addr().String(), live)...) {
		t.Errorf("after the paused server left the list, the tracker's first call returns %v, want it and %s", got, live)
	}
}

func sortedHosts(h ...string) []string {
	slices.Sort(h)
	return h
}

// endpointSlice is a kubernetes Service EndpointSlice named name listing
// host (IP:port).
func endpointSlice(t *testing.T, name, host string) *discoveryv1.EndpointSlice {
	t.Helper()
	ip, port, err := net.SplitHostPort(host)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: metav1.NamespaceDefault, Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(p))}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}}},
	}
}
