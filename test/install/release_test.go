package install

// The release path a maintainer runs (docs/operations.md#releasing) and the
// image rules (docs/operations.md#image): make release, make build-installer,
// helm package, and the errors when no image is named.

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	sigsyaml "sigs.k8s.io/yaml"

	"github.com/kubefence/kubefence/hack/krew"
)

// makeCmd runs make in the repository with args; it returns the combined
// output and the error.
func makeCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command("make", append([]string{"--no-print-directory", "-C", root}, args...)...).CombinedOutput()
	return string(out), err
}

// TestMakeRefusesAMissingImage: every target that names the manager image
// stops, before running anything, with an error naming IMG and IMAGE_REPO;
// make release names VERSION, IMAGE_REPO and PROJECT_URL. config/ alone names
// the unpullable image-not-set.invalid/kubefence.
func TestMakeRefusesAMissingImage(t *testing.T) {
	for _, target := range []string{"deploy", "build-installer", "docker-build", "docker-push", "docker-buildx"} {
		out, err := makeCmd(t, "-n", target, "IMG=", "IMAGE_REPO=")
		if err == nil || !strings.Contains(out, "IMG is not set") || !strings.Contains(out, "IMAGE_REPO=") || strings.Contains(out, "controller-gen") {
			t.Errorf("make -n %s without an image: err %v, want an error naming IMG and IMAGE_REPO before any command:\n%s", target, err, out)
		}
	}
	if out, err := makeCmd(t, "-n", "deploy", "IMAGE_REPO=registry.example.com/kubefence", "VERSION=1.2.3"); err != nil || !strings.Contains(out, "set image image-not-set.invalid/kubefence=registry.example.com/kubefence:v1.2.3") {
		t.Errorf("make -n deploy IMAGE_REPO=... VERSION=1.2.3: %v, want the image registry.example.com/kubefence:v1.2.3 set in the overlay:\n%s", err, out)
	}
	good := []string{"IMAGE_REPO=registry.example.com/kubefence", "PROJECT_URL=https://example.com/kubefence"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{append([]string{"VERSION=v0.1.0"}, good...), "VERSION=v0.1.0 is not a release version: expected MAJOR.MINOR.PATCH without the v"},
		{append([]string{"VERSION=0.1"}, good...), "VERSION=0.1 is not a release version"},
		{[]string{"VERSION=0.1.0", "PROJECT_URL=https://example.com/kubefence", "IMAGE_REPO="}, "IMAGE_REPO is not set"},
		{[]string{"VERSION=0.1.0", "IMAGE_REPO=registry.example.com/kubefence", "PROJECT_URL="}, "PROJECT_URL is not set"},
	} {
		out, err := makeCmd(t, append([]string{"-n", "release"}, c.args...)...)
		if err == nil || !strings.Contains(out, c.want) {
			t.Errorf("make -n release %v: err %v, want %q:\n%s", c.args, err, c.want, out)
		}
	}
	if img := deploymentImage(t, buildDir(t, "config/default")); img != "image-not-set.invalid/kubefence:unset" {
		t.Errorf("kustomize build config/default names %q, want the unpullable placeholder image-not-set.invalid/kubefence:unset", img)
	}
}

