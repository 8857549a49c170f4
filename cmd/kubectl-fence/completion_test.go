package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/test/testenv"
)

// complete runs cobra's `__complete args...` in-process, as
// kubectl_complete-fence does, and returns the choices and the directive.
func complete(t *testing.T, args ...string) ([]string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if err := runFence(context.Background(), &out, &errOut, append([]string{"__complete", "--kubeconfig", kubeconfig}, args...)...); err != nil {
		t.Fatalf("__complete %v: %v", args, err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var choices []string
	for _, l := range lines[:len(lines)-1] {
		name, _, _ := strings.Cut(l, "\t") // drop descriptions
		choices = append(choices, name)
	}
	return choices, lines[len(lines)-1]
}

// completionFixture is a namespace with two leases; alpha-lease is held by
// worker-a with worker-b and worker-c waiting.
func completionFixture(t *testing.T) string {
	t.Helper()
	ns := newNamespace(t)
	createLease(t, ns, "alpha-lease",
		coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: 15, Requests: requests("worker-a", "worker-b", "worker-c")},
		coordv1alpha1.FencedLeaseStatus{HolderIdentity: "worker-a", FencingToken: 3, ObservedGeneration: 1,
			Conditions: held(metav1.ConditionTrue, coordv1alpha1.ReasonGranted)})
	createLease(t, ns, "beta-lease", coordv1alpha1.FencedLeaseSpec{}, coordv1alpha1.FencedLeaseStatus{})
	return ns
}

func TestCompletion(t *testing.T) {
	ns := completionFixture(t)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		// Subcommands.
		{[]string{""}, []string{"check", "describe", "get", "handover", "help", "raise-floor", "release", "version"}},
		// Lease names, for every command that takes one, in -n's namespace.
		{[]string{"get", "-n", ns, ""}, []string{"alpha-lease", "beta-lease"}},
		{[]string{"get", "-n", ns, "alpha-lease", ""}, []string{"beta-lease"}},
		{[]string{"describe", "-n", ns, "al"}, []string{"alpha-lease"}},
		{[]string{"describe", "-n", ns, "alpha-lease", ""}, nil},
		{[]string{"release", "-n", ns, "b"}, []string{"beta-lease"}},
		{[]string{"raise-floor", "-n", ns, ""}, []string{"alpha-lease", "beta-lease"}},
		// Holders: --holder offers every request, the holder first; --to
		// only the waiting ones.
		{[]string{"release", "alpha-lease", "-n", ns, "--holder", ""}, []string{"worker-a", "worker-b", "worker-c"}},
		{[]string{"handover", "alpha-lease", "-n", ns, "--to", ""}, []string{"worker-b", "worker-c"}},
		{[]string{"handover", "alpha-lease", "-n", ns, "--to", "worker-c"}, []string{"worker-c"}},
		{[]string{"handover", "beta-lease", "-n", ns, "--to", ""}, nil},
		// Namespaces.
		{[]string{"get", "-n", ns}, []string{ns}},
		// Output formats.
		{[]string{"get", "-o", "n"}, []string{"name"}},
		{[]string{"describe", "x", "-o", ""}, []string{"json", "yaml"}},
		{[]string{"release", "x", "--dry-run="}, []string{"none", "server", "client"}},
	} {
		got, directive := complete(t, tc.args...)
		if !slices.Equal(got, tc.want) {
			t.Errorf("completing %q: %q, want %q", tc.args, got, tc.want)
		}
		if tc.args[0] != "" && directive != ":4" {
			t.Errorf("completing %q: directive %s, want :4 (no file completion)", tc.args, directive)
		}
	}
	formats, _ := complete(t, "get", "-o", "")
	for _, f := range []string{"wide", "json", "yaml", "name", "jsonpath", "go-template"} {
		if !slices.Contains(formats, f) {
			t.Errorf("-o completion %q lacks %s", formats, f)
		}
	}
}

