package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kubefence/kubefence/hack/devenv"
)

// TestStory plays the whole demo against a real kube-apiserver and etcd, with
// real worker processes, and checks what it must show: A's late write with
// its old token is refused by the API server, tokens went up, the Widget
// holds only B's writes after the takeover, and nothing is left behind.
func TestStory(t *testing.T) {
	if testing.Short() {
		t.Skip("plays the demo on a real control plane (about 30s)")
	}
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is unset: run the tests with `make test`, which supplies kube-apiserver, etcd and kubectl")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out := &devenv.Buffer{}
	res, err := run(ctx, options{leaseSeconds: 3, interval: 300 * time.Millisecond, out: out, logs: io.Discard})
	t.Log("demo output:\n" + out.String())
	if err != nil {
		t.Fatalf("the demo failed: %v", err)
	}

	if res.TokenA <= 0 || res.TokenB <= res.TokenA {
		t.Errorf("tokens did not increase: worker-a got %d, worker-b got %d", res.TokenA, res.TokenB)
	}
	wantMsg := fmt.Sprintf("stale fencing token %d for lease %s/%s", res.TokenA, storyNamespace, storyLease)
	if res.RefusalCode != 409 || !strings.Contains(res.RefusalMessage, wantMsg) {
		t.Errorf("worker-a's late write: got %d %q, want 409 containing %q", res.RefusalCode, res.RefusalMessage, wantMsg)
	}
	if !strings.Contains(res.RefusalMessage, "admission webhook") {
		t.Errorf("the refusal did not come from the API server's admission webhook: %q", res.RefusalMessage)
	}
	if res.WebhookRefusals < 1 {
		t.Errorf("the fencing webhook logged no refusal")
	}

	// The Widget: A's entries, then only B's, and B's token and name on it.
	a, b := fmt.Sprintf("%s@%d", workerA, res.TokenA), fmt.Sprintf("%s@%d", workerB, res.TokenB)
	want := []string{a, a, b, b}
	if fmt.Sprint(res.Entries) != fmt.Sprint(want) {
		t.Errorf("widget entries = %v, want %v (A's two writes, then only B's)", res.Entries, want)
	}
	if res.Writer != workerB || res.ObjectToken != strconv.FormatInt(res.TokenB, 10) {
		t.Errorf("widget written by %q with token %q, want %q with %d", res.Writer, res.ObjectToken, workerB, res.TokenB)
	}
	for _, line := range []string{"REFUSED by the API server", "$ kubectl get fencedleases", "TakenOver", "[cleanup] done"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("the output lacks %q", line)
		}
	}

	// Nothing left behind: no worker, no child process, no temporary directory.
	if len(res.PIDs) != 2 {
		t.Errorf("expected two worker processes, got %v", res.PIDs)
	}
	for _, pid := range res.PIDs {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("worker process %d is still there (kill -0: %v)", pid, err)
		}
	}
	if kids := children(t); len(kids) > 0 {
		t.Errorf("child processes remain: %v", kids)
	}
	if _, err := os.Stat(res.TempDir); !os.IsNotExist(err) {
		t.Errorf("temporary directory %s remains (stat: %v)", res.TempDir, err)
	}
}

// children lists this process's child processes as "pid (comm) state".
func children(t *testing.T) []string {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	self := strconv.Itoa(os.Getpid())
	var kids []string
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // gone meanwhile
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		// After "pid (comm)": state ppid ...
		fields := strings.Fields(s[i+1:])
		if len(fields) > 1 && fields[1] == self {
			kids = append(kids, s[:i+1]+" "+fields[0])
		}
	}
	return kids
}
