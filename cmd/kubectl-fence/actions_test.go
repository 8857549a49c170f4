package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/test/testenv"
)

// readLease reads a lease as the admin.
func readLease(t *testing.T, ns, name string) *coordv1alpha1.FencedLease {
	t.Helper()
	var l coordv1alpha1.FencedLease
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &l); err != nil {
		t.Fatal(err)
	}
	return &l
}

func TestDryRunLeavesTheLeaseUnchanged(t *testing.T) {
	ns := newNamespace(t)
	before := heldLease(t, ns, "jobs", "a", "b", "c")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"release", "jobs", "--holder", "a", "--dry-run=server"}, "released holder a (token 7); b is next (server dry run)\n"},
		{[]string{"release", "jobs", "--holder", "b", "--dry-run=client"}, "withdrew the waiting request of b (dry run)\n"},
		{[]string{"release", "jobs", "--holder", "a", "--dry-run"}, "released holder a (token 7); b is next (dry run)\n"},
		{[]string{"handover", "jobs", "--to", "c", "--dry-run=server"}, "released holder a (token 7); c is next (server dry run)\n"},
		{[]string{"handover", "jobs", "--to", "c", "--dry-run=client"}, "released holder a (token 7); c is next (dry run)\n"},
	} {
		out := mustFence(t, append(tc.args, "-n", ns)...)
		if !strings.HasSuffix(out, tc.want) {
			t.Errorf("%v printed %q, want it to end with %q", tc.args, out, tc.want)
		}
	}
	after := readLease(t, ns, "jobs")
	if after.ResourceVersion != before.ResourceVersion || strings.Join(queue(t, ns, "jobs"), ",") != "a,b,c" {
		t.Errorf("a dry run changed the lease: resourceVersion %s -> %s, requests %v", before.ResourceVersion, after.ResourceVersion, queue(t, ns, "jobs"))
	}
	if evs := operatorEvents(t, ns); len(evs) != 0 {
		t.Errorf("a dry run recorded events: %+v", evs)
	}

	// A dry run checks as much as the real action.
	if _, _, err := fence(t, "handover", "jobs", "--to", "zz", "--dry-run=server", "-n", ns); err == nil || !strings.Contains(err.Error(), `"zz" is not waiting`) {
		t.Errorf("dry-run handover to a stranger: %v", err)
	}
	if _, _, err := fence(t, "release", "jobs", "--holder", "a", "--dry-run=maybe", "-n", ns); err == nil ||
		!strings.Contains(err.Error(), `invalid --dry-run value "maybe": must be "none", "server", or "client"`) {
		t.Errorf("--dry-run=maybe: %v", err)
	}
}

