package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"

	"sigs.k8s.io/yaml"

	"github.com/kubefence/kubefence/hack/krew"
)

// TestKrewManifest fills the template hack/krew/fence.yaml as make release
// (hack/release) does, with a sample version, URLs and checksums, and checks
// the manifest krew-index would receive. (test/install TestMakeRelease checks
// a real release's manifest against its archives.)
func TestKrewManifest(t *testing.T) {
	path := filepath.Join("..", "..", "hack", "krew", "fence.yaml")
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const downloadURL = "https://example.com/kubefence/releases/download/v0.1.0"
	sums := map[string]string{}
	for _, p := range []string{"linux_amd64", "linux_arm64", "darwin_amd64", "darwin_arm64"} {
		sums[p] = fmt.Sprintf("%064x", len(sums)+1)
	}
	tpl, err := template.New("fence.yaml").Option("missingkey=error").Parse(string(src))
	if err != nil {
		t.Fatalf("%s is not a Go template: %v", path, err)
	}
	var filled bytes.Buffer
	if err := tpl.Execute(&filled, map[string]any{"Version": "v0.1.0", "DownloadURL": downloadURL, "Homepage": "https://example.com/kubefence", "SHA256": sums}); err != nil {
		t.Fatalf("filling %s as hack/release does: %v", path, err)
	}
	data := filled.Bytes()
	var p krew.Plugin
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		t.Fatalf("%s is not a krew Plugin manifest: %v", path, err)
	}
	if p.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || p.Kind != "Plugin" {
		t.Errorf("apiVersion/kind = %s %s, want krew.googlecontainertools.github.com/v1alpha2 Plugin", p.APIVersion, p.Kind)
	}
	// The name is what users type after kubectl, and the binary is kubectl-<name>.
	if p.Metadata.Name != "fence" {
		t.Errorf("metadata.name = %q, want fence (kubectl fence)", p.Metadata.Name)
	}
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`).MatchString(p.Spec.Version) {
		t.Errorf("spec.version %q is not a semver with a leading v", p.Spec.Version)
	}
	if !strings.HasPrefix(p.Spec.Homepage, "https://") {
		t.Errorf("spec.homepage %q is not an https URL", p.Spec.Homepage)
	}
	if p.Spec.ShortDescription == "" || len(p.Spec.ShortDescription) > 50 || strings.Contains(p.Spec.ShortDescription, "\n") {
		t.Errorf("spec.shortDescription %q must be one line of at most 50 characters", p.Spec.ShortDescription)
	}
	if p.Spec.Description == "" {
		t.Error("spec.description is empty")
	}
	// krew puts only bin on PATH (kubernetes-sigs/krew#812): the caveats must
	// say how to link the completion shim of this version.
	if !strings.Contains(p.Spec.Caveats, "store/fence/"+p.Spec.Version+"/kubectl_complete-fence") {
		t.Errorf("spec.caveats do not say how to link kubectl_complete-fence of %s:\n%s", p.Spec.Version, p.Spec.Caveats)
	}

	want := []string{"darwin/amd64", "darwin/arm64", "linux/amd64", "linux/arm64"}
	var got []string
	for _, pl := range p.Spec.Platforms {
		osName, arch := pl.Selector.MatchLabels["os"], pl.Selector.MatchLabels["arch"]
		platform := osName + "/" + arch
		got = append(got, platform)
		exe := ""
		if osName == "windows" {
			exe = ".exe"
		}
		if pl.Bin != "kubectl-fence"+exe {
			t.Errorf("%s: bin = %q, want kubectl-fence%s", platform, pl.Bin, exe)
		}
		if pl.URI != downloadURL+"/kubectl-fence_"+p.Spec.Version+"_"+osName+"_"+arch+".tar.gz" {
			t.Errorf("%s: uri %q is not this version's %s archive", platform, pl.URI, platform)
		}
		if pl.SHA256 != sums[osName+"_"+arch] {
			t.Errorf("%s: sha256 %q is not the %s archive's", platform, pl.SHA256, platform)
		}
		var from []string
		for _, f := range pl.Files {
			from = append(from, f.From)
			if f.To != "." {
				t.Errorf("%s: file %s goes to %q, want the plugin's root", platform, f.From, f.To)
			}
		}
		if !slices.Contains(from, pl.Bin) || !slices.Contains(from, "LICENSE") {
			t.Errorf("%s: files %v must include the binary %s and LICENSE", platform, from, pl.Bin)
		}
		// kubectl's plugin completion runs a kubectl_complete-fence from PATH;
		// krew links it next to kubectl-fence. The shim is a shell script.
		if osName != "windows" && !slices.Contains(from, "kubectl_complete-fence") {
			t.Errorf("%s: files %v lack the completion shim kubectl_complete-fence", platform, from)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("platforms = %v, want %v", got, want)
	}
}
