package operator

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kubefence/kubefence/controllers/fencedlease"
	"github.com/kubefence/kubefence/controllers/webhooks/fencing"
	"github.com/kubefence/kubefence/pkg/fence/timing"
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
	if !o.Reconciler || !o.Webhooks || o.Timing != fencedlease.DefaultTiming() || o.WebhookSkew != timing.DefaultSkew ||
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
		{"no controller users", func(o *Options) { o.ControllerUsers = nil }, "ServiceAccount and ControllerUsers are empty"},
		{"the service account alone", func(o *Options) { o.ControllerUsers, o.ServiceAccount = nil, "kubefence-controller-manager" }, ""},
		{"a service account without namespace", func(o *Options) { o.Reconciler, o.Namespace, o.ServiceAccount = false, "", "sa" }, `ServiceAccount "sa" without Namespace`},
		{"empty controller user", func(o *Options) { o.ControllerUsers = append(o.ControllerUsers, "") }, "ControllerUsers[1] is empty"},
		{"empty cleanup user", func(o *Options) { o.CleanupUsers = []string{""} }, "CleanupUsers[0] is empty"},
		{"empty admin group", func(o *Options) { o.AdminGroups = []string{"ops", ""} }, "AdminGroups[1] is empty"},
		{"negative skew", func(o *Options) { o.WebhookSkew = -time.Millisecond }, "WebhookSkew -1ms is negative"},
		{"no clock", func(o *Options) { o.Clock = nil }, "Clock is nil"},
		{"zero workers", func(o *Options) { o.MaxConcurrentReconciles = 0 }, "MaxConcurrentReconciles (--max-concurrent-reconciles) is 0: expected at least 1"},
		{"bad enforcement", func(o *Options) { o.Enforcement = "both" }, `Enforcement "both": expected "webhook" or "policy"`},
		{"bad barrier servers", func(o *Options) { o.BarrierServers = "all" }, `BarrierServers "all"`},
		{"required kinds in webhook mode", func(o *Options) { o.RequiredKinds = []schema.GroupResource{{Resource: "configmaps"}} }, "RequiredKinds is set in webhook mode"},
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

// BindFlags: every flag the deployed manifests and docs name, with
// DefaultOptions as defaults, writing into the options.
func TestBindFlags(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "")
	t.Setenv("POD_SERVICE_ACCOUNT", "")
	parse := func(t *testing.T, args ...string) (Options, error) {
		t.Helper()
		o := DefaultOptions()
		fs := flag.NewFlagSet("manager", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o.BindFlags(fs)
		return o, fs.Parse(args)
	}
	o, err := parse(t)
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultOptions()
	want.Namespace, want.ServiceAccount = "kubefence-system", "kubefence-controller-manager"
	if o.Namespace != want.Namespace || o.ServiceAccount != want.ServiceAccount || o.Timing != want.Timing ||
		o.WebhookSkew != want.WebhookSkew || o.MaxConcurrentReconciles != want.MaxConcurrentReconciles ||
		o.Enforcement != want.Enforcement || o.BarrierServers != want.BarrierServers ||
		!slices.Equal(o.CleanupUsers, want.CleanupUsers) || o.ControllerUsers != nil || o.AdminGroups != nil {
		t.Fatalf("defaults: got %+v, want %+v", o, want)
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("the flags' defaults do not validate: %v", err)
	}

	o, err = parse(t, "--namespace=ops", "--service-account=mgr", "--controller-user=alice", "--controller-user=bob",
		"--lease-admin-group=admins", "--fencing-cleanup-user=gc", "--enforcement=policy",
		"--required-fencing-kind=widgets.example.kubefence.io", "--required-fencing-kind=configmaps", "--barrier-servers=configured",
		"--max-concurrent-reconciles=4", "--max-commit-lag=2s", "--webhook-clock-skew=50ms", "--drift-ratio=0.01", "--min-drift=20ms")
	if err != nil {
		t.Fatal(err)
	}
	if got := o.controllerUsers(); !slices.Equal(got, []string{"system:serviceaccount:ops:mgr", "alice", "bob"}) {
		t.Errorf("controller users %v", got)
	}
	if !slices.Equal(o.AdminGroups, []string{"admins"}) || !slices.Equal(o.CleanupUsers, []string{"gc"}) ||
		o.Enforcement != EnforcementPolicy || o.BarrierServers != BarrierServersConfigured || o.MaxConcurrentReconciles != 4 ||
		o.Timing.CommitLag != 2*time.Second || o.WebhookSkew != 50*time.Millisecond || o.Timing.DriftRatio != 0.01 ||
		o.Timing.MinDrift != 20*time.Millisecond ||
		!slices.Equal(o.RequiredKinds, []schema.GroupResource{{Group: "example.kubefence.io", Resource: "widgets"}, {Resource: "configmaps"}}) {
		t.Errorf("parsed options %+v", o)
	}
	if err := o.Validate(); err != nil {
		t.Errorf("Validate() = %v", err)
	}

	if o, err = parse(t, "--fencing-cleanup-user=-"); err != nil || o.CleanupUsers != nil {
		t.Errorf(`--fencing-cleanup-user=-: users %v, error %v; want nobody`, o.CleanupUsers, err)
	}
	for _, args := range [][]string{
		{"--fencing-cleanup-user=gc", "--fencing-cleanup-user=-"},
		{"--fencing-cleanup-user=-", "--fencing-cleanup-user=gc"},
		{"--required-fencing-kind=Widgets"},
		{"--max-commit-lag=soon"},
	} {
		if _, err := parse(t, args...); err == nil {
			t.Errorf("%v parsed, want an error", args)
		} else {
			t.Logf("%v: %v", args, err)
		}
	}
	t.Setenv("POD_NAMESPACE", "from-env")
	if o, _ := parse(t); o.Namespace != "from-env" {
		t.Errorf("namespace %q, want $POD_NAMESPACE", o.Namespace)
	}
}