func TestRaiseFloor(t *testing.T) {
	ns := newNamespace(t)
	l := heldLease(t, ns, "jobs", "a")
	l.Status.TokenBase = 3
	l.Status.PreviousHolder = &coordv1alpha1.PreviousHolder{HolderIdentity: "z", FencingToken: 6, EndTime: *at(-time.Minute), Reason: coordv1alpha1.EndReasonReleased}
	if err := k8s.Status().Update(t.Context(), l); err != nil {
		t.Fatal(err)
	}
	// After a restore: a Widget carries token 12, which the lease has not issued.
	widget(t, ns, "w-current", "jobs", "7")
	widget(t, ns, "w-ahead", "jobs", "12")
	widget(t, ns, "w-garbage", "jobs", "9999999999999999999999")
	widget(t, ns, "w-other", "other", "500")
	guardedConfigMap(t, ns, "settings", "jobs", "9")

	out := mustFence(t, "raise-floor", "jobs", "--margin", "100", "-n", ns)
	testenv.WantContains(t, "raise-floor output", out,
		"fencedlease "+ns+"/jobs: spec.minFencingToken raised from 0 to 112 (highest token seen: 12, on Widget.example.kubefence.io w-ahead; margin 100)",
		"The current tenure (a, token 7) keeps its token until it ends; end it with: kubectl fence release jobs -n "+ns+" --holder a",
	)
	if got := readLease(t, ns, "jobs").Spec.MinFencingToken; got != 112 {
		t.Fatalf("minFencingToken = %d, want 112", got)
	}

	// The floor counts as a token seen: a second run raises it by the margin
	// again (the floor only goes up, so every run writes a higher one).
	out = mustFence(t, "raise-floor", "jobs", "--margin", "100", "-n", ns)
	if !strings.Contains(out, "raised from 112 to 212 (highest token seen: 112, spec.minFencingToken; margin 100)") {
		t.Errorf("second raise-floor printed %q", out)
	}
	floor := readLease(t, ns, "jobs").Spec.MinFencingToken
	if floor != 212 {
		t.Errorf("minFencingToken = %d after the second run, want 212", floor)
	}

	// --known (Prometheus's maximum) counts too; a dry run writes nothing.
	out = mustFence(t, "raise-floor", "jobs", "--known", "5000", "--margin", "1000", "--dry-run=server", "-n", ns)
	if !strings.Contains(out, "raised from "+itoa64(floor)+" to 6000 (highest token seen: 5000, --known; margin 1000) (server dry run)") {
		t.Errorf("dry-run raise-floor printed %q", out)
	}
	if got := readLease(t, ns, "jobs").Spec.MinFencingToken; got != floor {
		t.Errorf("a dry run changed minFencingToken to %d, want %d", got, floor)
	}
	mustFence(t, "raise-floor", "jobs", "--known", "5000", "--margin", "1000", "-n", ns)
	if got := readLease(t, ns, "jobs").Spec.MinFencingToken; got != 6000 {
		t.Errorf("minFencingToken = %d, want 6000", got)
	}

	// A lease that never issued a token gets the default margin.
	createLease(t, ns, "fresh", coordv1alpha1.FencedLeaseSpec{}, coordv1alpha1.FencedLeaseStatus{})
	mustFence(t, "raise-floor", "fresh", "-n", ns)
	if got := readLease(t, ns, "fresh").Spec.MinFencingToken; got != defaultMargin {
		t.Errorf("fresh lease floor = %d, want %d", got, defaultMargin)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"raise-floor", "jobs", "--margin", "0"}, "--margin must be at least 1"},
		{[]string{"raise-floor", "jobs", "--known", "-5"}, "--known must be a token"},
		{[]string{"raise-floor", "jobs", "--known", "4611686018427387000"}, "would exceed the maximum minFencingToken 2^62"},
		{[]string{"raise-floor", "nope"}, `fencedlease "nope" not found in namespace "` + ns + `"`},
	} {
		if _, _, err := fence(t, append(tc.args, "-n", ns)...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}

func itoa64(i int64) string { b, _ := json.Marshal(i); return string(b) }

func TestCheckWithoutWebhook(t *testing.T) {
	ns := newNamespace(t)
	_, _, err := fence(t, "check", "-n", ns)
	if err == nil {
		t.Fatal("check passed without any webhook")
	}
	testenv.WantContains(t, "check error", err.Error(),
		"kubefence is not ready: FencedLease webhook: missing: a dry-run create of a FencedLease with another user's request was accepted unchecked",
		"no ValidatingWebhookConfiguration has a webhook whose rules cover it",
	)
	// It tries again until --wait is up.
	start := time.Now()
	_, errOut, err := fence(t, "check", "-n", ns, "--wait=3s")
	if err == nil || !strings.Contains(err.Error(), "kubefence is not ready after 3s: FencedLease webhook") {
		t.Errorf("check --wait=3s: %v", err)
	}
	if d := time.Since(start); d < 2*time.Second || d > 20*time.Second {
		t.Errorf("check --wait=3s took %s", d)
	}
	if !strings.Contains(errOut, "Not ready yet: FencedLease webhook") {
		t.Errorf("check --wait printed no progress: %q", errOut)
	}
	// The probes were dry runs.
	var leases coordv1alpha1.FencedLeaseList
	var cms corev1.ConfigMapList
	if err := k8s.List(t.Context(), &leases, client.InNamespace(ns)); err != nil || len(leases.Items) != 0 {
		t.Errorf("check left %d leases (%v)", len(leases.Items), err)
	}
	if err := k8s.List(t.Context(), &cms, client.InNamespace(ns), client.HasLabels{coordv1alpha1.GuardLeaseLabel}); err != nil || len(cms.Items) != 0 {
		t.Errorf("check left %d configmaps (%v)", len(cms.Items), err)
	}
}

func TestVersion(t *testing.T) {
	out := mustFence(t, "version", "--client")
	if !strings.HasPrefix(out, "Client Version: ") || strings.Contains(out, "Kubernetes") {
		t.Errorf("version --client = %q", out)
	}

	out = mustFence(t, "version")
	testenv.WantContains(t, "version without an operator", out, "Client Version: ", "Kubernetes Version: "+serverVersion(t)+"\n", "Operator Version: unknown (no manager Deployment labelled app.kubernetes.io/name=kubefence found)")

	// The operator's version is its manager image.
	ns := newNamespace(t)
	labels := map[string]string{"app.kubernetes.io/name": "kubefence", "control-plane": "controller-manager"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kubefence-controller-manager", Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{
					{Name: "sidecar", Image: "example.com/other:1"},
					{Name: "manager", Image: "registry.example.com/kubefence:v9.9.9"},
				}},
			},
		},
	}
	if err := k8s.Create(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(t.Context(), d) })
	var v versionInfo
	if err := json.Unmarshal([]byte(mustFence(t, "version", "-o", "json")), &v); err != nil {
		t.Fatalf("version -o json: %v", err)
	}
	if v.OperatorVersion != "registry.example.com/kubefence:v9.9.9" || v.OperatorDeployment != ns+"/kubefence-controller-manager" || v.ClientVersion == "" || v.KubernetesVersion != serverVersion(t) {
		t.Errorf("version -o json = %+v", v)
	}
}

// serverVersion is the API server's gitVersion, read with kubectl.
func serverVersion(t *testing.T) string {
	t.Helper()
	// kubectl exits 1 on a version it cannot parse (a source build's
	// v0.0.0-master), after printing it.
	out, err := exec.Command(filepath.Join(assets, "kubectl"), "--kubeconfig", kubeconfig, "version", "-o", "json").Output()
	t.Logf("kubectl version -o json: %v\n%s", err, out)
	var v struct {
		ServerVersion struct {
			GitVersion string `json:"gitVersion"`
		} `json:"serverVersion"`
	}
	if err := json.Unmarshal(out, &v); err != nil || v.ServerVersion.GitVersion == "" {
		t.Fatalf("kubectl version -o json printed no server version: %v", err)
	}
	return v.ServerVersion.GitVersion
}

func TestNoKubeconfig(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	_, _, err := fenceWith(t, empty, "get")
	if err == nil || !strings.Contains(err.Error(), "no cluster configured: the kubeconfig ("+empty+") is missing or names no cluster") ||
		!strings.Contains(err.Error(), "kubectl config current-context") {
		t.Errorf("get with an empty kubeconfig: %v, want a clear error", err)
	}
	// A server that does not answer gets kubectl's hint.
	_, _, err = fenceWith(t, empty, "get", "--server", "http://127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), "the connection to the server http://127.0.0.1:1 was refused - did you specify the right host or port?") {
		t.Errorf("get with a refused connection: %v", err)
	}
}
