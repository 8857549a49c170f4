package version

import (
	"runtime"
	"strings"
	"testing"
)

// TestGetPrefersTheStamps: the -X values win over the toolchain's build
// information, and String names each of them.
func TestGetPrefersTheStamps(t *testing.T) {
	defer func(v, c, d string) { version, commit, date = v, c, d }(version, commit, date)
	version, commit, date = "v1.2.3", "0123456789abcdef0123456789abcdef01234567", "2026-12-01T00:00:00Z"
	i := Get()
	if i.Version != "v1.2.3" || i.Commit != commit || i.Date != date || i.GoVersion != runtime.Version() || i.Platform != runtime.GOOS+"/"+runtime.GOARCH {
		t.Fatalf("Get() = %+v, want the stamped values and this toolchain", i)
	}
	for _, want := range []string{"v1.2.3", commit, date, runtime.Version()} {
		if !strings.Contains(i.String(), want) {
			t.Errorf("String() = %q lacks %q", i.String(), want)
		}
	}
}

// TestGetWithoutStampsIsNeverEmpty: an unstamped build (go test, go install)
// reports placeholders, never empty fields (the build_info metric's labels
// and kubectl fence version print them).
func TestGetWithoutStampsIsNeverEmpty(t *testing.T) {
	defer func(v, c, d string) { version, commit, date = v, c, d }(version, commit, date)
	version, commit, date = "", "", ""
	i := Get()
	if i.Version == "" || i.Commit == "" || i.Date == "" {
		t.Fatalf("Get() without stamps = %+v, want no empty field", i)
	}
}
