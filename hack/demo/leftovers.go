package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// tempPattern names the demo's temporary directories; ownerFile in each holds
// the pid of the demo that made it.
const (
	tempPattern = "kubefence-demo-*"
	ownerFile   = "demo.pid"
)

// sweepLeftovers cleans up after earlier demos that could not clean up
// themselves (killed with SIGKILL, or out of memory): for every demo directory
// whose owner is gone, it kills the processes still using the directory
// (etcd, kube-apiserver and workers name it on their command lines) and
// removes it. It reports what it did.
func sweepLeftovers() []string {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tempPattern))
	var done []string
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue // not ours, or a demo that is just starting
		}
		owner, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || owner == os.Getpid() || processAlive(owner) {
			continue
		}
		killed := killUsersOf(dir)
		if err := os.RemoveAll(dir); err != nil {
			done = append(done, fmt.Sprintf("could not remove %s: %v", dir, err))
			continue
		}
		done = append(done, fmt.Sprintf("removed %s and stopped %d of its processes, left by a demo (pid %d) that was killed", dir, killed, owner))
	}
	return done
}

// processAlive tells whether pid runs (a zombie does not).
func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	return procState(pid) != 'Z'
}

// killUsersOf SIGKILLs (and continues, in case they are stopped) the
// processes whose command line names dir, and waits briefly for them to go.
func killUsersOf(dir string) int {
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var pids []int
	for _, p := range cmdlines {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte(dir+string(filepath.Separator))) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil || pid == os.Getpid() {
			continue
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
		_ = syscall.Kill(pid, syscall.SIGCONT)
		pids = append(pids, pid)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for processAlive(pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	return len(pids)
}
