// Command release writes the release assets `make release` does not get from
// kustomize: the packaged Helm chart, the kubectl-fence archives for krew, the
// krew manifest with their real sha256 values, the release notes from
// CHANGELOG.md, and checksums.txt over every asset of the folder. make release
// runs it after writing install.yaml and install-policy.yaml into -out
// (docs/operations.md#releasing; test/install TestMakeRelease checks the result).
package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"text/template"
	"time"
)

// semver is a release version without its v: MAJOR.MINOR.PATCH with an
// optional pre-release.
var semver = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

// Platforms are the krew archives' GOOS/GOARCH (the completion shim is a
// shell script, so no windows archive).
var Platforms = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"}

type options struct {
	version, out, downloadURL, homepage, imageRepo string
	chart, helm, krewTemplate, license, completion string
	changelog, ldflags, date                       string
}

func main() {
	var o options
	flag.StringVar(&o.version, "version", "", "The release, MAJOR.MINOR.PATCH without the v (required).")
	flag.StringVar(&o.out, "out", "", "The release folder (required); install.yaml and install-policy.yaml are already there.")
	flag.StringVar(&o.downloadURL, "download-url", "", "Where the folder's files are downloadable, for the krew manifest's uris (required).")
	flag.StringVar(&o.homepage, "homepage", "", "The project's home page, for the krew manifest and the chart (required).")
	flag.StringVar(&o.imageRepo, "image-repo", "", "The manager image's repository, set as the packaged chart's image.repository (required).")
	flag.StringVar(&o.chart, "chart", "dist/chart", "The chart to package.")
	flag.StringVar(&o.helm, "helm", "bin/helm", "The helm binary.")
	flag.StringVar(&o.krewTemplate, "krew-template", "hack/krew/fence.yaml", "The krew manifest template.")
	flag.StringVar(&o.license, "license", "LICENSE", "The license put into each archive.")
	flag.StringVar(&o.completion, "completion", "cmd/kubectl-fence/kubectl_complete-fence", "The completion shim put into each archive.")
	flag.StringVar(&o.changelog, "changelog", "CHANGELOG.md", "The changelog the release notes come from.")
	flag.StringVar(&o.ldflags, "ldflags", "", "The go build -ldflags of the plugin (the Makefile's version stamp).")
	flag.StringVar(&o.date, "date", "", "The commit's time (RFC 3339): the archives' file times, so that one commit gives the same archives.")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if !semver.MatchString(o.version) {
		return fmt.Errorf("-version %q is not a release version: expected MAJOR.MINOR.PATCH without the v (e.g. 0.1.0, or 0.1.0-rc.1)", o.version)
	}
	for name, v := range map[string]string{"-out": o.out, "-download-url": o.downloadURL, "-homepage": o.homepage, "-image-repo": o.imageRepo} {
		if v == "" {
			return fmt.Errorf("%s is required", name)
		}
	}
	tag := "v" + o.version
	mtime := time.Unix(0, 0).UTC()
	if t, err := time.Parse(time.RFC3339, o.date); err == nil {
		mtime = t
	}
	if err := packageChart(o, tag); err != nil {
		return err
	}
	sums := map[string]string{}
	for _, p := range Platforms {
		goos, goarch, _ := strings.Cut(p, "/")
		name, sum, err := pluginArchive(o, tag, goos, goarch, mtime)
		if err != nil {
			return err
		}
		fmt.Printf("wrote %s\n", name)
		sums[goos+"_"+goarch] = sum
	}
	if err := krewManifest(o, tag, sums); err != nil {
		return err
	}
	if err := releaseNotes(o); err != nil {
		return err
	}
	return checksums(o.out)
}

// packageChart packages a copy of the chart whose image.repository is the
// release's and whose home is the project's, as kubefence-<version>.tgz with
// appVersion v<version> (the image tag it defaults to).
func packageChart(o options, tag string) error {
	tmp, err := os.MkdirTemp("", "kubefence-chart-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	dir := filepath.Join(tmp, "kubefence")
	if err := os.CopyFS(dir, os.DirFS(o.chart)); err != nil {
		return fmt.Errorf("copying %s: %w", o.chart, err)
	}
	values := filepath.Join(dir, "values.yaml")
	b, err := os.ReadFile(values)
	if err != nil {
		return err
	}
	const unset = "\n  repository: \"\"\n"
	if bytes.Count(b, []byte(unset)) != 1 {
		return fmt.Errorf("%s/values.yaml must have exactly one line `  repository: \"\"` (image.repository) for the release to set", o.chart)
	}
	b = bytes.Replace(b, []byte(unset), []byte("\n  repository: "+o.imageRepo+"\n"), 1)
	if err := os.WriteFile(values, b, 0o644); err != nil {
		return err
	}
	chartYAML := filepath.Join(dir, "Chart.yaml")
	c, err := os.ReadFile(chartYAML)
	if err != nil {
		return err
	}
	c = append(c, []byte(fmt.Sprintf("home: %s\nsources:\n- %s\n", o.homepage, o.homepage))...)
	if err := os.WriteFile(chartYAML, c, 0o644); err != nil {
		return err
	}
	cmd := exec.Command(o.helm, "package", dir, "--version", o.version, "--app-version", tag, "--destination", o.out)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("helm package: %w", err)
	}
	return nil
}

