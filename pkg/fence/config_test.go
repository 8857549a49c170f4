package fence

import (
	"context"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

func TestConfigTimings(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		cfg                  Config
		lease                time.Duration
		renew, retry, margin time.Duration
		wantErr              string
	}{
		{"defaults for 15s", Config{}, 15 * time.Second, 5 * time.Second, 1250 * time.Millisecond, 1500 * time.Millisecond, ""},
		{"retry follows a set renew", Config{RenewInterval: 2 * time.Second}, 15 * time.Second, 2 * time.Second, 500 * time.Millisecond, 1500 * time.Millisecond, ""},
		{"all set", Config{RenewInterval: 4 * time.Second, RetryInterval: time.Second, SafetyMargin: 3 * time.Second}, 10 * time.Second,
			4 * time.Second, time.Second, 3 * time.Second, ""},
		// The default margin of a 10 s lease is 1.2 s: L/10 = 1 s would end
		// the tenure after the fencing webhook's cut-off (timing.MinMargin).
		{"renew plus margin reaches the lease", Config{RenewInterval: 9 * time.Second}, 10 * time.Second, 0, 0, 0,
			"RenewInterval 9s plus SafetyMargin 1.2s must be shorter than the lease duration 10s"},
		{"defaults for 2s", Config{}, 2 * time.Second, 666666666, 166666666, 400 * time.Millisecond, ""},
		{"a larger configured lag", Config{MaxCommitLag: 2 * time.Second}, 30 * time.Second, 10 * time.Second, 2500 * time.Millisecond, 3 * time.Second, ""},
		{"margin below a tenth of the lease", Config{SafetyMargin: time.Second}, 15 * time.Second, 0, 0, 0,
			"SafetyMargin 1s is below a tenth of the lease duration 15s (1.5s)"},
		{"margin that ends after the webhook's cut-off", Config{SafetyMargin: 1200 * time.Millisecond}, 12 * time.Second, 0, 0, 0,
			"SafetyMargin 1.2s is below 1.3s, the least that keeps the deadline before the fencing webhook's cut-off"},
		{"a configured skew raises the least margin", Config{SafetyMargin: 1500 * time.Millisecond, ClockSkew: 200 * time.Millisecond}, 15 * time.Second, 0, 0, 0,
			"SafetyMargin 1.5s is below 1.6s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			renew, retry, margin, err := tc.cfg.timings(tc.lease)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || renew != tc.renew || retry != tc.retry || margin != tc.margin {
				t.Fatalf("timings = %v %v %v %v; want %v %v %v", renew, retry, margin, err, tc.renew, tc.retry, tc.margin)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	ok := func() Config {
		return Config{Client: fake.NewClientBuilder().Build(), Namespace: "jobs", Name: "job", Identity: "worker-1",
			Callbacks: Callbacks{OnStartedLeading: func(context.Context, int64) {}}}
	}
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"valid", func(*Config) {}, ""},
		{"no client", func(c *Config) { c.Client = nil }, "Client is required"},
		{"no name", func(c *Config) { c.Name = "" }, "Namespace and Name of the FencedLease are required"},
		{"bad identity", func(c *Config) { c.Identity = "Worker_1!" }, `Identity "Worker_1!" is invalid`},
		{"no OnStartedLeading", func(c *Config) { c.Callbacks.OnStartedLeading = nil }, "Callbacks.OnStartedLeading is required"},
		{"negative retry", func(c *Config) { c.RetryInterval = -time.Second }, "RetryInterval is -1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok()
			tc.change(&c)
			err := c.validate()
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("validate() = %v, want %q", err, tc.want)
			}
		})
	}
}

// The Elector counts with the skew and commit lag the operator published in
// the lease's status, or with its own if larger; a status of an earlier
// release (none published) leaves the configured ones, or the defaults.
func TestConfigCountsWithThePublishedSkewAndLag(t *testing.T) {
	sent := time.Unix(1e9, 0)
	l := 2 * time.Second
	deadline := func(c Config, st *coordv1alpha1.FencedLeaseStatus) time.Duration {
		t.Helper()
		cfg := c.published(st)
		d, err := cfg.Deadline(sent, l)
		if err != nil {
			t.Fatal(err)
		}
		return l - d.Sub(sent) // the margin
	}
	for _, c := range []struct {
		name string
		cfg  Config
		st   *coordv1alpha1.FencedLeaseStatus
		want time.Duration
	}{
		{"nothing published, nothing configured", Config{}, &coordv1alpha1.FencedLeaseStatus{}, 400 * time.Millisecond},
		{"published skew", Config{}, &coordv1alpha1.FencedLeaseStatus{ClockSkewMilliseconds: 150}, 500 * time.Millisecond},
		{"published skew below the configured one", Config{ClockSkew: 200 * time.Millisecond}, &coordv1alpha1.FencedLeaseStatus{ClockSkewMilliseconds: 150}, 600 * time.Millisecond},
		{"published lag, long lease", Config{}, &coordv1alpha1.FencedLeaseStatus{MaxCommitLagMilliseconds: 3000}, 400 * time.Millisecond},
	} {
		if got := deadline(c.cfg, c.st); got != c.want {
			t.Errorf("%s: margin %v, want %v", c.name, got, c.want)
		}
	}
	// A long lease's margin grows with a published commit lag.
	l = 30 * time.Second
	if got, want := deadline(Config{}, &coordv1alpha1.FencedLeaseStatus{MaxCommitLagMilliseconds: 3000}), 3200*time.Millisecond; got != want {
		t.Errorf("30s lease, published lag 3s: margin %v, want %v", got, want)
	}
	if got := (Config{}).published(&coordv1alpha1.FencedLeaseStatus{MaxCommitLagMilliseconds: 3000}).MaxCommitLag; got != 3*time.Second {
		t.Errorf("published lag 3s: the release waits %v", got)
	}
}

func TestConfigRefusesASessionOfAnotherNamespaceOrIdentity(t *testing.T) {
	start := func(context.Context, int64) {}
	for _, s := range []*Session{
		{Namespace: "other", Name: "s", Identity: "a"},
		{Namespace: "ns", Name: "s", Identity: "b"},
		{Namespace: "ns", Identity: "a"},
	} {
		s.Client = fake.NewClientBuilder().Build()
		_, err := New(Config{Client: fake.NewClientBuilder().Build(), Namespace: "ns", Name: "l", Identity: "a", Heartbeat: &Heartbeat{Session: s},
			Callbacks: Callbacks{OnStartedLeading: start}})
		if err == nil || !strings.Contains(err.Error(), "Heartbeat.Session") {
			t.Errorf("session %+v: %v, want refused", s, err)
		}
	}
}
