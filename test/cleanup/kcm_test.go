package cleanup_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// kcm is a running kube-controller-manager with only the garbage collector
// and the namespace controller.
type kcm struct {
	cmd  *exec.Cmd
	log  *syncBuffer
	done chan error
}

// startKCM starts kube-controller-manager ($KUBEBUILDER_ASSETS, built by
// hack/setup-envtest.sh) against the suite's API server, as kcmUser; with
// useSACredentials each controller authenticates as its own service account
// in kube-system (tokens from the TokenRequest API, signed with the API
// server's service-account key), otherwise every controller acts as kcmUser.
// It is stopped when t ends.
func startKCM(t *testing.T, useSACredentials bool) *kcm {
	t.Helper()
	bin := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kube-controller-manager")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("no kube-controller-manager in KUBEBUILDER_ASSETS (hack/setup-envtest.sh builds it): %v", err)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kcmKubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	k := &kcm{log: &syncBuffer{}, done: make(chan error, 1)}
	k.cmd = exec.Command(bin,
		"--kubeconfig="+kubeconfig,
		"--controllers=garbagecollector,namespace",
		"--leader-elect=false",
		"--secure-port=0",
		"--use-service-account-credentials="+strconv.FormatBool(useSACredentials),
		// The key the API server signs service-account tokens with (envtest's
		// --service-account-signing-key-file).
		"--service-account-private-key-file="+filepath.Join(cluster.Env.ControlPlane.APIServer.CertDir, "sa-signer.key"),
		"--v=2",
	)
	k.cmd.Stdout, k.cmd.Stderr = k.log, k.log
	k.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := k.cmd.Start(); err != nil {
		t.Fatalf("starting kube-controller-manager: %v", err)
	}
	go func() { k.done <- k.cmd.Wait() }()
	t.Cleanup(func() {
		_ = k.cmd.Process.Signal(syscall.SIGTERM)
		var err error
		select {
		case err = <-k.done:
		case <-time.After(10 * time.Second):
			_ = k.cmd.Process.Kill()
			err = <-k.done
		}
		t.Logf("kube-controller-manager stopped: %v", err)
		if t.Failed() {
			t.Logf("kube-controller-manager log (last 8 KiB):\n%s", k.log.tail(8<<10))
		}
	})
	return k
}

// running fails t if kube-controller-manager is no longer running.
func (k *kcm) running(t *testing.T) {
	t.Helper()
	select {
	case err := <-k.done:
		k.done <- err
		t.Fatalf("kube-controller-manager exited: %v\n%s", err, k.log.tail(8<<10))
	default:
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) tail(n int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.b.Bytes()
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
