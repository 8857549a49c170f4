package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/hack/devenv"
)

func TestGetOutputFormats(t *testing.T) {
	ns := listFixture(t)
	lines := func(s string) []string { return strings.Split(strings.TrimSpace(s), "\n") }

	// -o name, as kubectl get prints it.
	want := []string{
		"fencedlease.coordination.kubefence.io/alpha",
		"fencedlease.coordination.kubefence.io/beta",
		"fencedlease.coordination.kubefence.io/gamma",
	}
	if got := lines(mustFence(t, "get", "-n", ns, "-o", "name")); !slices.Equal(got, want) {
		t.Errorf("-o name = %q, want %q", got, want)
	}

	// -o jsonpath, over the list.
	out := mustFence(t, "get", "-n", ns, "-o", `jsonpath={range .items[*]}{.metadata.name}={.status.holderIdentity}/{.status.fencingToken}{"\n"}{end}`)
	if got, want := lines(out), []string{"alpha=a/7", "beta=/4", "gamma=/"}; !slices.Equal(got, want) {
		t.Errorf("-o jsonpath = %q, want %q", got, want)
	}
	// On one lease by name, the object itself.
	if out := mustFence(t, "get", "alpha", "-n", ns, "-o", "jsonpath={.spec.requests[*].holderIdentity}"); out != "a b c" {
		t.Errorf("-o jsonpath on one lease = %q, want %q", out, "a b c")
	}

	// -o go-template, and --template.
	if out := mustFence(t, "get", "-n", ns, "-o", "go-template={{range .items}}{{.metadata.name}} {{end}}"); out != "alpha beta gamma " {
		t.Errorf("-o go-template = %q", out)
	}
	if out := mustFence(t, "get", "beta", "-n", ns, "-o", "go-template", "--template", "{{.status.fencingToken}}"); out != "4" {
		t.Errorf("-o go-template --template = %q, want 4", out)
	}

	// -o json and -o yaml of one lease: the object, with its kind.
	var one coordv1alpha1.FencedLease
	if err := json.Unmarshal([]byte(mustFence(t, "get", "alpha", "-n", ns, "-o", "json")), &one); err != nil {
		t.Fatalf("-o json of one lease does not parse as a FencedLease: %v", err)
	}
	if one.Kind != "FencedLease" || one.APIVersion != coordv1alpha1.GroupVersion.String() || one.Name != "alpha" || one.Status.FencingToken != 7 || one.ManagedFields != nil {
		t.Errorf("-o json of one lease = %s %s %s token %d managedFields %v", one.APIVersion, one.Kind, one.Name, one.Status.FencingToken, one.ManagedFields)
	}
	var fromYAML coordv1alpha1.FencedLease
	if err := yaml.UnmarshalStrict([]byte(mustFence(t, "get", "beta", "-n", ns, "-o", "yaml")), &fromYAML); err != nil {
		t.Fatalf("-o yaml of one lease does not parse: %v", err)
	}
	if fromYAML.Name != "beta" || fromYAML.Status.LockDelayUntil == nil {
		t.Errorf("-o yaml of one lease = %+v", fromYAML)
	}
	if slices.Contains(newPrintFlags().formats(), "kyaml") {
		var fromKYAML coordv1alpha1.FencedLeaseList
		if err := yaml.Unmarshal([]byte(mustFence(t, "get", "-n", ns, "-o", "kyaml")), &fromKYAML); err != nil || len(fromKYAML.Items) != 3 {
			t.Errorf("-o kyaml: %d items, %v", len(fromKYAML.Items), err)
		}
	}

	// --no-headers, plain and wide.
	rows := lines(mustFence(t, "get", "-n", ns, "--no-headers"))
	if len(rows) != 3 || !strings.HasPrefix(rows[0], "alpha ") || strings.Contains(rows[0], "NAME") {
		t.Errorf("--no-headers = %q, want three rows without a header", rows)
	}
	rows = lines(mustFence(t, "get", "-n", ns, "--no-headers", "-o", "wide"))
	if f := strings.Fields(rows[0]); len(rows) != 3 || len(f) < 2 || f[len(f)-2] != "b,c" || f[len(f)-1] != "<none>" {
		t.Errorf("--no-headers -o wide = %q, want waiters and previous holder last", rows)
	}

	// One lease by name is one row; several names keep their order.
	_, byName := table(t, mustFence(t, "get", "beta", "-n", ns))
	if len(byName) != 1 {
		t.Errorf("get beta printed %d rows, want 1: %v", len(byName), byName)
	}
	assertRow(t, byName, "beta", map[string]string{"TOKEN": "4", "STATUS": "LockDelay"})
	if got := lines(mustFence(t, "get", "gamma", "alpha", "-n", ns, "-o", "name")); !slices.Equal(got, []string{want[2], want[0]}) {
		t.Errorf("get gamma alpha -o name = %q", got)
	}

	// --show-labels adds the labels column.
	header, _ := table(t, mustFence(t, "get", "-n", ns, "--show-labels"))
	if header[len(header)-1] != "LABELS" {
		t.Errorf("--show-labels header = %v, want LABELS last", header)
	}
}

