package main

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// clients are the API clients one command run uses.
type clients struct {
	// kube reads and patches FencedLeases and Events.
	kube client.Client
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
	cfg, err := o.configFlags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
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
	kube, err := client.New(cfg, client.Options{Scheme: scheme})
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
	return &clients{kube: kube, metadata: meta, discovery: disc, namespace: ns}, nil
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
