package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// clients are the API clients one command run uses.
type clients struct {
	// kube reads, watches and patches FencedLeases and Events.
	kube client.WithWatch
	// metadata lists guarded objects of any kind, metadata only.
	metadata metadata.Interface
	// discovery finds the kinds guarded objects may have.
	discovery discovery.DiscoveryInterface
	// namespace is the one from -n, or the kubeconfig context's.
	namespace string
}

func newScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := coordv1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return scheme, nil
}

// clients builds the API clients from the kubeconfig flags.
func (o *rootOptions) clients() (*clients, error) {
	cfg, err := o.restConfig()
	if err != nil {
		return nil, err
	}
	// API warnings go to stderr as kubectl prints them, not to a logger.
	cfg.WarningHandler = rest.NewWarningWriter(o.streams.ErrOut, rest.WarningWriterOptions{Deduplicate: true})

	ns, _, err := o.configFlags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, fmt.Errorf("reading namespace from kubeconfig: %w", err)
	}
	scheme, err := newScheme()
	if err != nil {
		return nil, err
	}
	kube, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("creating client: %w", err)
	}
	// get lists every namespaced kind once; at client-go's default 5 requests
	// a second that alone would take seconds. The server's priority and
	// fairness still protects it.
	metaCfg := rest.CopyConfig(cfg)
	metaCfg.QPS, metaCfg.Burst = 50, 100
	// Listing deprecated kinds (v1 Endpoints) is not the user's doing.
	metaCfg.WarningHandler = rest.NoWarnings{}
	meta, err := metadata.NewForConfig(metaCfg)
	if err != nil {
		return nil, fmt.Errorf("creating metadata client: %w", err)
	}
	// Not kubectl's disk cache: it keeps kinds for hours, and a guarded kind
	// installed since would be silently left out. Aggregated discovery makes
	// a fresh look one or two requests.
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating discovery client: %w", err)
	}
	return &clients{kube: &friendlyClient{WithWatch: kube, host: cfg.Host}, metadata: meta, discovery: disc, namespace: ns}, nil
}

// restConfig loads the kubeconfig, refusing to fall back to kubectl's
// unconfigured default (http://localhost:8080) with a clear error.
func (o *rootOptions) restConfig() (*rest.Config, error) {
	loader := o.configFlags.ToRawKubeConfigLoader()
	raw, rawErr := loader.RawConfig()
	cfg, err := o.configFlags.ToRESTConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) || (rawErr == nil && len(raw.Clusters) == 0) {
			return nil, errNoKubeconfig(loader)
		}
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	inCluster := os.Getenv("KUBERNETES_SERVICE_HOST") != ""
	if rawErr == nil && len(raw.Clusters) == 0 && !inCluster && (o.configFlags.APIServer == nil || *o.configFlags.APIServer == "") {
		return nil, errNoKubeconfig(loader)
	}
	cfg = rest.CopyConfig(cfg)
	return cfg, nil
}

// errNoKubeconfig says that there is no cluster to talk to, and where the
// plugin looked for one.
func errNoKubeconfig(loader clientcmd.ClientConfig) error {
	where := "$KUBECONFIG or ~/.kube/config"
	if files := loader.ConfigAccess().GetLoadingPrecedence(); len(files) > 0 {
		where = strings.Join(files, ", ")
	}
	if f := loader.ConfigAccess().GetExplicitFile(); f != "" {
		where = f
	}
	return fmt.Errorf("no cluster configured: the kubeconfig (%s) is missing or names no cluster. "+
		"kubectl fence uses kubectl's kubeconfig: check that 'kubectl config current-context' works, "+
		"or pass --kubeconfig, --context or --server", where)
}

// friendlyClient adds kubectl's hint to errors of a server that does not
// answer at all.
type friendlyClient struct {
	client.WithWatch
	host string
}

func (c *friendlyClient) explain(err error) error {
	if err == nil || !isConnectionRefused(err) {
		return err
	}
	return fmt.Errorf("the connection to the server %s was refused - did you specify the right host or port? (%w)", c.host, err)
}

func isConnectionRefused(err error) bool {
	var sys syscall.Errno
	return errors.As(err, &sys) && sys == syscall.ECONNREFUSED
}

func (c *friendlyClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return c.explain(c.WithWatch.Get(ctx, key, obj, opts...))
}

func (c *friendlyClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return c.explain(c.WithWatch.List(ctx, list, opts...))
}

func (c *friendlyClient) Watch(ctx context.Context, list client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
	w, err := c.WithWatch.Watch(ctx, list, opts...)
	return w, c.explain(err)
}

func (c *friendlyClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	return c.explain(c.WithWatch.Create(ctx, obj, opts...))
}

func (c *friendlyClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	return c.explain(c.WithWatch.Patch(ctx, obj, patch, opts...))
}

// errNotInstalled says the API server does not serve FencedLeases.
var errNotInstalled = fmt.Errorf("the API server does not serve %s: is kubefence installed?", coordv1alpha1.GroupVersion.WithResource("fencedleases"))

// getLease reads one FencedLease, with an error that names the namespace when
// it is missing (the most common mistake is the wrong -n).
func (c *clients) getLease(ctx context.Context, name string) (*coordv1alpha1.FencedLease, error) {
	var lease coordv1alpha1.FencedLease
	if err := c.kube.Get(ctx, client.ObjectKey{Namespace: c.namespace, Name: name}, &lease); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("fencedlease %q not found in namespace %q", name, c.namespace)
		}
		if meta.IsNoMatchError(err) {
			return nil, errNotInstalled
		}
		return nil, fmt.Errorf("reading fencedlease %s/%s: %w", c.namespace, name, err)
	}
	return &lease, nil
}
