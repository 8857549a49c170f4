package history

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/controllers/policy"
	"github.com/kubefence/kubefence/hack/devenv"
	"github.com/kubefence/kubefence/test/history/checker"
	"github.com/kubefence/kubefence/test/testenv"
)

const (
	operatorNamespace = "kubefence-system"
	historyNamespace  = "history"
	workersGroup      = "kubefence:history-workers"
)

// cluster is etcd and kube-apiserver (envtest), with the kubefence operator
// as a separate process (bin/manager built from cmd/), so that kill -9 and a
// restart are real. In policy mode it is two kube-apiservers on one etcd
// (testenv.Input.TwoAPIServers), the second reaching etcd through etcdProxy so that its
// caches can be made to lag. Every kube-apiserver reaches etcd through a
// proxy of etcdProxies, which can delay its Widget writes after admission
// (commit-delay).
type cluster struct {
	env *envtest.Environment
	// two, etcdProxy and connect are policy mode's: the two kube-apiservers,
	// the second's proxy to etcd (marking the ConfigMap storage's
	// connection), and the operator's HTTPS_PROXY to the servers' advertised
	// addresses, which its barrier probes.
	two       *testenv.Cluster
	etcdProxy *faultProxy
	connect   *connectProxy
	// etcdProxies are every kube-apiserver's way to etcd, the first's first
	// (the second's is etcdProxy).
	etcdProxies []*faultProxy
	// tc is the control plane as testenv started it.
	tc     *testenv.Cluster
	cfg    *rest.Config
	scheme *runtime.Scheme
	admin  client.WithWatch
	// adminUser is the envtest admin's username: the operator runs as it and
	// the FencedLease webhook trusts it as the controller.
	adminUser       string
	adminKubeconfig string
	// operatorKubeconfig points the operator at kube-apiserver through
	// operatorProxy, so that faults can delay the operator's own reads and
	// writes (the fencing webhook's lease reads among them).
	operatorKubeconfig string
	operatorProxy      *faultProxy
	managerBin         string
	dir                string
	leaseSeconds       int32
	// enforcement is the operator's --enforcement mode.
	enforcement string

	mu          sync.Mutex
	operator    *proc
	operatorLog *os.File
	restarts    int
}

// buildBinaries compiles the operator and the worker into dir.
func buildBinaries(ctx context.Context, root, dir string) (manager, worker string, err error) {
	manager, worker = filepath.Join(dir, "manager"), filepath.Join(dir, "worker")
	for bin, pkg := range map[string]string{manager: "./cmd", worker: "./test/history/worker"} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
		}
	}
	return manager, worker, nil
}

