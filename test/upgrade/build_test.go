package upgrade

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// previousRelease is the commit this test runs as the previous release
// (docs/versioning.md, "Rolling upgrades"): the last commit before the
// stamped renewal (one API write per renewal, 919d18c). Its pkg/fence renews
// without renewTime, its controller acknowledges every renewal in status, its
// fencing webhook judges a tenure from status.expireTime alone, and its
// FencedLease webhook knows nothing of renewTime: every difference of the wire
// protocol since then meets its counterpart in a rolling upgrade.
const previousRelease = "7ebd8c78b146fd0a3422cee7039f6917c5452e30"

// binaries are a manager (cmd/) and a holder (test/history/worker: it holds
// leases through pkg/fence and writes guarded Widgets) of one version.
type binaries struct {
	version         string
	manager, holder string
}

var targets = map[string]string{"manager": "./cmd", "holder": "./test/history/worker"}

// buildCurrent builds this tree's manager and holder into dir.
func buildCurrent(ctx context.Context, root, dir string) (binaries, error) {
	b := binaries{version: "new", manager: filepath.Join(dir, "manager-new"), holder: filepath.Join(dir, "holder-new")}
	for out, pkg := range map[string]string{b.manager: targets["manager"], b.holder: targets["holder"]} {
		if err := goBuild(ctx, root, out, pkg); err != nil {
			return b, err
		}
	}
	return b, nil
}

// buildRelease builds the manager and holder of commit from this clone's
// history (its dependencies from the module cache or the module proxy), once: the binaries are kept in the user's cache directory,
// keyed by commit. A commit missing from the clone is an error that says so.
func buildRelease(ctx context.Context, root, commit string) (binaries, error) {
	b := binaries{version: "old"}
	cache, err := os.UserCacheDir()
	if err != nil {
		return b, fmt.Errorf("no cache directory for the previous release's binaries: %w", err)
	}
	dir := filepath.Join(cache, "kubefence", "upgrade-test", commit)
	b.manager, b.holder = filepath.Join(dir, "manager"), filepath.Join(dir, "holder")
	if executable(b.manager) && executable(b.holder) {
		return b, nil
	}
	if err := haveCommit(ctx, root, commit); err != nil {
		return b, fmt.Errorf("the previous release %s is not in this clone's history, nor could it be fetched from origin (%v): the upgrade test builds it from git; "+
			"fetch the full history (git fetch --unshallow) or update previousRelease in test/upgrade/build_test.go and docs/versioning.md together", commit, err)
	}
	src, err := os.MkdirTemp("", "kubefence-release-*")
	if err != nil {
		return b, err
	}
	defer os.RemoveAll(src)
	// git archive, not a worktree: nothing of the clone's state changes.
	archive := exec.CommandContext(ctx, "sh", "-c", `git -C "$1" archive --format=tar "$2" | tar -x -C "$3"`, "sh", root, commit, src)
	if out, err := archive.CombinedOutput(); err != nil {
		return b, fmt.Errorf("extracting %s: %v: %s", commit, err, out)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return b, err
	}
	for out, pkg := range map[string]string{b.manager: targets["manager"], b.holder: targets["holder"]} {
		tmp := out + ".tmp"
		if err := goBuild(ctx, src, tmp, pkg, "GOFLAGS=-mod=readonly"); err != nil {
			return b, fmt.Errorf("building the previous release %s: %w", commit, err)
		}
		if err := os.Rename(tmp, out); err != nil {
			return b, err
		}
	}
	return b, nil
}

func goBuild(ctx context.Context, dir, out, pkg string, env ...string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GOWORK=off"), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s in %s: %w\n%s", pkg, dir, err, b)
	}
	return nil
}

func executable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// A previous release missing from the clone (a shallow clone, a rewritten
// history) fails the suite with what to do, rather than skip it.
func TestMissingReleaseIsAnError(t *testing.T) {
	_, err := buildRelease(context.Background(), root, "0123456789abcdef0123456789abcdef01234567")
	if err == nil || !strings.Contains(err.Error(), "is not in this clone's history") {
		t.Fatalf("building a commit the clone lacks: %v, want an error saying it is not in the clone's history", err)
	}
}

// haveCommit makes sure commit is in the clone: a shallow clone (as some CI
// systems make) first fetches it from its origin, then the full history.
func haveCommit(ctx context.Context, root, commit string) error {
	has := func() error {
		out, err := exec.CommandContext(ctx, "git", "-C", root, "cat-file", "-e", commit+"^{commit}").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	if has() == nil {
		return nil
	}
	for _, args := range [][]string{{"fetch", "--quiet", "origin", commit}, {"fetch", "--quiet", "--unshallow", "origin"}} {
		_ = exec.CommandContext(ctx, "git", append([]string{"-C", root}, args...)...).Run()
		if has() == nil {
			return nil
		}
	}
	return has()
}
