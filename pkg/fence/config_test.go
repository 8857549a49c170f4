package fence

import (
	"context"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client/fake"
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
		{"renew plus margin reaches the lease", Config{RenewInterval: 9 * time.Second}, 10 * time.Second, 0, 0, 0,
			"RenewInterval 9s plus SafetyMargin 1s must be shorter than the lease duration 10s"},
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
