// Package version is the build's version, commit and date: the one place both
// binaries (the manager ./cmd and the plugin ./cmd/kubectl-fence) read them
// from. The Makefile and the Dockerfile stamp them with
//
//	go build -ldflags "-X github.com/kubefence/kubefence/pkg/version.version=v0.1.0 \
//	  -X github.com/kubefence/kubefence/pkg/version.commit=<sha> \
//	  -X github.com/kubefence/kubefence/pkg/version.date=2026-12-01T00:00:00Z"
//
// (make's LDFLAGS). A build without them (go build, go install, go test)
// falls back to what the Go toolchain records: the module version and the
// VCS revision and time.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set by -ldflags -X; empty when not stamped.
var (
	version string
	commit  string
	date    string
)

// Info is what a binary reports about its build (kubectl fence version, the
// manager's --version and its first log line, kubefence_build_info).
type Info struct {
	// Version is the release, vMAJOR.MINOR.PATCH (a git tag), or what git
	// describe printed for a build between tags; "(devel)" unknown.
	Version string `json:"version"`
	// Commit is the git commit, with -dirty when the tree had changes;
	// "unknown" when not recorded.
	Commit string `json:"commit"`
	// Date is the commit's time (UTC, RFC 3339), so that a rebuild of one
	// commit is byte-identical; "unknown" when not recorded.
	Date string `json:"date"`
	// GoVersion is the toolchain that built the binary.
	GoVersion string `json:"goVersion"`
	// Platform is GOOS/GOARCH.
	Platform string `json:"platform"`
}

// Get returns the stamped values, each missing one filled from the Go
// toolchain's build information.
func Get() Info {
	i := Info{Version: version, Commit: commit, Date: date, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		var rev, modified, vcsTime string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			case "vcs.time":
				vcsTime = s.Value
			}
		}
		if i.Version == "" && bi.Main.Version != "" {
			i.Version = bi.Main.Version
		}
		if i.Commit == "" && rev != "" {
			i.Commit = rev
			if modified == "true" {
				i.Commit += "-dirty"
			}
		}
		if i.Date == "" {
			i.Date = vcsTime
		}
	}
	if i.Version == "" {
		i.Version = "(devel)"
	}
	if i.Commit == "" {
		i.Commit = "unknown"
	}
	if i.Date == "" {
		i.Date = "unknown"
	}
	return i
}

// String is the one line the binaries print: "v0.1.0 (commit 0123abcd…,
// 2026-12-01T00:00:00Z, go1.26.0 linux/amd64)".
func (i Info) String() string {
	return fmt.Sprintf("%s (commit %s, %s, %s %s)", i.Version, i.Commit, i.Date, i.GoVersion, i.Platform)
}
