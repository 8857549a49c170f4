package history

import (
	"os"
	"os/exec"

	"github.com/kubefence/kubefence/hack/devenv"
)

// proc is a child process: the operator or a worker.
type proc = devenv.Proc

// startProc starts bin with args, env added to this process's environment,
// and its output to stdout and stderr (devenv.StartProc: it dies with the
// test).
func startProc(name, bin string, args, env []string, stdout, stderr *os.File) (*proc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	return devenv.StartProc(name, cmd)
}