// waitForLine waits until out has a line for which match holds.
func waitForLine(t *testing.T, out *devenv.Buffer, what string, match func(fields []string) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, line := range strings.Split(out.String(), "\n") {
			if match(strings.Fields(line)) {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the watch never printed %s; it printed:\n%s", what, out.String())
}

// watchFence starts `kubectl fence args...` (a watch) and returns its output
// and a stop function that ends it and returns its error.
func watchFence(t *testing.T, args ...string) (*devenv.Buffer, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	out, errOut := &devenv.Buffer{}, &devenv.Buffer{}
	done := make(chan error, 1)
	go func() { done <- runFence(ctx, out, errOut, append([]string{"--kubeconfig", kubeconfig}, args...)...) }()
	return out, func() error {
		cancel()
		select {
		case err := <-done:
			t.Logf("kubectl fence %s\n%s%s", strings.Join(args, " "), out.String(), errOut.String())
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("the watch did not end when its context was cancelled")
			return nil
		}
	}
}

func TestGetWatch(t *testing.T) {
	ns := newNamespace(t)
	jobs := heldLease(t, ns, "jobs", "a", "b")
	other := heldLease(t, ns, "other", "x")

	out, stop := watchFence(t, "get", "-n", ns, "-w")
	waitForLine(t, out, "the listed row of jobs", func(f []string) bool { return len(f) > 2 && f[0] == "jobs" && f[1] == "a" && f[2] == "7" })

	// The controller hands jobs over to b with token 8.
	jobs.Status.HolderIdentity, jobs.Status.FencingToken, jobs.Status.LeaseTransitions = "b", 8, 4
	if err := k8s.Status().Update(t.Context(), jobs); err != nil {
		t.Fatal(err)
	}
	waitForLine(t, out, "jobs held by b with token 8", func(f []string) bool {
		return len(f) > 4 && f[0] == "jobs" && f[1] == "b" && f[2] == "8" && f[4] == "4"
	})
	if err := stop(); err != nil {
		t.Errorf("the watch ended with %v, want nil on cancel", err)
	}
	if n := strings.Count(out.String(), "NAME "); n != 1 {
		t.Errorf("the watch printed the header %d times, want once:\n%s", n, out.String())
	}

	// By name, -o name: only that lease's changes.
	out, stop = watchFence(t, "get", "other", "-n", ns, "-w", "-o", "name")
	waitForLine(t, out, "other", func(f []string) bool { return len(f) == 1 && f[0] == "fencedlease.coordination.kubefence.io/other" })
	jobs.Status.FencingToken = 9
	if err := k8s.Status().Update(t.Context(), jobs); err != nil {
		t.Fatal(err)
	}
	other.Status.FencingToken = 8
	if err := k8s.Status().Update(t.Context(), other); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(out.String(), "/other") < 2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Errorf("the watch ended with %v", err)
	}
	if got := out.String(); strings.Count(got, "/other") != 2 || strings.Contains(got, "/jobs") {
		t.Errorf("get other -w -o name printed %q, want other twice (listed, changed) and never jobs", got)
	}

	// --watch-only -o json: only the change, as an object.
	out, stop = watchFence(t, "get", "-n", ns, "--watch-only", "-o", "json")
	// Nothing is listed; once the watch is established a change shows.
	deadline = time.Now().Add(30 * time.Second)
	for tok := int64(10); !strings.Contains(out.String(), `"fencingToken": `); tok++ {
		if time.Now().After(deadline) {
			t.Fatalf("--watch-only never printed a change:\n%s", out.String())
		}
		jobs.Status.FencingToken = tok
		if err := k8s.Status().Update(t.Context(), jobs); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Errorf("the watch ended with %v", err)
	}
	var first coordv1alpha1.FencedLease
	if err := json.NewDecoder(strings.NewReader(out.String())).Decode(&first); err != nil || first.Name != "jobs" || first.Status.FencingToken < 10 {
		t.Errorf("--watch-only -o json printed %s %d (%v), want jobs with token 10 or more", first.Name, first.Status.FencingToken, err)
	}
	if strings.Contains(out.String(), `"name": "other"`) {
		t.Errorf("--watch-only printed the unchanged lease other:\n%s", out.String())
	}
}

func TestCacheDirIsGone(t *testing.T) {
	if _, _, err := fence(t, "get", "--cache-dir", t.TempDir()); err == nil || !strings.Contains(err.Error(), "unknown flag: --cache-dir") {
		t.Errorf("--cache-dir: %v, want unknown flag", err)
	}
	if out := mustFence(t, "get", "--help"); strings.Contains(out, "cache-dir") {
		t.Errorf("get --help still offers --cache-dir:\n%s", out)
	}
}
