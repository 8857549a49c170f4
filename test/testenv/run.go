package testenv

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kubefence/kubefence/hack/devenv"
)

// Input is the control plane a suite needs. The zero Input is a bare
// kube-apiserver and etcd.
type Input struct {
	// Root is the repository's root relative to the caller's working directory
	// (a test's package directory), e.g. ".." or "../..". Required with CRDs
	// or Webhooks.
	Root string
	// CRDs installs the operator's CRDs and the test CRDs (the example guarded
	// kind, Widget), failing to start if a directory is missing.
	CRDs bool
	// Webhooks installs the operator's admission configurations
	// (WebhookPaths), pointed at the port and certificates envtest allocates;
	// the caller serves them (WebhookManagerOptions, RegisterWebhooks).
	Webhooks bool
	// Scheme, if set, is the scheme envtest installs CRDs with.
	Scheme *runtime.Scheme
	// Configure, if set, changes the Environment before it starts (API server
	// flags, data directories, timeouts).
	Configure func(*envtest.Environment)
}

// Environment builds, without starting it, the envtest environment of in.
func (in Input) Environment() *envtest.Environment {
	env := &envtest.Environment{Scheme: in.Scheme}
	if in.CRDs {
		env.CRDDirectoryPaths = devenv.CRDPaths(in.Root)
		env.ErrorIfCRDPathMissing = true
	}
	if in.Webhooks {
		env.WebhookInstallOptions = envtest.WebhookInstallOptions{Paths: WebhookPaths(in.Root)}
	}
	if in.Configure != nil {
		in.Configure(env)
	}
	return env
}

// Start starts the control plane of in. It is the one place kubefence's
// suites and benchmark start kube-apiserver and etcd (the demo, which may
// not import test/, starts its own from the same hack/devenv paths).
func Start(in Input) (*envtest.Environment, *rest.Config, error) {
	env := in.Environment()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" && env.BinaryAssetsDirectory == "" {
		return nil, nil, fmt.Errorf("KUBEBUILDER_ASSETS is not set, so there is no kube-apiserver or etcd to test against: " +
			"run `make test`, or KUBEBUILDER_ASSETS=$(./hack/setup-envtest.sh | tail -n1) go test ./...; `make test-unit` runs the tests that need neither")
	}
	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop() // whatever did start
		return nil, nil, fmt.Errorf("starting kube-apiserver and etcd: %w", err)
	}
	return env, cfg, nil
}

// Short tells whether the tests run with -short (make test-unit): without a
// control plane.
func Short() bool {
	if !flag.Parsed() {
		flag.Parse()
	}
	return testing.Short()
}

// SkipIfShort skips t, a test that needs a control plane (a Ginkgo suite's
// entry point, say), under -short.
func SkipIfShort(t testing.TB) {
	t.Helper()
	if Short() {
		t.Skip("needs kube-apiserver and etcd; skipped by -short (make test-unit)")
	}
}

// Run is the body of a TestMain for a package whose tests need a control
// plane: RunCluster with setup given the environment and its admin config.
func Run(m *testing.M, in Input, setup func(env *envtest.Environment, cfg *rest.Config) error) int {
	return RunCluster(m, in, "", func(_ context.Context, c *Cluster) error {
		if setup == nil {
			return nil
		}
		return setup(c.Env, c.Config)
	})
}

// RunCluster is the body of a TestMain for a package whose tests need a
// control plane: it starts the Cluster of in (StartCluster, creating
// namespace if not empty), calls setup with it and a context (to build
// clients and start managers until the context ends; a non-nil error fails
// the package), runs the tests, ends the context, and stops the managers the
// Cluster started and the control plane (Cluster.Stop; an error there fails
// the package). Under -short it runs the tests without a control plane and
// without setup: the package's unit tests run, and the tests that need the
// control plane skip themselves (SkipIfShort).
func RunCluster(m *testing.M, in Input, namespace string, setup func(ctx context.Context, c *Cluster) error) int {
	if Short() {
		return m.Run()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := StartCluster(ctx, in, namespace)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := 1
	if err := setup(ctx, c); err != nil {
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
