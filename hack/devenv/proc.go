package devenv

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// Proc is a child process of a test or the demo (an operator replica, a
// worker, kube-controller-manager) that gets SIGKILL if its parent dies.
type Proc struct {
	// Name names it in errors.
	Name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // exit status, once done is closed
}

// StartProc starts cmd (its path, arguments, environment and output set by
// the caller) in a process group of its own. The child gets SIGKILL if this
// process dies (Pdeathsig): the thread that forks it stays locked to the
// goroutine that waits for it, so it lives exactly as long as the child needs
// it.
func StartProc(name string, cmd *exec.Cmd) (*Proc, error) {
	p := &Proc{Name: name, cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
		if err := cmd.Start(); err != nil {
			started <- fmt.Errorf("starting %s: %w", name, err)
			close(p.done)
			return
		}
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// Pid is the child's process ID.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the child exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited tells whether the child exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is the child's exit status (what exec.Cmd.Wait returned) once it
// exited, nil before.
func (p *Proc) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.err
}

// Signal sends sig to the child, unless it exited.
func (p *Proc) Signal(sig syscall.Signal) error {
	if p.Exited() {
		return errors.New(p.Name + " has exited")
	}
	return syscall.Kill(p.Pid(), sig)
}

// Kill sends SIGKILL and waits for the exit.
func (p *Proc) Kill() {
	_ = p.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop asks the child to end with SIGTERM (and SIGCONT, in case it is
// stopped), then kills it after grace.
func (p *Proc) Stop(grace time.Duration) {
	_ = p.Signal(syscall.SIGTERM)
	_ = p.Signal(syscall.SIGCONT)
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	select {
	case <-p.done:
	case <-ctx.Done():
		p.Kill()
	}
}
