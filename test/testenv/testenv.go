// Package testenv is the envtest and in-process operator setup that kubefence's
// test suites and benchmark share: a control plane with the operator's CRDs
// and admission configurations, the admin identity, managers serving the
// operator's webhooks and running the FencedLease reconciler, wired as
// cmd/main.go wires them (through operator.Setup) with its default timing and
// clock skew.
//
// It has one entry: Run(m, Input) in a package's TestMain, or Start(ctx,
// Input) where a test needs a control plane of its own. Both give a Cluster,
// whose methods make the rest: clients and kubeconfigs of users
// (Cluster.User, Users, Clients, Kubeconfig), a namespace per test
// (Cluster.Namespace), the operator's options (Cluster.Operator, Webhooks) and
// Managers running it (Cluster.ServeOperator, StartController, Start), and,
// with Input.TwoAPIServers, the two kube-apiserver processes
// (Cluster.First, Second). Cluster.Stop stops what it started. Under -short
// (make test-unit) Run starts nothing and SkipIfShort skips the tests that
// need a control plane; a Ginkgo suite's TestX calls specs.Run
// (test/testenv/specs), which keeps Ginkgo out of the programs that import
// testenv.
//
// Beside the entry it holds what several suites share: the example guarded
// kind's objects (Widget, GuardedWidget), a Journal of tenures, Record of
// watched versions, the Warnings a client was given (Cluster.Warned), the
// client's LeaseErrors metric, PolicyModeFencingWebhooks,
// ChartWithoutKubeVersion, Serve and Within. Faults injected into a client's
// traffic (a Gate and its transports) are test/testenv/fault's;
// what the demo shares with the suites (scheme, RBAC, child processes) is
// hack/devenv's, which the suites import directly.
//
// It imports production packages (controllers/operator for the wiring) and
// never the reverse: no production package may import testenv.
package testenv

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/kubefence/kubefence/hack/devenv"
)

// Input is the control plane a suite needs. The zero Input is a bare
// kube-apiserver and etcd.
type Input struct {
	// Root is the repository's root relative to the caller's working directory
	// (a test's package directory), e.g. "../..". Required with CRDs, Webhooks
	// or Policy.
	Root string
	// CRDs installs the operator's CRDs and the test CRDs (the example guarded
	// kind, Widget), failing to start if a directory is missing.
	CRDs bool
	// Webhooks installs the operator's admission configurations
	// (devenv.WebhookPaths), pointed at the port and certificates envtest
	// allocates; Cluster.ServeOperator serves them.
	Webhooks bool
	// Policy installs, instead, the admission configurations of policy mode
	// (config/components/policy): no FencedLease webhook (the policy
	// kubefence-fencedleases judges FencedLease writes), and the fencing
	// webhook configuration as the component's own patches leave it
	// (PolicyModeFencingWebhooks). One kube-apiserver then listens on every
	// address of the host (--bind-address 0.0.0.0), so that the address it
	// lists for itself in the kubernetes Service's endpoints reaches it, as
	// policy mode's barrier needs (policy.APIServers); two advertise their own
	// (TwoAPIServers).
	Policy bool
	// TwoAPIServers starts a second kube-apiserver on the same etcd, the shape
	// of a highly available control plane (Cluster.First, Cluster.Second;
	// apiservers.go). Linux only.
	TwoAPIServers bool
	// EtcdVia, if set, makes kube-apiserver reach etcd through the address
	// (host:port) it returns for etcd's own, for instance a proxy's that
	// delays chosen etcd requests (a commit held after admission). With
	// TwoAPIServers the second server reaches etcd through the same address
	// unless SecondEtcdVia is set.
	EtcdVia func(etcd string) (string, error)
	// SecondEtcdVia, if set, is the second kube-apiserver's EtcdVia, for
	// instance a proxy that delays what etcd sends it, so that its caches fall
	// behind the first's.
	SecondEtcdVia func(etcd string) (string, error)
	// Scheme is the scheme of the Cluster's clients and of envtest's CRD
	// installation; devenv.NewScheme if nil.
	Scheme *runtime.Scheme
	// Namespace, if not empty, is created once the control plane serves (the
	// operator's namespace).
	Namespace string
	// Log, if set, receives controller-runtime's log (the operator's, the
	// managers'), in development mode; io.Discard silences it.
	Log io.Writer
	// Configure, if set, changes the Environment before it starts (API server
	// flags, data directories, timeouts).
	Configure func(*envtest.Environment)
	// Setup is Run's: what the package's tests share, built on the Cluster
	// (clients, managers) until ctx ends; an error fails the package.
	Setup func(ctx context.Context, c *Cluster) error
}

