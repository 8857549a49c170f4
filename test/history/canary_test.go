package history

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/hack/devenv"
	"github.com/kubefence/kubefence/pkg/fence"
	"github.com/kubefence/kubefence/test/history/checker"
	"github.com/kubefence/kubefence/test/testenv"
)

// canaryLease is the lease of the commit-order canary; the run's own verdict
// leaves its versions out.
const canaryLease = "canary"

// canaryLeaseSeconds: nothing expires while the canary runs.
const canaryLeaseSeconds = 30

// commitOrderCanary makes one guarded write commit after the next grant, on
// purpose, so that every run shows the commit-order checker failing where it
// must (a checker that cannot fail proves nothing). On a lease of its own,
// after the workers stopped:
//
//  1. canary-a and canary-b (users of the workers' group, each with an
//     Elector) compete; canary-a leads with token t, canary-b waits.
//  2. Every kube-apiserver's Widget writes to etcd are held (commit-delay with
//     no end): canary-a creates Widget canary-0 with token t, which fencing
//     admits and which then waits on its way to etcd.
//  3. An operator revokes canary-a's tenure; the controller grants canary-b
//     the commit lag later.
//  4. Once the lease's status names canary-b, the hold is lifted: canary-a's
//     write commits after canary-b's grant, a commit held longer than the
//     commit lag.
//
// It returns how long the write was held, once the write has returned.
func (c *cluster) commitOrderCanary(ctx context.Context) (held time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel() // the Electors release
	cl, _, token, err := c.leadAndQueue(ctx, canaryLease, "canary-a", "canary-b")
	if err != nil {
		return 0, err
	}
	return c.canaryWrite(ctx, cl, token)
}

// leadAndQueue creates lease (of canaryLeaseSeconds) and runs an Elector for
// each of the users a and b of the workers' group until ctx ends: a is
// granted first, then b queues behind it. It returns a's client, Elector and
// fencing token once b's request is on the lease.
func (c *cluster) leadAndQueue(ctx context.Context, lease, a, b string) (client.WithWatch, *fence.Elector, int64, error) {
	if err := c.createLeaseOf(ctx, lease, canaryLeaseSeconds); err != nil {
		return nil, nil, 0, err
	}
	var (
		aClient  client.WithWatch
		aElector *fence.Elector
	)
	aToken := make(chan int64, 1)
	for _, name := range []string{a, b} {
		u, err := c.env.AddUser(envtest.User{Name: name, Groups: []string{workersGroup}}, nil)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("adding user %s: %w", name, err)
		}
		cl, err := client.NewWithWatch(u.Config(), client.Options{Scheme: c.scheme})
		if err != nil {
			return nil, nil, 0, err
		}
		e, err := fence.New(fence.Config{Client: cl, Namespace: historyNamespace, Name: lease, Identity: name, User: name,
			Callbacks: fence.Callbacks{OnStartedLeading: func(ctx context.Context, token int64) {
				if name == a {
					select {
					case aToken <- token:
					default:
					}
				}
				<-ctx.Done()
			}}})
		if err != nil {
			return nil, nil, 0, err
		}
		go func() { _ = e.Run(ctx) }()
		if name == a { // granted before b asks
			aClient, aElector = cl, e
			if err := c.waitLease(ctx, lease, func(l *coordv1alpha1.FencedLease) bool { return l.Status.HolderIdentity == name }); err != nil {
				return nil, nil, 0, fmt.Errorf("%s's grant: %w", name, err)
			}
		}
	}
	var token int64
	select {
	case token = <-aToken:
	case <-ctx.Done():
		return nil, nil, 0, fmt.Errorf("%s does not lead lease %s: %w", a, lease, ctx.Err())
	}
	if err := c.waitLease(ctx, lease, func(l *coordv1alpha1.FencedLease) bool {
		return coordv1alpha1.RequestIndex(l.Spec.Requests, b) >= 0
	}); err != nil {
		return nil, nil, 0, fmt.Errorf("%s's request: %w", b, err)
	}
	return aClient, aElector, token, nil
}