// TestCompletionThroughKubectlInTmux types into a real bash under tmux, with
// kubectl's own completion script loaded, and reads what TAB completed: the
// path users take (kubectl -> kubectl_complete-fence -> kubectl-fence
// __complete).
func TestCompletionThroughKubectlInTmux(t *testing.T) {
	testenv.SkipIfShort(t)
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Fatalf("tmux is not installed, and this test needs it to drive bash: run 'make tmux' (apt-get install -y tmux), or 'make test-plugin', which does: %v", err)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash is not installed: %v", err)
	}
	// kubectl's bash completion script needs bash-completion's helpers.
	const bashCompletion = "/usr/share/bash-completion/bash_completion"
	if _, err := os.Stat(bashCompletion); err != nil {
		t.Fatalf("bash-completion is not installed (%v), and kubectl's bash completion needs it: run 'make tmux' (apt-get install -y tmux bash-completion)", err)
	}
	kubectl := filepath.Join(assets, "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Fatalf("kubectl is not in KUBEBUILDER_ASSETS (%s): %v", assets, err)
	}
	ns := completionFixture(t)

	// PATH: the plugin and its shim, as make install-plugin puts them, and kubectl.
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "kubectl-fence"), ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building kubectl-fence: %v\n%s", err, out)
	}
	shim, err := os.ReadFile("kubectl_complete-fence")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "kubectl_complete-fence"), shim, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(kubectl, filepath.Join(bin, "kubectl")); err != nil {
		t.Fatal(err)
	}

	socket := fmt.Sprintf("kubectl-fence-test-%d", os.Getpid())
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(tmux, append([]string{"-L", socket, "-f", "/dev/null"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	env := []string{"env", "-i", "HOME=" + t.TempDir(), "TERM=xterm", "PATH=" + bin + ":/usr/bin:/bin", "KUBECONFIG=" + kubeconfig, "PS1=$ ", bash, "--norc", "--noprofile"}
	run(append([]string{"new-session", "-d", "-s", "t", "-x", "250", "-y", "50"}, env...)...)
	t.Cleanup(func() { _ = exec.Command(tmux, "-L", socket, "kill-server").Run() })

	screen := func() string { return run("capture-pane", "-p", "-t", "t") }
	waitFor := func(what string, ok func(string) bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			s := screen()
			if ok(s) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("bash never showed %s; the screen:\n%s", what, s)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	clear := func() { run("send-keys", "-t", "t", "C-u", "C-l") }
	// tmux drops trailing spaces, so a completed word is a line that ends
	// with it.
	lineIs := func(want string) func(string) bool {
		return func(s string) bool {
			for _, l := range strings.Split(s, "\n") {
				if strings.TrimRight(l, " ") == "$ "+want {
					return true
				}
			}
			return false
		}
	}

	run("send-keys", "-t", "t", "source "+bashCompletion+" && source <(kubectl completion bash) && echo completion-loaded", "Enter")
	waitFor("kubectl's completion loaded", func(s string) bool { return strings.Contains(s, "\ncompletion-loaded") })
	clear()

	// A lease name completes in full.
	run("send-keys", "-t", "t", "kubectl fence get -n "+ns+" al", "Tab")
	waitFor("the lease name completed", lineIs("kubectl fence get -n "+ns+" alpha-lease"))
	clear()

	// Subcommands are listed on a double TAB.
	run("send-keys", "-t", "t", "kubectl fence ", "Tab", "Tab")
	waitFor("the subcommands", func(s string) bool {
		return strings.Contains(s, "describe") && strings.Contains(s, "raise-floor") && strings.Contains(s, "handover") && strings.Contains(s, "check")
	})
	clear()

	// --holder lists every request; --to completes the only waiter left with that prefix.
	run("send-keys", "-t", "t", "kubectl fence release alpha-lease -n "+ns+" --holder worker-", "Tab", "Tab")
	waitFor("the holders", func(s string) bool {
		return strings.Contains(s, "worker-a") && strings.Contains(s, "worker-b") && strings.Contains(s, "worker-c")
	})
	clear()
	run("send-keys", "-t", "t", "kubectl fence handover alpha-lease -n "+ns+" --to worker-", "Tab", "Tab")
	waitFor("the waiters for --to", func(s string) bool {
		return strings.Contains(s, "worker-b") && strings.Contains(s, "worker-c")
	})
	if s := screen(); strings.Contains(s, "worker-a") {
		t.Errorf("--to offered the holder worker-a:\n%s", s)
	}
	clear()

	// -n completes a namespace, -o a format.
	run("send-keys", "-t", "t", "kubectl fence get -n "+ns[:len(ns)-1], "Tab")
	waitFor("the namespace completed", lineIs("kubectl fence get -n "+ns))
	clear()
	run("send-keys", "-t", "t", "kubectl fence get -o nam", "Tab")
	waitFor("-o name completed", lineIs("kubectl fence get -o name"))
	clear()
}