// environment builds, without starting it, the envtest environment of in.
func (in Input) environment() (*envtest.Environment, error) {
	env := &envtest.Environment{Scheme: in.Scheme}
	if in.CRDs {
		env.CRDDirectoryPaths = devenv.CRDPaths(in.Root)
		env.ErrorIfCRDPathMissing = true
	}
	if in.Webhooks {
		env.WebhookInstallOptions = envtest.WebhookInstallOptions{Paths: devenv.WebhookPaths(in.Root)}
	}
	if in.Policy {
		cfg, err := PolicyModeFencingWebhooks(in.Root)
		if err != nil {
			return nil, err
		}
		env.WebhookInstallOptions.Paths = nil
		env.WebhookInstallOptions.ValidatingWebhooks = []*admissionv1.ValidatingWebhookConfiguration{cfg}
		if !in.TwoAPIServers {
			env.ControlPlane.GetAPIServer().Configure().Set("bind-address", "0.0.0.0")
		}
	}
	if in.EtcdVia != nil {
		if err := etcdVia(env, in.EtcdVia); err != nil {
			return nil, err
		}
	}
	if in.Configure != nil {
		in.Configure(env)
	}
	return env, nil
}

// Start starts the control plane of in and returns it as a Cluster: the
// admin's client (with in.Scheme), the admin's username, in.Namespace
// created. It is the one place kubefence's suites and benchmark start
// kube-apiserver and etcd (the demo, which may not import test/, starts its
// own from the same hack/devenv paths). On an error after the start it stops
// what it started.
func Start(ctx context.Context, in Input) (*Cluster, error) {
	if in.Scheme == nil {
		in.Scheme = devenv.NewScheme()
	}
	if in.Log != nil {
		logf.SetLogger(zap.New(zap.WriteTo(in.Log), zap.UseDevMode(true)))
	}
	env, err := in.environment()
	if err != nil {
		return nil, err
	}
	if os.Getenv("KUBEBUILDER_ASSETS") == "" && env.BinaryAssetsDirectory == "" {
		return nil, errors.New("KUBEBUILDER_ASSETS is not set, so there is no kube-apiserver or etcd to test against: " +
			"run `make test`, or KUBEBUILDER_ASSETS=$(./hack/setup-envtest.sh | tail -n1) go test ./...; `make test-unit` runs the tests that need neither")
	}
	var port string
	if in.TwoAPIServers {
		if port, err = bindFirst(env); err != nil {
			return nil, err
		}
	}
	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop() // whatever did start
		return nil, fmt.Errorf("starting kube-apiserver and etcd: %w", err)
	}
	c := &Cluster{Env: env, Config: cfg, Scheme: in.Scheme}
	if in.TwoAPIServers {
		err = c.startSecond(port, in.SecondEtcdVia)
	}
	if err == nil {
		err = c.bootstrap(ctx, in.Namespace)
	}
	if err != nil {
		return nil, errors.Join(err, c.Stop())
	}
	return c, nil
}

// Run is the body of a TestMain for a package whose tests need a control
// plane: it starts the Cluster of in (Start), calls in.Setup with it and a
// context (to build clients and start managers until the context ends), runs
// the tests, ends the context, and stops the managers the Cluster started
// and the control plane (Cluster.Stop). An error in any of these fails the
// package. Under -short it runs the tests without a control plane and
// without Setup: the package's unit tests run, and the tests that need the
// control plane skip themselves (SkipIfShort).
func Run(m *testing.M, in Input) int {
	if short() {
		return m.Run()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := Start(ctx, in)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := 1
	if in.Setup == nil {
		code = m.Run()
	} else if err := in.Setup(ctx, c); err != nil {
		fmt.Fprintf(os.Stderr, "setting up the suite: %v\n", err)
	} else {
		code = m.Run()
	}
	// The managers' watches end before the API server stops.
	cancel()
	time.Sleep(200 * time.Millisecond)
	if err := c.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "tearing down the suite: %v\n", err)
		return 1
	}
	return code
}

// short tells whether the tests run with -short (make test-unit): without a
// control plane.
func short() bool {
	if !flag.Parsed() {
		flag.Parse()
	}
	return testing.Short()
}

// SkipIfShort skips t, a test that needs a control plane (a Ginkgo suite's
// entry point, say), under -short.
func SkipIfShort(t testing.TB) {
	t.Helper()
	if short() {
		t.Skip("needs kube-apiserver and etcd; skipped by -short (make test-unit)")
	}
}

// WantContains fails t for each of wants that got, the output what names,
// lacks.
func WantContains(t testing.TB, what, got string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(got, want) {
			t.Errorf("%s lacks %q:\n%s", what, want, got)
		}
	}
}

// Within calls f every 20 ms until it returns nil, and fails t with f's
// last error if d passes first (what names the condition in the failure).
func Within(t testing.TB, d time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Serve runs start (a manager's or a server's Start) in a goroutine until t
// ends: t's cleanup cancels its context, waits for it to return, and fails t
// if it returned an error (what names it in the failure).
func Serve(t testing.TB, what string, start func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", what, err)
		}
	})
}