// canaryWrite is steps 2 to 4 of commitOrderCanary: canary-a's write with
// client cl and token, held until canary-b's grant; it returns how long.
func (c *cluster) canaryWrite(ctx context.Context, cl client.Client, token int64) (time.Duration, error) {
	before := c.delayedWrites()
	c.setWriteDelay(time.Hour)
	defer c.setWriteDelay(0)
	// The client's write histogram must see the held write (what
	// KubefenceClientWritesSlow alerts on).
	reg := prometheus.NewRegistry()
	metrics, err := fence.NewMetrics(reg)
	if err != nil {
		return 0, err
	}
	fc := fence.NewFencedClient(cl, canaryLease, devenv.FixedToken(token), fence.ClientConfig{Metrics: metrics})
	done := make(chan error, 1)
	start := time.Now()
	w := testenv.Widget(historyNamespace, canaryLease+"-0")
	if err := unstructured.SetNestedStringSlice(w.Object, []string{checker.Value("canary-a", token, 1)}, "spec", "entries"); err != nil {
		return 0, err
	}
	go func() { done <- fc.Create(ctx, w) }()
	// The write is admitted once it waits in a proxy.
	for c.delayedWrites() <= before {
		select {
		case err := <-done:
			return 0, fmt.Errorf("canary-a's write returned before it reached etcd: %v", err)
		case <-ctx.Done():
			return 0, fmt.Errorf("canary-a's write did not reach etcd: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if h, err := c.revoke(ctx, canaryLease, false); err != nil || h != "canary-a" {
		return 0, fmt.Errorf("revoking canary-a's tenure: holder %q, %v", h, err)
	}
	if err := c.waitLease(ctx, canaryLease, func(l *coordv1alpha1.FencedLease) bool {
		return l.Status.HolderIdentity == "canary-b" && l.Status.FencingToken > token
	}); err != nil {
		return 0, fmt.Errorf("canary-b's grant: %w", err)
	}
	c.setWriteDelay(0)
	held := time.Since(start)
	select {
	case err := <-done:
		if err != nil {
			return held, fmt.Errorf("canary-a's write, released after canary-b's grant: %w", err)
		}
		return held, checkWriteHistogram(reg, held)
	case <-ctx.Done():
		return held, fmt.Errorf("canary-a's write did not return: %w", ctx.Err())
	}
}

// waitLease polls lease name until ok holds.
func (c *cluster) waitLease(ctx context.Context, name string, ok func(*coordv1alpha1.FencedLease) bool) error {
	for {
		var l coordv1alpha1.FencedLease
		err := c.admin.Get(ctx, client.ObjectKey{Namespace: historyNamespace, Name: name}, &l)
		if err == nil && ok(&l) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("lease %s: %w (last read: %v, status %+v)", name, ctx.Err(), err, l.Status)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// splitCanary separates the canary's versions from the run's.
func splitCanary(log []checker.Version) (run, canary []checker.Version) {
	for _, v := range log {
		if (v.Kind == checker.KindLease && v.Name == canaryLease) || (v.Kind == checker.KindWidget && v.Lease == canaryLease) {
			canary = append(canary, v)
		} else {
			run = append(run, v)
		}
	}
	return run, canary
}

// checkWriteHistogram checks that the client metrics in reg timed one
// acknowledged write, with a round trip of at least held.
func checkWriteHistogram(reg *prometheus.Registry, held time.Duration) error {
	families, err := reg.Gather()
	if err != nil {
		return err
	}
	for _, f := range families {
		if f.GetName() != "kubefence_client_write_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == fence.WriteOK {
					h := m.GetHistogram()
					if h.GetSampleCount() != 1 || h.GetSampleSum() < held.Seconds() {
						return fmt.Errorf("kubefence_client_write_duration_seconds{result=ok}: %d writes, %.3fs in all; want the one write, held %v",
							h.GetSampleCount(), h.GetSampleSum(), held)
					}
					return nil
				}
			}
		}
	}
	return fmt.Errorf("kubefence_client_write_duration_seconds{result=ok} did not record canary-a's write")
}
