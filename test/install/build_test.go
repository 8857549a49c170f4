package install

// The commands a user runs to build the binaries, run by a test: what no test
// runs breaks unnoticed (cmd/main.go alone stopped compiling once cmd/ had a
// second file, and make build, make run and the Dockerfile all built the file).

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// TestMakeBuildAndRunCommands runs the go commands of `make build` and `make
// run` as make prints them (make -n), each writing its binary into a
// temporary directory instead of bin/ (go run becomes the go build it starts
// with), and checks that each binary reports the VERSION, COMMIT and DATE
// make stamped (pkg/version): the manager with --version, the plugin with
// version --client.
func TestMakeBuildAndRunCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries; skipped by -short (make test-unit)")
	}
	const stamp = "VERSION=9.8.7 COMMIT=0123456789abcdef0123456789abcdef01234567 DATE=2026-12-01T00:00:00Z"
	out, err := exec.Command("make", append([]string{"--no-print-directory", "-n", "-C", root, "build", "run"}, strings.Fields(stamp)...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("make -n build run: %v\n%s", err, out)
	}
	dir := t.TempDir()
	output := regexp.MustCompile(`-o (\S+)`)
	var builds, runs int
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		var bin string
		switch {
		case strings.HasPrefix(line, "go build "):
			builds++
			m := output.FindStringSubmatch(line)
			if m == nil {
				t.Fatalf("%q writes no -o binary", line)
			}
			bin = filepath.Join(dir, filepath.Base(m[1]))
			line = output.ReplaceAllLiteralString(line, "-o "+bin)
		case strings.HasPrefix(line, "go run "):
			runs++
			bin = filepath.Join(dir, "run")
			line = "go build -o " + bin + " " + strings.TrimPrefix(line, "go run ")
		default:
			continue
		}
		cmd := exec.Command("sh", "-c", line)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%q: %v\n%s", sc.Text(), err, b)
			continue
		}
		args := []string{"--version"}
		if filepath.Base(bin) == "kubectl-fence" {
			args = []string{"version", "--client"}
		}
		b, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Errorf("%s %v: %v\n%s", bin, args, err, b)
			continue
		}
		for _, want := range []string{"v9.8.7", "0123456789abcdef0123456789abcdef01234567", "2026-12-01T00:00:00Z"} {
			if !strings.Contains(string(b), want) {
				t.Errorf("%s %v (built by %q) = %q, want the stamp %s", filepath.Base(bin), args, sc.Text(), b, want)
			}
		}
	}
	if builds != 2 || runs != 1 {
		t.Fatalf("make -n build run printed %d go build and %d go run commands, want 2 and 1 (the manager and the plugin; the manager):\n%s", builds, runs, out)
	}
}

// TestDockerfileBuildStage runs the Dockerfile's builder stage on the host as
// docker would: a workspace holding what its COPY lines copy, filtered by
// .dockerignore, then its RUN lines with the stage's ARGs set for this
// machine's platform and its other ARGs at their defaults unless given as
// build args (VERSION, COMMIT, DATE here, as make docker-build passes them).
// The built manager must report that stamp with --version. (No container
// engine runs here; the final stage only copies this binary into distroless.)
func TestDockerfileBuildStage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the manager; skipped by -short (make test-unit)")
	}
	stage := builderStage(t)
	ignore := dockerignore(t)
	ws := t.TempDir()
	buildArgs := map[string]string{"TARGETOS": "linux", "TARGETARCH": runtime.GOARCH,
		"VERSION": "9.8.7", "COMMIT": "0123456789abcdef0123456789abcdef01234567", "DATE": "2026-12-01T00:00:00Z"}
	env := os.Environ()
	var copies, runs int
	for _, ins := range stage {
		switch ins.op {
		case "ARG":
			name, def, _ := strings.Cut(ins.args[0], "=")
			if v, ok := buildArgs[name]; ok {
				def = v
			}
			env = append(env, name+"="+def)
		case "COPY":
			if len(ins.args) != 2 || strings.HasPrefix(ins.args[0], "--") {
				t.Fatalf("COPY %v: the test copies one source to one destination; teach it this form", ins.args)
			}
			copies++
			copyFiltered(t, ignore, ins.args[0], filepath.Join(ws, ins.args[1]))
		case "RUN":
			runs++
			cmd := exec.Command("sh", "-c", strings.Join(ins.args, " "))
			cmd.Dir = ws
			cmd.Env = env
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("RUN %s: %v\n%s", strings.Join(ins.args, " "), err, b)
			}
		}
	}
	if copies == 0 || runs == 0 {
		t.Fatalf("the builder stage has %d COPY and %d RUN lines; the test expects both", copies, runs)
	}
	b, err := exec.Command(filepath.Join(ws, "manager"), "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("the built /workspace/manager --version: %v\n%s", err, b)
	}
	for _, want := range []string{"v9.8.7", buildArgs["COMMIT"], buildArgs["DATE"]} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the built /workspace/manager --version = %q, want the build args' %s", b, want)
		}
	}
	// The chart's helm test runs /kubectl-fence from the manager image.
	if b, err := exec.Command(filepath.Join(ws, "kubectl-fence"), "check", "--help").CombinedOutput(); err != nil || !strings.Contains(string(b), "--wait") {
		t.Fatalf("the built /workspace/kubectl-fence check --help: %v\n%s", err, b)
	}
	final, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(final), "COPY --from=builder /workspace/kubectl-fence .") {
		t.Error("the Dockerfile's final stage does not copy kubectl-fence, which the chart's helm test Pod runs")
	}
}

