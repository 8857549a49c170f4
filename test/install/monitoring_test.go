package install

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestChartMonitoringMatchesConfigPrometheus: config/default with
// config/prometheus enabled (its [PROMETHEUS] line uncommented) renders the
// same ServiceMonitor and scraper identity as the chart with
// serviceMonitor.enabled=true.
func TestChartMonitoringMatchesConfigPrometheus(t *testing.T) {
	skipWithoutPinnedTools(t, "kustomize")
	tmp := t.TempDir()
	if b, err := exec.Command("cp", "-r", filepath.Join(root, "config"), tmp).CombinedOutput(); err != nil {
		t.Fatalf("copying config/: %v\n%s", err, b)
	}
	k := filepath.Join(tmp, "config", "default", "kustomization.yaml")
	b, err := os.ReadFile(k)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "\n#- ../prometheus\n") {
		t.Fatal("config/default/kustomization.yaml has no line #- ../prometheus to uncomment")
	}
	if err := os.WriteFile(k, []byte(strings.Replace(string(b), "\n#- ../prometheus\n", "\n- ../prometheus\n", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(root, "bin", "kustomize"), "build", filepath.Join(tmp, "config", "default")).Output()
	if err != nil {
		t.Fatalf("kustomize build config/default with ../prometheus: %v", err)
	}
	pick := func(m map[string]map[string]any) map[string]map[string]any {
		out := map[string]map[string]any{}
		for k, v := range m {
			if strings.HasPrefix(k, "ServiceMonitor ") || strings.Contains(k, "metrics-scraper") {
				out[k] = v
			}
		}
		return out
	}
	want := pick(normalize(t, out))
	got := pick(normalize(t, helmTemplate(t, "--set", "serviceMonitor.enabled=true")))
	if len(want) != 4 {
		t.Errorf("config/prometheus renders %d monitoring objects, want 4 (ServiceMonitor, ServiceAccount, Secret, ClusterRoleBinding): %v", len(want), keysOf(want))
	}
	compareObjects(t, "config/default+prometheus", want, "dist/chart (serviceMonitor.enabled=true)", got)
}
