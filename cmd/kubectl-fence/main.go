// Command kubectl-fence is the kubectl plugin for kubefence FencedLeases:
// `kubectl fence get` lists leases with holder, token and time to expiry (with
// kubectl's output formats and -w); `kubectl fence describe NAME` explains one
// lease (waiting queue, previous holder, history from Events, and the guarded
// objects with the token each carries); `release` and `handover` are operator
// actions that take the lease from its holder; `raise-floor` raises
// spec.minFencingToken after an etcd restore; `check` and `version` tell
// whether the operator serves.
//
// Install it by putting the binary on PATH as kubectl-fence, and
// kubectl_complete-fence beside it for shell completion through kubectl
// (`make install-plugin` does both).
//
// It imports only api/ and pkg/fence/protocol among kubefence packages (the
// request protocol's writes it shares with the client helper), and must not
// import controllers/ or any test or hack package: it is a client.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/clock"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

func main() {
	// The controller-runtime client logs nothing a user needs (API warnings
	// go to stderr directly); without a logger it would complain it has none.
	logf.SetLogger(logr.Discard())
	streams := genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	// Ctrl-C ends a watch or a check --wait without an error.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCmd(streams, clock.RealClock{}).ExecuteContext(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
}
