package history

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// worker is one worker identity: a user, a fault proxy, a log, and the
// process currently running as it (restarted after a kill -9, with a new
// incarnation so that its values stay unique).
type worker struct {
	name       string
	proxy      *faultProxy
	kubeconfig string
	logPath    string   // JSON lines (stdout)
	errPath    string   // the elector's logs (stderr)
	args       []string // this worker's own flags, after the shared ones

	mu          sync.Mutex
	p           *proc
	incarnation int
}

// workerSet runs the worker processes.
type workerSet struct {
	bin     string
	args    []string // shared flags
	seed    int64
	workers []*worker
}

func (s *workerSet) start(w *worker) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.incarnation++
	stdout, err := os.OpenFile(w.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer stdout.Close()
	stderr, err := os.OpenFile(w.errPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer stderr.Close()
	fmt.Fprintf(stderr, "=== history: starting %s incarnation %d at %s\n", w.name, w.incarnation, time.Now().Format(time.RFC3339Nano))
	args := append([]string{
		"--kubeconfig=" + w.kubeconfig,
		"--identity=" + w.name,
		"--user=" + w.name,
		"--seq-start=" + strconv.FormatInt(int64(w.incarnation)*1_000_000_000, 10),
		"--seed=" + strconv.FormatInt(s.seed*1_000_003+int64(len(w.name))*7919+int64(w.incarnation)+int64(w.name[len(w.name)-1]), 10),
	}, s.args...)
	args = append(args, w.args...)
	p, err := startProc(w.name, s.bin, args, nil, stdout, stderr)
	if err != nil {
		return err
	}
	w.p = p
	return nil
}

func (w *worker) proc() *proc {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.p
}

func (w *worker) signal(sig syscall.Signal) error {
	if p := w.proc(); p != nil {
		return p.Signal(sig)
	}
	return nil
}

// stopAll asks every worker to finish its attempts in flight and exit.
func (s *workerSet) stopAll(grace time.Duration) {
	var wg sync.WaitGroup
	for _, w := range s.workers {
		if p := w.proc(); p != nil {
			wg.Add(1)
			go func() { defer wg.Done(); p.Stop(grace) }()
		}
	}
	wg.Wait()
	for _, w := range s.workers {
		w.proxy.Close()
	}
}

// appendCounter counts append attempts in the workers' logs as they grow.
type appendCounter struct {
	offsets map[string]int64
	rest    map[string][]byte
	n       int
}

func newAppendCounter() *appendCounter {
	return &appendCounter{offsets: map[string]int64{}, rest: map[string][]byte{}}
}

var appendMarker = []byte(`"type":"op"`)

// update reads what the logs gained since the last call.
func (c *appendCounter) update(paths []string) int {
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		if _, err := f.Seek(c.offsets[path], io.SeekStart); err == nil {
			b, _ := io.ReadAll(f)
			c.offsets[path] += int64(len(b))
			b = append(c.rest[path], b...)
			last := bytes.LastIndexByte(b, '\n')
			for _, line := range bytes.Split(b[:last+1], []byte{'\n'}) {
				if bytes.Contains(line, appendMarker) && bytes.Contains(line, []byte(`"op":"append"`)) {
					c.n++
				}
			}
			c.rest[path] = append([]byte(nil), b[last+1:]...)
		}
		_ = f.Close()
	}
	return c.n
}

func (s *workerSet) logPaths() []string {
	var paths []string
	for _, w := range s.workers {
		paths = append(paths, w.logPath)
	}
	return paths
}

func workerName(i int) string { return "w" + strconv.Itoa(i+1) }

func newWorker(dir string, i int) *worker {
	name := workerName(i)
	return &worker{name: name, logPath: filepath.Join(dir, name+".jsonl"), errPath: filepath.Join(dir, name+".log")}
}

func joinLeases(leases []string) string { return strings.Join(leases, ",") }
