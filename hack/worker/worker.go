// Package worker is the core shared by the worker processes that compete for
// FencedLeases and write guarded Widgets through pkg/fence: the demo's
// (hack/demo/worker) and the history test's (test/history/worker). It owns
// what a worker process does before it competes: its command line (--kubeconfig,
// the logger's flags) and its client. What each worker writes, and how it
// reports it, stays in its own main.
//
// It imports the API and pkg/fence's dependencies only (it lives outside
// test/ so that the demo's worker need not import a test package);
// it must not import the operator (controllers/...), and only worker mains
// import it.
package worker

import (
	"errors"
	"flag"
	"fmt"
	"os"

	kruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// ParseFlags parses the command line after the caller bound its own flags,
// with controller-runtime's --kubeconfig and the development logger's flags;
// it sets the logger (to stderr, so that stdout stays the worker's JSON
// lines) and returns the kubeconfig path ("" when not given).
func ParseFlags() string {
	zapOpts := zap.Options{Development: true}
	zapOpts.BindFlags(flag.CommandLine)
	// --kubeconfig is controller-runtime's own flag (pkg/client/config).
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts), zap.WriteTo(os.Stderr)))
	if f := flag.Lookup("kubeconfig"); f != nil {
		return f.Value.String()
	}
	return ""
}

// NewClient returns a client for kubeconfig that knows the built-in kinds
// and FencedLeases; tune, if set, adjusts the REST config first (rate limits,
// timeouts).
func NewClient(kubeconfig string, tune func(*rest.Config)) (client.WithWatch, error) {
	if kubeconfig == "" {
		return nil, errors.New("--kubeconfig is required")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig %s: %w", kubeconfig, err)
	}
	if tune != nil {
		tune(cfg)
	}
	scheme := kruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := coordv1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("creating client: %w", err)
	}
	return c, nil
}
