package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/kubefence/kubefence/hack/demo/internal/event"
	"github.com/kubefence/kubefence/hack/devenv"
)

// buildWorker compiles hack/demo/worker into bin.
func buildWorker(ctx context.Context, root, bin string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("the demo builds its worker with the go command, which is not on PATH: %w", err)
	}
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", bin, "./hack/demo/worker")
	cmd.Dir = root
	// go build runs the compiler and linker as its children: on cancel, kill
	// the whole process group (its work directory is under the demo's).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./hack/demo/worker: %w\n%s", err, out)
	}
	return nil
}

// workerProc is one running worker process.
type workerProc struct {
	*devenv.Proc
	stdin   io.WriteCloser
	logPath string
	// done is closed once the worker exited and every event it printed is in
	// the timeline.
	done chan struct{}
}

// startWorker starts the worker binary as its own process group (so that a
// Ctrl-C in the terminal reaches only the demo, which stops workers in
// order) and feeds its events into tl. Its stderr goes to logPath.
func startWorker(bin, name, logPath string, args []string, tl *timeline, object string) (*workerProc, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = logFile
	// The worker exits when this pipe closes, so it cannot outlive the demo
	// even if the demo is killed.
	stdin, err := cmd.StdinPipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	// Its events come through a pipe of the demo's own: the one StdoutPipe
	// makes is closed by Wait, which devenv.Proc calls as soon as the worker
	// exits, perhaps before its last events are read.
	events, eventsOut, err := os.Pipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	cmd.Stdout = eventsOut
	p, err := devenv.StartProc(name, cmd)
	eventsOut.Close() // the worker has its own copy
	if err != nil {
		logFile.Close()
		events.Close()
		return nil, err
	}
	w := &workerProc{Proc: p, stdin: stdin, logPath: logPath, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(events)
		for sc.Scan() {
			var ev event.Event
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.Kind == "" {
				tl.add(name, "says: "+sc.Text(), nil)
				continue
			}
			tl.add(name, describe(&ev, object), &ev)
		}
		events.Close()
		<-p.Done()
		logFile.Close()
	}()
	return w, nil
}

// state is the process state letter of /proc/<pid>/stat: 'T' when stopped
// by a signal, 'R' or 'S' when running, 0 when unknown.
func (w *workerProc) state() byte {
	return procState(w.Pid())
}

func procState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// pid (comm) state ...; comm may contain spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return 0
	}
	return s[i+2]
}

// waitStopped waits until the worker is stopped by a signal.
func (w *workerProc) waitStopped(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for w.state() != 'T' {
		if w.Exited() {
			return fmt.Errorf("%s exited instead of stopping: %v", w.Name, w.Err())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s (pid %d) did not stop within %v (state %q)", w.Name, w.Pid(), timeout, w.state())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// resume sends SIGCONT.
func (w *workerProc) resume() error {
	return syscall.Kill(w.Pid(), syscall.SIGCONT)
}

// stop ends the worker. A running worker gets SIGTERM and grace to release
// its lease; a worker stopped by SIGSTOP, or one that does not exit in time,
// is killed (SIGKILL, then SIGCONT so that the kernel can reap it at once).
func (w *workerProc) stop(grace time.Duration) error {
	if w.Exited() {
		return nil
	}
	_ = w.stdin.Close()
	if w.state() == 'T' {
		grace = 0
	} else if err := syscall.Kill(w.Pid(), syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		grace = 0
	}
	select {
	case <-w.done:
		return nil
	case <-time.After(grace):
	}
	_ = syscall.Kill(w.Pid(), syscall.SIGKILL)
	_ = syscall.Kill(w.Pid(), syscall.SIGCONT)
	select {
	case <-w.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", w.Name, w.Pid())
	}
}

// logTail is the end of the worker's stderr, for error messages.
func (w *workerProc) logTail() string {
	b, _ := os.ReadFile(w.logPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return strings.Join(lines, "\n")
}
