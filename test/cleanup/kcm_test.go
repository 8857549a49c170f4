package cleanup_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/kubefence/kubefence/hack/devenv"
	"github.com/kubefence/kubefence/test/testenv"
)

// kcm is a running kube-controller-manager with only the garbage collector
// and the namespace controller.
type kcm struct {
	*devenv.Proc
	log *devenv.Buffer
}

// startKCM starts kube-controller-manager ($KUBEBUILDER_ASSETS, built by
// hack/setup-envtest.sh) against the suite's API server, as kcmUser; with
// useSACredentials each controller authenticates as its own service account
// in kube-system (tokens from the TokenRequest API, signed with the API
// server's service-account key), otherwise every controller acts as kcmUser.
// It is stopped when t ends.
func startKCM(t *testing.T, useSACredentials bool) *kcm {
	t.Helper()
	return startKCMOn(t, cluster, kcmKubeconfig, useSACredentials)
}

// startKCMOn is startKCM against the API server of c, authenticating with
// kubeconfig.
func startKCMOn(t *testing.T, c *testenv.Cluster, kubeconfigData []byte, useSACredentials bool) *kcm {
	t.Helper()
	bin := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kube-controller-manager")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("no kube-controller-manager in KUBEBUILDER_ASSETS (hack/setup-envtest.sh builds it): %v", err)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kubeconfigData, 0o600); err != nil {
		t.Fatal(err)
	}
	log := &devenv.Buffer{}
	cmd := exec.Command(bin,
		"--kubeconfig="+kubeconfig,
		"--controllers=garbagecollector,namespace",
		"--leader-elect=false",
		"--secure-port=0",
		"--use-service-account-credentials="+strconv.FormatBool(useSACredentials),
		// The key the API server signs service-account tokens with (envtest's
		// --service-account-signing-key-file).
		"--service-account-private-key-file="+filepath.Join(c.Env.ControlPlane.APIServer.CertDir, "sa-signer.key"),
		"--v=2",
	)
	cmd.Stdout, cmd.Stderr = log, log
	p, err := devenv.StartProc("kube-controller-manager", cmd)
	if err != nil {
		t.Fatal(err)
	}
	k := &kcm{Proc: p, log: log}
	t.Cleanup(func() {
		k.Stop(10 * time.Second)
		t.Logf("kube-controller-manager stopped: %v", k.Err())
		if t.Failed() {
			t.Logf("kube-controller-manager log (last 8 KiB):\n%s", k.log.Tail(8<<10))
		}
	})
	return k
}

// running fails t if kube-controller-manager is no longer running.
func (k *kcm) running(t *testing.T) {
	t.Helper()
	if k.Exited() {
		t.Fatalf("kube-controller-manager exited: %v\n%s", k.Err(), k.log.Tail(8<<10))
	}
}
