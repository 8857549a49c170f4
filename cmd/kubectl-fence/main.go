// Command kubectl-fence is the kubectl plugin for kubefence FencedLeases:
// `kubectl fence list` shows every lease's holder, token and time to expiry;
// `kubectl fence get NAME` shows one lease in depth (waiting queue, previous
// holder, history from Events, and the guarded objects with the token each
// carries); `kubectl fence release` and `kubectl fence handover` are operator
// actions that take the lease from its holder.
//
// Install it by putting the binary on PATH as kubectl-fence.
package main

import (
	"fmt"
	"os"

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
	if err := newRootCmd(streams, clock.RealClock{}).Execute(); err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
}
