package main

// The plugin's tests run it in-process against a real kube-apiserver and etcd
// (envtest) with the FencedLease and Widget CRDs installed. There is no
// controller and no webhook: each test writes the lease status it needs
// through the status subresource, as the controller would.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	testclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/test/testenv"
)

var (
	// k8s is an admin client for setting up state.
	k8s client.Client
	// kubeconfig is the admin user's kubeconfig file the plugin runs with.
	kubeconfig string
	// assets is the envtest binary directory (kube-apiserver, etcd, kubectl).
	assets string
	// now is the plugin's (fake) clock in every test.
	now = time.Now().UTC().Truncate(time.Second)
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kubectl-fence-test-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "creating temp dir: %v\n", err)
		os.Exit(1)
	}
	code := testenv.Run(m, testenv.Input{Root: filepath.Join("..", ".."), CRDs: true, Setup: func(_ context.Context, c *testenv.Cluster) error {
		return setup(c, dir)
	}})
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// setup makes the admin client and the admin's kubeconfig the plugin runs with.
func setup(c *testenv.Cluster, dir string) error {
	k8s = c.Admin
	assets = os.Getenv("KUBEBUILDER_ASSETS")
	var err error
	kubeconfig, err = c.Kubeconfig(dir, "admin", "system:masters")
	return err
}

// fence runs `kubectl fence args...` in-process as the admin user.
func fence(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return fenceWith(t, kubeconfig, args...)
}

// fenceWith runs the plugin with another kubeconfig.
func fenceWith(t *testing.T, kc string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	testenv.SkipIfShort(t)
	var out, errOut bytes.Buffer
	err = runFence(context.Background(), &out, &errOut, append([]string{"--kubeconfig", kc}, args...)...)
	t.Logf("kubectl fence %s\n%s%s", strings.Join(args, " "), out.String(), errOut.String())
	return out.String(), errOut.String(), err
}

// runFence runs the plugin with exactly args until it ends or ctx does.
func runFence(ctx context.Context, out, errOut io.Writer, args ...string) error {
	streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: out, ErrOut: errOut}
	cmd := newRootCmd(streams, testclock.NewFakePassiveClock(now))
	cmd.SetArgs(args)
	return cmd.ExecuteContext(ctx)
}

// mustFence runs the plugin and fails the test on an error.
func mustFence(t *testing.T, args ...string) string {
	t.Helper()
	out, _, err := fence(t, args...)
	if err != nil {
		t.Fatalf("kubectl fence %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// newNamespace creates a fresh namespace for one test. envtest runs no
// namespace controller, so namespaces stay until the suite's etcd goes away.
func newNamespace(t *testing.T) string {
	t.Helper()
	testenv.SkipIfShort(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "fence-test-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return ns.Name
}

// at is a controller timestamp relative to the test's now.
func at(d time.Duration) *metav1.MicroTime {
	t := metav1.NewMicroTime(now.Add(d))
	return &t
}

// requests builds spec.requests, each made by a user named after the holder.
func requests(ids ...string) []coordv1alpha1.LeaseRequest {
	var out []coordv1alpha1.LeaseRequest
	for _, id := range ids {
		out = append(out, coordv1alpha1.LeaseRequest{HolderIdentity: id, User: "user-" + id})
	}
	return out
}

// held is the Held condition with a reason.
func held(status metav1.ConditionStatus, reason string) []metav1.Condition {
	return []metav1.Condition{{
		Type: coordv1alpha1.ConditionHeld, Status: status, Reason: reason, Message: "set by the test",
		LastTransitionTime: metav1.NewTime(now.Add(-time.Minute)),
	}}
}

// createLease creates a lease and writes its status as the controller would.
func createLease(t *testing.T, ns, name string, spec coordv1alpha1.FencedLeaseSpec, status coordv1alpha1.FencedLeaseStatus) *coordv1alpha1.FencedLease {
	t.Helper()
	ctx := context.Background()
	l := &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
	if err := k8s.Create(ctx, l); err != nil {
		t.Fatalf("creating lease %s: %v", name, err)
	}
	if status.ObservedGeneration == 0 && status.HolderIdentity == "" && status.FencingToken == 0 && len(status.Conditions) == 0 {
		return l
	}
	l.Status = status
	if err := k8s.Status().Update(ctx, l); err != nil {
		t.Fatalf("writing status of lease %s: %v", name, err)
	}
	return l
}

// heldLease is a lease the controller granted to the first of ids with
// token 7, expiring 4.2s from now; the others wait.
func heldLease(t *testing.T, ns, name string, ids ...string) *coordv1alpha1.FencedLease {
	t.Helper()
	var waiting []coordv1alpha1.WaitingRequest
	for _, id := range ids[1:] {
		waiting = append(waiting, coordv1alpha1.WaitingRequest{HolderIdentity: id, Since: *at(-30 * time.Second)})
	}
	return createLease(t, ns, name,
		coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: 15, Requests: requests(ids...)},
		coordv1alpha1.FencedLeaseStatus{
			HolderIdentity: ids[0], FencingToken: 7, LeaseDurationSeconds: 15,
			AcquireTime: at(-time.Minute), RenewTime: at(-12800 * time.Millisecond), ExpireTime: at(4200 * time.Millisecond),
			RenewSequence: 3, LeaseTransitions: 3, Waiting: waiting, ObservedGeneration: 1,
			Conditions: held(metav1.ConditionTrue, coordv1alpha1.ReasonGranted),
		})
}

// table cuts a table into cells at the header's column offsets, so an empty
// cell or a cell with spaces stays one cell. Rows are keyed by their NAME cell,
// or their first cell when there is no NAME column.
func table(t *testing.T, out string) (header []string, rows map[string]map[string]string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	header = strings.Fields(lines[0])
	starts := make([]int, len(header))
	from := 0
	for i, h := range header {
		at := strings.Index(lines[0][from:], h)
		if at < 0 {
			t.Fatalf("header %q not found in %q", h, lines[0])
		}
		starts[i] = from + at
		from = starts[i] + len(h)
	}
	key := header[0]
	if slices.Contains(header, "NAME") {
		key = "NAME"
	}
	rows = map[string]map[string]string{}
	for _, line := range lines[1:] {
		row := map[string]string{}
		for i, start := range starts {
			end := len(line)
			if i+1 < len(starts) && starts[i+1] < end {
				end = starts[i+1]
			}
			if start < end {
				row[header[i]] = strings.TrimSpace(line[start:end])
			}
		}
		rows[row[key]] = row
	}
	return header, rows
}

// assertRow checks the named cells of a table row.
func assertRow(t *testing.T, rows map[string]map[string]string, key string, want map[string]string) {
	t.Helper()
	row, ok := rows[key]
	if !ok {
		t.Fatalf("no row %q in %v", key, rows)
	}
	for col, v := range want {
		if row[col] != v {
			t.Errorf("row %q column %s = %q, want %q", key, col, row[col], v)
		}
	}
}

// block returns the lines of a describe section ("Waiting (2):") up to the
// next blank line, without the title.
func block(t *testing.T, out, title string) string {
	t.Helper()
	_, rest, ok := strings.Cut(out, "\n"+title+" (")
	if !ok {
		t.Fatalf("no section %q in:\n%s", title, out)
	}
	_, rest, _ = strings.Cut(rest, "\n")
	body, _, _ := strings.Cut(rest, "\n\n")
	return body
}
