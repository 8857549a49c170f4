package devenv

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ModulePath is kubefence's Go module.
const ModulePath = "github.com/kubefence/kubefence"

// ModuleRoot is the nearest directory at or above the working directory whose
// go.mod declares ModulePath: the repository's root, which holds config/ and
// test/crds, for a program (the demo, the benchmark) run from anywhere inside it.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if declaresModule(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of module %s at or above the working directory: run it inside the kubefence repository", ModulePath)
		}
		dir = parent
	}
}

// declaresModule tells whether the go.mod at path declares ModulePath.
func declaresModule(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.TrimSpace(rest) == ModulePath
		}
	}
	return false
}
