package main

import "testing"

// TestSection: a version's notes are its own section, up to the next one
// or the link definitions; a missing one is reported.
func TestSection(t *testing.T) {
	const changelog = `# Changelog

## [Unreleased]

- next

## [0.1.0] - 2026-12-01

### Added

- first

[Unreleased]: https://example.com/compare/v0.1.0...main
[0.1.0]: https://example.com/releases/tag/v0.1.0
`
	for name, want := range map[string]string{"Unreleased": "- next\n", "0.1.0": "### Added\n\n- first\n"} {
		got, ok := section(changelog, name)
		if !ok || got != want {
			t.Errorf("section(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
	if _, ok := section(changelog, "0.2.0"); ok {
		t.Error("section(0.2.0) found a section that does not exist")
	}
	if _, ok := section(changelog, "0.1"); ok {
		t.Error("section(0.1) matched [0.1.0]")
	}
}

// TestRunRefusesABadVersion: the version is checked before anything is
// written.
func TestRunRefusesABadVersion(t *testing.T) {
	for _, v := range []string{"", "v0.1.0", "0.1", "0.1.0.1", "01.0.0"} {
		if err := run(options{version: v, out: t.TempDir(), downloadURL: "u", homepage: "h", imageRepo: "r"}); err == nil {
			t.Errorf("run with version %q: no error", v)
		}
	}
}
