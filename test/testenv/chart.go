package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// ChartWithoutKubeVersion copies root's dist/chart into dir without its
// kubeVersion and returns the copy's path: the test's kube-apiserver, built
// from source, reports v0.0.0-master, which the chart's kubeVersion (>=1.30)
// refuses, and helm install, unlike helm template, takes no --kube-version.
// It fails t if the chart has no kubeVersion line to drop.
func ChartWithoutKubeVersion(t testing.TB, root, dir string) string {
	t.Helper()
	dst := filepath.Join(dir, "chart")
	if b, err := exec.Command("cp", "-r", filepath.Join(root, "dist", "chart"), dst).CombinedOutput(); err != nil {
		t.Fatalf("copying the chart: %v\n%s", err, b)
	}
	p := filepath.Join(dst, "Chart.yaml")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "kubeVersion:") {
			kept = append(kept, l)
		}
	}
	if len(kept) == len(strings.Split(string(b), "\n")) {
		t.Fatal("dist/chart/Chart.yaml has no kubeVersion line to drop")
	}
	if err := os.WriteFile(p, []byte(strings.Join(kept, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	return dst
}