type instruction struct {
	op   string
	args []string
}

// builderStage is the instructions of the Dockerfile's first stage (FROM ...
// AS builder up to the next FROM). A continuation line is refused: tools that
// lift the build line from the Dockerfile read one line (a continued `go
// build -trimpath \` ran as `go build` in / and failed: no Go files in /).
func builderStage(t *testing.T) []instruction {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var ins []instruction
	froms := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			t.Fatalf("Dockerfile line %q continues on the next line: keep each instruction on one line", l)
		}
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		if f[0] == "FROM" {
			froms++
			if froms == 2 {
				break
			}
			if !strings.EqualFold(f[len(f)-1], "builder") {
				t.Fatalf("the first stage is %q, want one named builder", strings.Join(f, " "))
			}
			continue
		}
		ins = append(ins, instruction{op: f[0], args: f[1:]})
	}
	if froms < 2 {
		t.Fatal("the Dockerfile has no second stage to copy the manager into")
	}
	return ins
}

// ignoreRule is one line of .dockerignore.
type ignoreRule struct {
	negate  bool
	pattern string
}

// dockerignore reads .dockerignore. The test understands the pattern forms
// the file uses (**, **/<glob>, <name>) and fails on any other, so a new
// form cannot be silently misread.
func dockerignore(t *testing.T) []ignoreRule {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var rules []ignoreRule
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		r := ignoreRule{}
		if strings.HasPrefix(l, "!") {
			r.negate, l = true, l[1:]
		}
		rest := strings.TrimPrefix(l, "**/")
		if l != "**" && strings.Contains(rest, "/") {
			t.Fatalf(".dockerignore pattern %q: the test knows **, **/<glob> and <name>; teach it this one", l)
		}
		r.pattern = l
		rules = append(rules, r)
	}
	return rules
}

// ignored applies the rules to a path relative to the build context, the last
// matching rule winning, as docker does.
func ignored(rules []ignoreRule, rel string) bool {
	out := false
	for _, r := range rules {
		var m bool
		switch {
		case r.pattern == "**":
			m = true
		case strings.HasPrefix(r.pattern, "**/"):
			m, _ = filepath.Match(strings.TrimPrefix(r.pattern, "**/"), filepath.Base(rel))
		default:
			m = r.pattern == rel
		}
		if m {
			out = !r.negate
		}
	}
	return out
}

// copyFiltered copies src (relative to the repository, a file or a folder)
// to dst, leaving out what .dockerignore excludes.
func copyFiltered(t *testing.T, rules []ignoreRule, src, dst string) {
	t.Helper()
	if strings.HasSuffix(src, "/") || strings.HasSuffix(dst, "/") {
		src, dst = strings.TrimSuffix(src, "/"), strings.TrimSuffix(dst, "/")
	}
	base := filepath.Join(root, src)
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if ignored(rules, filepath.ToSlash(rel)) {
			return nil
		}
		inner, _ := filepath.Rel(base, p)
		to := filepath.Join(dst, inner)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
	if err != nil {
		t.Fatalf("COPY %s: %v", src, err)
	}
}
