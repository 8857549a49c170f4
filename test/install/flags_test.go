package install

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestManagerFlagsDocumented: every flag of the manager binary (its own,
// operator.Options.BindFlags's and zap's) is named in docs/, so a flag added,
// renamed or removed in code without its documentation fails here.
func TestManagerFlagsDocumented(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the manager; run by make test")
	}
	bin := filepath.Join(t.TempDir(), "manager")
	if out, err := exec.Command("go", "build", "-o", bin, filepath.Join(root, "cmd")).CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd: %v\n%s", err, out)
	}
	help, _ := exec.Command(bin, "--help").CombinedOutput() // --help exits 0 or 2 depending on the flag package
	flags := regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`).FindAllStringSubmatch(string(help), -1)
	if len(flags) < 20 {
		t.Fatalf("found %d flags in the manager's --help; the pattern no longer matches its output:\n%s", len(flags), help)
	}
	var docs strings.Builder
	entries, err := os.ReadDir(filepath.Join(root, "docs"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(root, "docs", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		docs.Write(b)
	}
	for _, f := range flags {
		if f[1] == "kubeconfig" { // controller-runtime's, the usual client flag
			continue
		}
		if !regexp.MustCompile("--" + regexp.QuoteMeta(f[1]) + `\b`).MatchString(docs.String()) {
			t.Errorf("the manager's flag --%s is named nowhere in docs/", f[1])
		}
	}
}