// startRecorded builds the manager and the worker into dir and starts the
// control plane of startCluster, the commit recorder and the operator. The
// commit log, every version of the Widgets and FencedLeases from before the
// first is written, placed by its etcd revision, goes to dir/commits.jsonl.
// When the test ends the recorder (if rec.Stop was not called yet), the log
// file and the control plane are stopped, in that order. It returns the
// worker binary too, and start: the time the recording started, once the
// control plane is up.
func startRecorded(ctx context.Context, t *testing.T, dir string, leaseSeconds int32, enforcement string) (cl *cluster, workerBin string, rec *checker.CommitRecorder, start time.Time) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	managerBin, workerBin, err := buildBinaries(ctx, root, dir)
	if err != nil {
		t.Fatal(err)
	}
	cl, err = startCluster(ctx, root, dir, managerBin, leaseSeconds, enforcement)
	if cl != nil {
		t.Cleanup(func() {
			if err := cl.stop(); err != nil {
				t.Errorf("stopping the control plane: %v", err)
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	commitsOut, err := os.Create(filepath.Join(dir, "commits.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = commitsOut.Close() })
	start = time.Now()
	rec, err = checker.StartCommitRecorder(ctx, cl.admin, historyNamespace, start, commitsOut)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = rec.Stop() }) // Stop again returns at once
	if err := cl.startOperator(ctx); err != nil {
		t.Fatal(err)
	}
	return cl, workerBin, rec, start
}

// startCluster starts etcd and kube-apiserver with the CRDs of config/ and
// test/crds and the webhook configurations of config/webhook, pointed at the
// port and certificate envtest allocates for the operator.
func startCluster(ctx context.Context, root, dir, managerBin string, leaseSeconds int32, enforcement string) (*cluster, error) {
	var (
		etcdAddr    string // etcd's own address
		etcdProxies []*faultProxy
		etcdProxy   *faultProxy
	)
	closeProxies := func() {
		for _, p := range etcdProxies {
			p.Close()
		}
	}
	policyMode := enforcement == operator.EnforcementPolicy
	in := testenv.Input{Root: root, CRDs: true, Webhooks: true, Policy: policyMode, TwoAPIServers: policyMode,
		EtcdVia: func(etcd string) (string, error) {
			p, err := newEtcdProxy(etcd, nil, widgetWrites)
			if err != nil {
				return "", err
			}
			etcdAddr, etcdProxies = etcd, append(etcdProxies, p)
			return p.Addr(), nil
		},
		Configure: func(env *envtest.Environment) {
			env.ControlPlaneStartTimeout = 90 * time.Second
			env.ControlPlaneStopTimeout = 30 * time.Second
			env.WebhookInstallOptions.LocalServingHost = "127.0.0.1"
		}}
	if policyMode {
		// The second server copies the first's flags, so its etcd address is
		// the first's proxy: it gets its own, to etcd itself.
		in.SecondEtcdVia = func(string) (string, error) {
			p, err := newEtcdProxy(etcdAddr, []byte(configMapsKey), widgetWrites)
			if err != nil {
				return "", err
			}
			etcdProxy, etcdProxies = p, append(etcdProxies, p)
			return p.Addr(), nil
		}
	}
	tc, err := testenv.Start(ctx, in)
	if err != nil {
		closeProxies()
		return nil, err
	}
	env, cfg := tc.Env, tc.Config
	c := &cluster{env: env, cfg: cfg, etcdProxy: etcdProxy, etcdProxies: etcdProxies, scheme: tc.Scheme, dir: dir,
		managerBin: managerBin, leaseSeconds: leaseSeconds, enforcement: enforcement,
		tc: tc, admin: tc.Admin, adminUser: tc.AdminUser}
	if policyMode {
		c.two = tc
	}
	c.adminKubeconfig = filepath.Join(dir, "admin.kubeconfig")
	if err := os.WriteFile(c.adminKubeconfig, env.KubeConfig, 0o600); err != nil {
		return c, err
	}
	if c.operatorLog, err = os.OpenFile(filepath.Join(dir, "operator.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		return c, err
	}
	apiAddr, err := c.apiServerAddr()
	if err != nil {
		return c, err
	}
	if c.operatorProxy, err = newFaultProxy(apiAddr); err != nil {
		return c, err
	}
	kc, err := clientcmd.Load(env.KubeConfig)
	if err != nil {
		return c, fmt.Errorf("reading the admin kubeconfig: %w", err)
	}
	for _, cl := range kc.Clusters {
		cl.Server = (&url.URL{Scheme: "https", Host: c.operatorProxy.Addr()}).String()
	}
	c.operatorKubeconfig = filepath.Join(dir, "operator.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, c.operatorKubeconfig); err != nil {
		return c, err
	}
	if c.two != nil {
		if c.connect, err = newConnectProxy(c.two.Config.Dial, c.two.First.Host, c.two.Second.Host); err != nil {
			return c, err
		}
	}
	return c, c.setUp(ctx)
}

// setUp creates the namespaces and the workers' RBAC: what config/rbac's
// editor role gives a lease client, plus full rights on Widgets, so that only
// fencing refuses a write.
func (c *cluster) setUp(ctx context.Context) error {
	for _, ns := range []string{operatorNamespace, historyNamespace} {
		if err := c.admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}
	if err := devenv.ApplyHeartbeatPolicy(ctx, c.admin, filepath.Join("..", "..")); err != nil {
		return err
	}
	rules := append([]rbacv1.PolicyRule{devenv.HeartbeatRule}, devenv.ClientRules...)
	return devenv.GrantClusterRole(ctx, c.admin, "kubefence-history-worker", workersGroup, rules...)
}

// startOperator runs bin/manager as the admin, serving the webhooks on
// envtest's port and certificate, and waits until the webhook port answers TLS.
func (c *cluster) startOperator(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.env.WebhookInstallOptions
	args := []string{
		"--webhook-cert-path=" + w.LocalServingCertDir,
		"--webhook-port=" + strconv.Itoa(w.LocalServingPort),
		"--controller-user=" + c.adminUser,
		"--namespace=" + operatorNamespace,
		"--metrics-bind-address=0",
		"--health-probe-bind-address=0",
		"--enforcement=" + c.enforcement,
	}
	env := []string{"KUBECONFIG=" + c.operatorKubeconfig}
	if c.connect != nil {
		// The barrier's probes go to the advertised addresses (never to a
		// loopback address, which Go does not proxy) through the proxy.
		env = append(env, "HTTPS_PROXY="+c.connect.URL(), "NO_PROXY=")
	}
	fmt.Fprintf(c.operatorLog, "=== history: starting operator (start %d) at %s\n", c.restarts+1, time.Now().Format(time.RFC3339Nano))
	p, err := startProc("operator", c.managerBin, args, env, c.operatorLog, c.operatorLog)
	if err != nil {
		return err
	}
	c.operator = p
	c.restarts++
	addr := net.JoinHostPort(w.LocalServingHost, strconv.Itoa(w.LocalServingPort))
	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // readiness probe only
		if err == nil {
			_ = conn.Close()
			break
		}
		if p.Exited() {
			return fmt.Errorf("the operator exited while starting (%v); see %s", p.Err(), c.operatorLog.Name())
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the operator's webhook did not serve on %s within 60s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if c.enforcement != operator.EnforcementPolicy {
		return nil
	}
	// Before its policies are in place nothing is fenced: the workers start
	// only after the operator has applied them (they stay when it dies).
	for {
		err := c.admin.Get(ctx, client.ObjectKey{Name: policy.GuardedBindingName}, &admissionv1.ValidatingAdmissionPolicyBinding{})
		if err == nil {
			return nil
		}
		if p.Exited() {
			return fmt.Errorf("the operator exited while applying its policies (%v); see %s", p.Err(), c.operatorLog.Name())
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the operator did not apply its policies within 60s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// killOperator sends SIGKILL to the operator and waits for it to die.
func (c *cluster) killOperator() {
	c.mu.Lock()
	p := c.operator
	c.mu.Unlock()
	if p != nil {
		p.Kill()
		fmt.Fprintf(c.operatorLog, "=== history: operator killed (SIGKILL) at %s\n", time.Now().Format(time.RFC3339Nano))
	}
}

// stop stops the operator, then kube-apiserver and etcd.
func (c *cluster) stop() error {
	for _, p := range append([]*faultProxy{c.operatorProxy}, c.etcdProxies...) {
		if p != nil {
			defer p.Close()
		}
	}
	if c.connect != nil {
		defer c.connect.Close()
	}
	c.mu.Lock()
	p := c.operator
	c.mu.Unlock()
	if p != nil {
		p.Stop(10 * time.Second)
	}
	if c.operatorLog != nil {
		_ = c.operatorLog.Close()
	}
	return c.tc.Stop()
}

// delayedWrites is the number of Widget writes the etcd proxies delayed so
// far.
func (c *cluster) delayedWrites() (n int) {
	for _, p := range c.etcdProxies {
		n += p.DelayedWrites()
	}
	return n
}

// setWriteDelay delays every kube-apiserver's Widget writes to etcd by d (0:
// no longer).
func (c *cluster) setWriteDelay(d time.Duration) {
	for _, p := range c.etcdProxies {
		p.SetWriteDelay(d)
	}
}

// createLease creates a FencedLease of the run's duration.
func (c *cluster) createLease(ctx context.Context, name string) error {
	return c.createLeaseOf(ctx, name, c.leaseSeconds)
}

// createLeaseOf creates a FencedLease of that duration.
func (c *cluster) createLeaseOf(ctx context.Context, name string, seconds int32) error {
	return c.admin.Create(ctx, &coordv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: historyNamespace, Name: name},
		Spec:       coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: seconds},
	})
}

// recreateLease deletes a FencedLease, waits until it is gone (the operator
// records its epoch first), and creates it again.
func (c *cluster) recreateLease(ctx context.Context, name string) error {
	l := &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: historyNamespace, Name: name}}
	deadline := time.Now().Add(90 * time.Second)
	// A FencedLease DELETE is admitted by the operator's webhook (fail
	// closed): while an operator-kill fault has it down, retry.
	for {
		err := c.admin.Delete(ctx, l)
		if err == nil || apierrors.IsNotFound(err) {
			break
		}
		if !apierrors.IsInternalError(err) || time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("deleting lease %s: %w", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for {
		err := c.admin.Get(ctx, types.NamespacedName{Namespace: historyNamespace, Name: name}, l)
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("lease %s still there 90s after its deletion (%v)", name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for {
		err := c.createLease(ctx, name)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("creating lease %s again: %w", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// workerKubeconfig adds a user for a worker and writes its kubeconfig, with
// the worker's fault proxy as the server.
func (c *cluster) workerKubeconfig(name, proxyAddr, path string) error {
	u, err := c.env.AddUser(envtest.User{Name: name, Groups: []string{workersGroup}}, nil)
	if err != nil {
		return fmt.Errorf("adding user %s: %w", name, err)
	}
	rc := u.Config()
	server := &url.URL{Scheme: "https", Host: proxyAddr}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: server.String(), CertificateAuthorityData: rc.CAData}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: rc.CertData, ClientKeyData: rc.KeyData, Token: rc.BearerToken}
	kc.Contexts["default"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: name}
	kc.CurrentContext = "default"
	return clientcmd.WriteToFile(*kc, path)
}

// apiServerAddr is host:port of (the first) kube-apiserver.
func (c *cluster) apiServerAddr() (string, error) {
	u, err := url.Parse(c.cfg.Host)
	if err != nil {
		return "", err
	}
	return u.Host, nil
}

// apiServerAddrs are host:port of every kube-apiserver, the first first.
func (c *cluster) apiServerAddrs() ([]string, error) {
	if c.two != nil {
		return []string{c.two.First.Bind, c.two.Second.Bind}, nil
	}
	addr, err := c.apiServerAddr()
	return []string{addr}, err
}

// revoke is an operator's kubectl fence release (or, with handover, hand-over
// to the last waiting request): the holder's request goes, with the revoked
// annotation, in one JSON patch tested against the holder. It returns the
// revoked holder ("" when the lease had none).
func (c *cluster) revoke(ctx context.Context, name string, handover bool) (string, error) {
	var l coordv1alpha1.FencedLease
	if err := c.admin.Get(ctx, client.ObjectKey{Namespace: historyNamespace, Name: name}, &l); err != nil {
		return "", err
	}
	h := l.Status.HolderIdentity
	hi := coordv1alpha1.RequestIndex(l.Spec.Requests, h)
	if h == "" || hi < 0 {
		return "", nil
	}
	ops := []map[string]any{{"op": "test", "path": "/status/holderIdentity", "value": h}}
	if l.Annotations == nil {
		ops = append(ops, map[string]any{"op": "add", "path": "/metadata/annotations", "value": map[string]string{}})
	}
	ops = append(ops, map[string]any{"op": "add", "path": "/metadata/annotations/" + strings.ReplaceAll(coordv1alpha1.RevokedAnnotation, "/", "~1"),
		"value": coordv1alpha1.ExpiredMark(h, l.Status.FencingToken)})
	if last := len(l.Spec.Requests) - 1; handover && last > 0 && last != hi {
		ops = append(ops, map[string]any{"op": "move", "from": fmt.Sprintf("/spec/requests/%d", last), "path": "/spec/requests/0"})
		if hi < last {
			hi++
		}
	}
	ops = append(ops, map[string]any{"op": "remove", "path": fmt.Sprintf("/spec/requests/%d", hi)})
	data, err := json.Marshal(ops)
	if err != nil {
		return "", err
	}
	if err := c.admin.Patch(ctx, &l, client.RawPatch(types.JSONPatchType, data)); err != nil {
		return "", fmt.Errorf("revoking %s's tenure: %w", h, err)
	}
	return h, nil
}
