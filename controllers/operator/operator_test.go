package operator

import (
	"strings"
	"testing"
	"time"

	"github.com/kubefence/kubefence/controllers/fencedlease"
	"github.com/kubefence/kubefence/controllers/webhooks/fencing"
)

func valid() Options {
	o := DefaultOptions()
	o.Namespace = "kubefence-system"
	o.ControllerUsers = []string{"system:serviceaccount:kubefence-system:kubefence-controller-manager"}
	return o
}

// DefaultOptions are the deployed operator's defaults.
func TestDefaultOptions(t *testing.T) {
	o := DefaultOptions()
	if !o.Reconciler || !o.Webhooks || o.Timing != fencedlease.DefaultTiming() || o.WebhookSkew != fencing.DefaultSkew ||
		o.MaxConcurrentReconciles != fencedlease.DefaultMaxConcurrentReconciles ||
		o.Clock == nil ||
		strings.Join(o.CleanupUsers, ",") != strings.Join(fencing.DefaultCleanupUsers, ",") {
		t.Fatalf("DefaultOptions() = %+v", o)
	}
	o.CleanupUsers[0] = "changed"
	if fencing.DefaultCleanupUsers[0] == "changed" {
		t.Fatal("DefaultOptions shares fencing.DefaultCleanupUsers: changing the options changed the default")
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Options)
		want   string // "" for valid
	}{
		{"defaults with namespace and controller", func(*Options) {}, ""},
		{"no cleanup users, zero skew, no drift allowance", func(o *Options) {
			o.CleanupUsers, o.WebhookSkew, o.Timing = nil, 0, fencedlease.Timing{CommitLag: time.Second}
		}, ""},
		{"zero commit lag", func(o *Options) { o.Timing.CommitLag = 0 }, "Timing: --max-commit-lag must be > 0: it bounds admission-to-commit"},
		{"zero Timing", func(o *Options) { o.Timing = fencedlease.Timing{} }, "got 0s"},
		{"webhooks only need no namespace", func(o *Options) { o.Reconciler, o.Namespace = false, "" }, ""},
		{"reconciler only needs no controller users", func(o *Options) { o.Webhooks, o.ControllerUsers = false, nil }, ""},
		{"nothing enabled", func(o *Options) { o.Reconciler, o.Webhooks = false, false }, "nothing to set up"},
		{"zero Options", func(o *Options) { *o = Options{} }, "nothing to set up"},
		{"no namespace", func(o *Options) { o.Namespace = "" }, "Namespace is empty"},
		{"bad timing", func(o *Options) { o.Timing.DriftRatio = 1 }, "Timing: drift ratio 1 is out of range"},
		{"no controller users", func(o *Options) { o.ControllerUsers = nil }, "ControllerUsers is empty"},
		{"empty controller user", func(o *Options) { o.ControllerUsers = append(o.ControllerUsers, "") }, "ControllerUsers[1] is empty"},
		{"empty cleanup user", func(o *Options) { o.CleanupUsers = []string{""} }, "CleanupUsers[0] is empty"},
		{"empty admin group", func(o *Options) { o.AdminGroups = []string{"ops", ""} }, "AdminGroups[1] is empty"},
		{"negative skew", func(o *Options) { o.WebhookSkew = -time.Millisecond }, "WebhookSkew -1ms is negative"},
		{"no clock", func(o *Options) { o.Clock = nil }, "Clock is nil"},
		{"zero workers: the default", func(o *Options) { o.MaxConcurrentReconciles = 0 }, ""},
		{"negative workers", func(o *Options) { o.MaxConcurrentReconciles = -1 }, "MaxConcurrentReconciles -1 is negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := valid()
			tc.change(&o)
			err := o.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
