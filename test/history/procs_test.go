package history

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// proc is a child process: the operator or a worker.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // exit status, once done is closed
}

// startProc starts bin. The child gets SIGKILL if this test process dies
// (Pdeathsig): the thread that forks it stays locked to the goroutine that
// waits for it, so it lives exactly as long as the child needs it.
func startProc(name, bin string, args, env []string, stdout, stderr *os.File) (*proc, error) {
	p := &proc{name: name, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdout, cmd.Stderr = stdout, stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
		if err := cmd.Start(); err != nil {
			started <- fmt.Errorf("starting %s: %w", name, err)
			close(p.done)
			return
		}
		p.cmd = cmd
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return errors.New(p.name + " has exited")
	default:
	}
	return syscall.Kill(p.pid(), sig)
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL and waits for the exit.
func (p *proc) kill() {
	_ = p.signal(syscall.SIGKILL)
	<-p.done
}

// stop asks with SIGTERM (and SIGCONT, in case it is stopped), then kills
// after grace.
func (p *proc) stop(grace time.Duration) {
	_ = p.signal(syscall.SIGTERM)
	_ = p.signal(syscall.SIGCONT)
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	select {
	case <-p.done:
	case <-ctx.Done():
		p.kill()
	}
}
