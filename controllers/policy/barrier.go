package policy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// Prober asks one API server whether it would admit a write of a guarded
// object carrying token for lease ns/name: a dry-run create, which runs
// admission (the fencing policy, from that server's informer cache of the
// tenure table) and stores nothing. Accepted is true when it was admitted;
// an error is anything but an admission or a policy refusal.
type Prober interface {
	Probe(ctx context.Context, server APIServer, ns, name string, token int64) (accepted bool, err error)
}

// Barrier proves that every API server enforces a tenure table entry: it
// refuses the previous token and accepts the new one. The controller writes
// a grant to the FencedLease's status (where the holder learns of it) only
// after Wait returns nil.
type Barrier struct {
	// Servers lists the API servers (APIServers).
	Servers func(ctx context.Context) ([]APIServer, error)
	Prober  Prober
	// Interval is the time between probes of one server (default 5 ms).
	Interval time.Duration
	// Timeout bounds one Wait (default 10 s): a server that does not show
	// the entry by then fails the grant, which is retried with backoff.
	Timeout time.Duration
}

// relistInterval is how often a Wait asks Servers again while a server's
// probes fail: a server no longer returned (a killed one the Tracker has
// proven gone) stops blocking the Wait under way.
const relistInterval = time.Second

// ErrNotPropagated is wrapped by Wait's error when an API server did not
// show the entry in time.
var ErrNotPropagated = errors.New("the tenure table entry has not reached every API server")

// ErrProbeRefusedElsewhere is wrapped by a probe's error when something other
// than the fencing policy refused it (a ResourceQuota on ConfigMaps at its
// limit, another admission policy or webhook, RBAC): the probe proves
// nothing about the tenure table, so the barrier cannot pass in that
// namespace until it is let through. Wait returns it at once.
var ErrProbeRefusedElsewhere = errors.New("a barrier probe was refused by something other than the fencing policy")

// Wait returns when every API server refuses prev (when set) and accepts
// next for lease ns/name.
func (b *Barrier) Wait(ctx context.Context, ns, name string, prev *int64, next int64) error {
	timeout, interval := b.Timeout, b.Interval
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	if interval <= 0 {
		interval = 5 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	servers, err := b.Servers(ctx)
	if err != nil {
		return fmt.Errorf("listing the API servers: %w", err)
	}
	if len(servers) == 0 {
		return errors.New("listing the API servers: none found")
	}
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = b.waitOne(ctx, s, ns, name, prev, next, interval)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (b *Barrier) waitOne(ctx context.Context, s APIServer, ns, name string, prev *int64, next int64, interval time.Duration) error {
	var last error
	listed := time.Now()
	for {
		ok, err := b.shows(ctx, s, ns, name, prev, next)
		if ok {
			return nil
		}
		if errors.Is(err, ErrProbeRefusedElsewhere) {
			return fmt.Errorf("API server %s, lease %s/%s: %w", s.Host, ns, name, err)
		}
		last = err
		if err != nil && time.Since(listed) >= relistInterval {
			// A server that fails its probes may have been proven gone
			// since the Wait began: Servers no longer returns it.
			listed = time.Now()
			if servers, lerr := b.Servers(ctx); lerr == nil && !slices.ContainsFunc(servers, func(o APIServer) bool { return o.Host == s.Host }) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			if last == nil {
				last = ctx.Err()
			}
			return fmt.Errorf("%w: API server %s, lease %s/%s, token %d: %v", ErrNotPropagated, s.Host, ns, name, next, last)
		case <-time.After(interval):
		}
	}
}

func (b *Barrier) shows(ctx context.Context, s APIServer, ns, name string, prev *int64, next int64) (bool, error) {
	if prev != nil && *prev != next {
		accepted, err := b.Prober.Probe(ctx, s, ns, name, *prev)
		if err != nil || accepted {
			return false, err
		}
	}
	accepted, err := b.Prober.Probe(ctx, s, ns, name, next)
	return accepted && err == nil, err
}

// DryRunProber probes with dry-run creates of a ConfigMap guarded by the
// lease (the fencing policy's guarded binding matches every kind).
type DryRunProber struct {
	mu      sync.Mutex
	clients map[string]kubernetes.Interface
}

// ProbeName is the generateName prefix of probe ConfigMaps (never stored).
const ProbeName = "kubefence-probe-"

// Probe implements Prober.
func (p *DryRunProber) Probe(ctx context.Context, s APIServer, ns, name string, token int64) (bool, error) {
	c, err := p.client(s)
	if err != nil {
		return false, err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: ProbeName,
		Labels:      map[string]string{coordv1alpha1.GuardLeaseLabel: name},
		Annotations: map[string]string{coordv1alpha1.FencingTokenAnnotation: strconv.FormatInt(token, 10)}}}
	_, err = c.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	return probeAnswer(err)
}

// probeAnswer reads a probe's outcome: admitted, refused by the fencing
// policy (its refusals, and its missing-parameter refusal, carry the API
// server's prefix naming it), or an error; a refusal by anything else wraps
// ErrProbeRefusedElsewhere with the refusal's message.
func probeAnswer(err error) (bool, error) {
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsForbidden(err) || apierrors.IsInvalid(err):
		if strings.Contains(err.Error(), policyRefusal) {
			return false, nil
		}
		return false, fmt.Errorf("%w: %v", ErrProbeRefusedElsewhere, err)
	default:
		return false, err
	}
}

// policyRefusal starts the message of every refusal by the fencing policy.
const policyRefusal = "ValidatingAdmissionPolicy '" + FencingPolicyName + "' with binding "

func (p *DryRunProber) client(s APIServer) (kubernetes.Interface, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.clients[s.Host]; ok {
		return c, nil
	}
	cfg := rest.CopyConfig(s.Config)
	cfg.QPS, cfg.Burst = -1, 0 // probes are few and must not queue behind the manager's limiter
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("a client for API server %s: %w", s.Host, err)
	}
	if p.clients == nil {
		p.clients = map[string]kubernetes.Interface{}
	}
	p.clients[s.Host] = c
	return c, nil
}

// ConfiguredServer is Barrier.Servers for the one address base is
// configured with: right for a single kube-apiserver; behind a load
// balancer it proves only that the server answering each probe enforces the
// entry (docs/design.md, "Policy mode: addressing every API server").
func ConfiguredServer(base *rest.Config) func(context.Context) ([]APIServer, error) {
	cfg := rest.CopyConfig(base)
	if cfg.Timeout == 0 {
		cfg.Timeout = RequestTimeout
	}
	servers := []APIServer{{Host: cfg.Host, Config: cfg}}
	return func(context.Context) ([]APIServer, error) { return servers, nil }
}