// TestMakeBuildInstaller runs make build-installer into a temporary file.
func TestMakeBuildInstaller(t *testing.T) {
	if testing.Short() {
		t.Skip("runs make build-installer (controller-gen); skipped by -short (make test-unit)")
	}
	manager, err := os.ReadFile(filepath.Join(root, "config", "manager", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "install.yaml")
	if out, err := makeCmd(t, "build-installer", "IMAGE_REPO=registry.example.com/kubefence", "VERSION=1.2.3", "INSTALL_YAML="+file); err != nil {
		t.Fatalf("make build-installer: %v\n%s", err, out)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if img := deploymentImage(t, b); img != "registry.example.com/kubefence:v1.2.3" {
		t.Errorf("make build-installer IMAGE_REPO=registry.example.com/kubefence VERSION=1.2.3 names %q, want registry.example.com/kubefence:v1.2.3", img)
	}
	if after, _ := os.ReadFile(filepath.Join(root, "config", "manager", "kustomization.yaml")); string(after) != string(manager) {
		t.Error("make build-installer edited config/manager/kustomization.yaml; it must set the image in a temporary overlay")
	}
}

// TestHelmPackage packages dist/chart as helm package does and renders the
// package: without image.repository it refuses with a message naming it; with
// it, the image tag is the chart's appVersion.
func TestHelmPackage(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command(helmBin(t), "package", filepath.Join(root, "dist", "chart"), "--destination", dir).CombinedOutput(); err != nil {
		t.Fatalf("helm package dist/chart: %v\n%s", err, out)
	}
	var chart struct{ Version, AppVersion string }
	b, err := os.ReadFile(filepath.Join(root, "dist", "chart", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sigsyaml.Unmarshal(b, &chart); err != nil {
		t.Fatal(err)
	}
	tgz := filepath.Join(dir, "kubefence-"+chart.Version+".tgz")
	out, err := exec.Command(helmBin(t), "template", "kubefence", tgz, "--kube-version", kubeVersion, "--namespace", releaseNamespace).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "image.repository is not set") {
		t.Errorf("helm template of the package without image.repository: err %v, want the required error naming image.repository:\n%s", err, out)
	}
	out, err = exec.Command(helmBin(t), "template", "kubefence", tgz, "--kube-version", kubeVersion, "--namespace", releaseNamespace, "--set", "image.repository="+testImageRepo).Output()
	if err != nil {
		t.Fatalf("helm template of the package: %v", err)
	}
	if img := deploymentImage(t, out); img != testImageRepo+":"+chart.AppVersion {
		t.Errorf("the packaged chart with an empty image.tag names %q, want %s:%s (appVersion)", img, testImageRepo, chart.AppVersion)
	}
}

// TestMakeRelease runs make release VERSION=0.1.0 into a temporary folder
// and checks every asset: the install manifests name the release's image,
// the chart's versions and default image, each krew archive's content and
// its sha256 in the krew manifest and in checksums.txt, the release notes.
func TestMakeRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles kubectl-fence for 4 platforms; skipped by -short (make test-unit)")
	}
	const (
		repo    = "registry.example.com/kubefence"
		project = "https://example.com/kubefence"
		image   = repo + ":v0.1.0"
	)
	dir := filepath.Join(t.TempDir(), "v0.1.0")
	start := time.Now()
	out, err := makeCmd(t, "release", "VERSION=0.1.0", "IMAGE_REPO="+repo, "PROJECT_URL="+project, "RELEASE_DIR="+dir)
	if err != nil {
		t.Fatalf("make release: %v\n%s", err, out)
	}
	t.Logf("make release VERSION=0.1.0 took %s", time.Since(start).Round(time.Second))

	archives := map[string]string{} // os_arch -> file name
	for _, p := range []string{"linux_amd64", "linux_arm64", "darwin_amd64", "darwin_arm64"} {
		archives[p] = "kubectl-fence_v0.1.0_" + p + ".tar.gz"
	}
	want := []string{"checksums.txt", "install-policy.yaml", "install.yaml", "krew-fence.yaml", "kubefence-0.1.0.tgz", "release-notes.md"}
	for _, a := range archives {
		want = append(want, a)
	}
	slices.Sort(want)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if !slices.Equal(got, want) {
		t.Fatalf("release folder holds %v, want %v", got, want)
	}
	sum := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		s := sha256.Sum256(b)
		return hex.EncodeToString(s[:])
	}

	// checksums.txt lists every other asset with its sha256.
	f, err := os.Open(filepath.Join(dir, "checksums.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	listed := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		h, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok || h != sum(name) {
			t.Errorf("checksums.txt line %q: not the sha256 of %s (%s)", sc.Text(), name, sum(name))
		}
		listed[name] = true
	}
	for _, n := range want {
		if n != "checksums.txt" && !listed[n] {
			t.Errorf("checksums.txt does not list %s", n)
		}
	}

	// The krew manifest points at each archive with its real sha256.
	var krew krew.Plugin
	b, err := os.ReadFile(filepath.Join(dir, "krew-fence.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sigsyaml.UnmarshalStrict(b, &krew); err != nil {
		t.Fatalf("krew-fence.yaml: %v\n%s", err, b)
	}
	if krew.Spec.Version != "v0.1.0" || krew.Spec.Homepage != project {
		t.Errorf("krew-fence.yaml version %q, homepage %q; want v0.1.0 and %s", krew.Spec.Version, krew.Spec.Homepage, project)
	}
	if len(krew.Spec.Platforms) != len(archives) {
		t.Errorf("krew-fence.yaml has %d platforms, want %d", len(krew.Spec.Platforms), len(archives))
	}
	for _, p := range krew.Spec.Platforms {
		key := p.Selector.MatchLabels["os"] + "_" + p.Selector.MatchLabels["arch"]
		name := archives[key]
		if name == "" || p.URI != project+"/releases/download/v0.1.0/"+name {
			t.Errorf("krew platform %s: uri %q, want %s/releases/download/v0.1.0/%s", key, p.URI, project, name)
			continue
		}
		if p.SHA256 != sum(name) {
			t.Errorf("krew platform %s: sha256 %s, but %s has %s", key, p.SHA256, name, sum(name))
		}
	}

	// Each archive holds the plugin, the completion shim and LICENSE; this
	// machine's plugin reports the release's version.
	for key, name := range archives {
		files := untar(t, filepath.Join(dir, name))
		var names []string
		for n := range files {
			names = append(names, n)
		}
		slices.Sort(names)
		if strings.Join(names, " ") != "LICENSE kubectl-fence kubectl_complete-fence" {
			t.Errorf("%s holds %v, want LICENSE kubectl-fence kubectl_complete-fence", name, names)
		}
		if key != runtime.GOOS+"_"+runtime.GOARCH {
			continue
		}
		bin := filepath.Join(t.TempDir(), "kubectl-fence")
		if err := os.WriteFile(bin, files["kubectl-fence"], 0o755); err != nil {
			t.Fatal(err)
		}
		v, err := exec.Command(bin, "version", "--client").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(v), "Client Version: v0.1.0 (commit ") {
			t.Errorf("%s: kubectl-fence version --client = %q (%v), want Client Version: v0.1.0 (commit ...", name, v, err)
		}
	}

	// The install manifests name the release's image.
	for _, name := range []string{"install.yaml", "install-policy.yaml"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if img := deploymentImage(t, b); img != image {
			t.Errorf("%s names the image %q, want %s", name, img, image)
		}
		if policy := strings.Contains(string(b), "--enforcement=policy"); policy != (name == "install-policy.yaml") {
			t.Errorf("%s: --enforcement=policy present = %v", name, policy)
		}
	}

	// The chart: version 0.1.0, appVersion v0.1.0, and the release's image
	// without any value set.
	tgz := filepath.Join(dir, "kubefence-0.1.0.tgz")
	show, err := exec.Command(helmBin(t), "show", "chart", tgz).Output()
	if err != nil {
		t.Fatalf("helm show chart: %v", err)
	}
	var chart struct {
		Version, AppVersion, Home string
	}
	if err := sigsyaml.Unmarshal(show, &chart); err != nil {
		t.Fatal(err)
	}
	if chart.Version != "0.1.0" || chart.AppVersion != "v0.1.0" || chart.Home != project {
		t.Errorf("packaged chart: version %q, appVersion %q, home %q; want 0.1.0, v0.1.0, %s", chart.Version, chart.AppVersion, chart.Home, project)
	}
	rendered, err := exec.Command(helmBin(t), "template", "kubefence", tgz, "--kube-version", kubeVersion, "--namespace", releaseNamespace).Output()
	if err != nil {
		t.Fatalf("helm template of the released chart with no values: %v", err)
	}
	if img := deploymentImage(t, rendered); img != image {
		t.Errorf("the released chart names %q by default, want %s", img, image)
	}

	if notes, err := os.ReadFile(filepath.Join(dir, "release-notes.md")); err != nil || len(strings.TrimSpace(string(notes))) == 0 || strings.HasPrefix(string(notes), "## ") {
		t.Errorf("release-notes.md: %v, want the body of a CHANGELOG section:\n%.300s", err, notes)
	}
}

// untar reads a .tar.gz into its files by name.
func untar(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	tr := tar.NewReader(gz)
	files := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if h.Name != "LICENSE" && h.FileInfo().Mode().Perm()&0o111 == 0 {
			t.Errorf("%s: %s is not executable (%v)", path, h.Name, h.FileInfo().Mode())
		}
		files[h.Name] = b
	}
}

// deploymentImage is the image of the manager container of the manager
// Deployment a manifest holds.
func deploymentImage(t *testing.T, manifest []byte) string {
	t.Helper()
	for _, o := range documents(t, manifest) {
		if o["kind"] != "Deployment" {
			continue
		}
		spec := o["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		for _, c := range spec["containers"].([]any) {
			if c := c.(map[string]any); c["name"] == "manager" {
				img, _ := c["image"].(string)
				return img
			}
		}
	}
	t.Fatal("no manager Deployment in the manifest")
	return ""
}