// pluginArchive cross-compiles kubectl-fence and writes
// kubectl-fence_<tag>_<os>_<arch>.tar.gz holding it, the completion shim and
// LICENSE, with fixed owners and times; it returns the name and sha256.
func pluginArchive(o options, tag, goos, goarch string, mtime time.Time) (string, string, error) {
	tmp, err := os.MkdirTemp("", "kubectl-fence-")
	if err != nil {
		return "", "", err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	bin := filepath.Join(tmp, "kubectl-fence")
	// -s -w: no symbol table or DWARF, as kubectl's release binaries.
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", strings.TrimSpace(o.ldflags+" -s -w"), "-o", bin, "./cmd/kubectl-fence")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", "", fmt.Errorf("building kubectl-fence for %s/%s: %w", goos, goarch, err)
	}
	name := fmt.Sprintf("kubectl-fence_%s_%s_%s.tar.gz", tag, goos, goarch)
	var buf bytes.Buffer
	gz, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	tw := tar.NewWriter(gz)
	for _, f := range []struct {
		src, name string
		mode      int64
	}{{bin, "kubectl-fence", 0o755}, {o.completion, "kubectl_complete-fence", 0o755}, {o.license, "LICENSE", 0o644}} {
		b, err := os.ReadFile(f.src)
		if err != nil {
			return "", "", err
		}
		hdr := &tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(b)), ModTime: mtime, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return "", "", err
		}
		if _, err := tw.Write(b); err != nil {
			return "", "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", "", err
	}
	if err := gz.Close(); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(filepath.Join(o.out, name), buf.Bytes(), 0o644); err != nil {
		return "", "", err
	}
	sum := sha256.Sum256(buf.Bytes())
	return name, hex.EncodeToString(sum[:]), nil
}

// KrewData is what hack/krew/fence.yaml's template reads.
type KrewData struct {
	Version, DownloadURL, Homepage string
	// SHA256 is each archive's checksum by <os>_<arch>.
	SHA256 map[string]string
}

// krewManifest fills the krew template into krew-fence.yaml.
func krewManifest(o options, tag string, sums map[string]string) error {
	src, err := os.ReadFile(o.krewTemplate)
	if err != nil {
		return err
	}
	tpl, err := template.New(filepath.Base(o.krewTemplate)).Option("missingkey=error").Parse(string(src))
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := tpl.Execute(&buf, KrewData{Version: tag, DownloadURL: strings.TrimSuffix(o.downloadURL, "/"), Homepage: o.homepage, SHA256: sums}); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(o.out, "krew-fence.yaml"), buf.Bytes(), 0o644)
}

// releaseNotes writes release-notes.md: CHANGELOG.md's section
// "## [<version>]", or, when there is none yet, "## [Unreleased]" (with a
// warning: rename it before tagging).
func releaseNotes(o options) error {
	b, err := os.ReadFile(o.changelog)
	if err != nil {
		return err
	}
	notes, ok := section(string(b), o.version)
	if !ok {
		notes, ok = section(string(b), "Unreleased")
		if !ok {
			return fmt.Errorf("%s has no section ## [%s] nor ## [Unreleased] for the release notes", o.changelog, o.version)
		}
		fmt.Fprintf(os.Stderr, "release: warning: %s has no section ## [%s]; the notes are its [Unreleased] section (rename it to [%s] - <date> before tagging v%s)\n", o.changelog, o.version, o.version, o.version)
	}
	return os.WriteFile(filepath.Join(o.out, "release-notes.md"), []byte(notes), 0o644)
}

// section is the body of the Keep a Changelog section "## [name]" (up to the
// next "## " heading or the link definitions at the end).
func section(changelog, name string) (string, bool) {
	var out []string
	in, found := false, false
	sc := bufio.NewScanner(strings.NewReader(changelog))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	linkDef := regexp.MustCompile(`^\[[^\]]+\]: `)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "## ") {
			if in {
				break
			}
			h := strings.TrimPrefix(l, "## ")
			if strings.HasPrefix(h, "["+name+"]") {
				in, found = true, true
			}
			continue
		}
		if in && linkDef.MatchString(l) {
			break
		}
		if in {
			out = append(out, l)
		}
	}
	return strings.TrimSpace(strings.Join(out, "\n")) + "\n", found
}

// checksums writes checksums.txt: the sha256 of every other file of dir, in
// sha256sum's format (sha256sum -c checksums.txt verifies them).
func checksums(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var names []string
	for _, e := range entries {
		if e.Type().IsRegular() && e.Name() != "checksums.txt" {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	var buf bytes.Buffer
	for _, n := range names {
		f, err := os.Open(filepath.Join(dir, n))
		if err != nil {
			return err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		_ = f.Close()
		if err != nil {
			return err
		}
		fmt.Fprintf(&buf, "%s  %s\n", hex.EncodeToString(h.Sum(nil)), n)
	}
	return os.WriteFile(filepath.Join(dir, "checksums.txt"), buf.Bytes(), 0o644)
}
