package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/test/testenv"
)

// TestCheckWithWebhook runs check against a second control plane that has
// the operator's webhook configurations: first with no webhook server behind
// them (the API server cannot call it), then with the operator's webhooks
// served in-process, as the deployed manager serves them.
func TestCheckWithWebhook(t *testing.T) {
	cluster, kc, ns := startWithWebhooks(t, "admin")
	c := cluster.Admin
	// A group served by an aggregated API server (spec.service set): policy
	// mode does not fence its kinds, and check says so. Nothing serves it.
	aggregated := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": "v1." + aggregatedGroup},
		"spec": map[string]any{"group": aggregatedGroup, "version": "v1", "groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
			"insecureSkipTLSVerify": true, "service": map[string]any{"namespace": "default", "name": "no-such-server", "port": int64(443)}},
	}}
	if err := c.Create(t.Context(), aggregated); err != nil {
		t.Fatal(err)
	}

	// The webhook configurations are there, nothing serves them.
	_, _, err := fenceWith(t, kc, "check", "-n", ns.Name)
	if err == nil || !strings.Contains(err.Error(), "kubefence is not ready: FencedLease webhook: the API server cannot call it") ||
		!strings.Contains(err.Error(), "are the manager pods running and ready") {
		t.Errorf("check with the webhook down: %v, want that the API server cannot call it", err)
	}

	// check --wait is ready once the operator's webhooks serve.
	var out, errOut bytes.Buffer
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		done <- runFence(t.Context(), &out, &errOut, "--kubeconfig", kc, "check", "-n", ns.Name, "--wait=90s")
	}()
	time.Sleep(2 * time.Second) // check sees the webhook down first
	serveWebhooks(t, cluster, deployedController)

	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("check --wait=90s did not end")
	}
	t.Logf("check --wait took %s\n%s%s", time.Since(start), out.String(), errOut.String())
	if err != nil {
		t.Fatalf("check --wait with the webhooks served: %v", err)
	}
	testenv.WantContains(t, "check output", out.String(),
		"API: fencedleases.coordination.kubefence.io/v1alpha1 is served",
		"FencedLease webhook: answers (it refused a dry-run FencedLease with another user's request)",
		"fencing webhook: answers (it refused a dry-run ConfigMap guarded by a lease that does not exist)",
		"The kubefence API and webhooks are ready",
	)
	if !strings.Contains(errOut.String(), "Not ready yet: FencedLease webhook: the API server cannot call it") {
		t.Errorf("check --wait did not report the webhook down while waiting: %q", errOut.String())
	}
	if strings.Contains(errOut.String(), aggregatedGroup) {
		t.Errorf("check in webhook mode warned about the aggregated group %s (the webhook fences it): %q", aggregatedGroup, errOut.String())
	}

	// Policy mode: no webhook for FencedLeases or guarded objects, the
	// operator's ValidatingAdmissionPolicies judge them inside the API server.
	var hooks admissionregistrationv1.ValidatingWebhookConfigurationList
	if err := c.List(t.Context(), &hooks); err != nil {
		t.Fatal(err)
	}
	for i := range hooks.Items {
		if err := c.Delete(t.Context(), &hooks.Items[i]); err != nil {
			t.Fatal(err)
		}
	}
	o := cluster.Operator()
	o.Namespace, o.ControllerUsers = "kubefence-system", []string{deployedController}
	o.Enforcement = operator.EnforcementPolicy
	if err := o.PolicySettings().Apply(t.Context(), c); err != nil {
		t.Fatalf("applying the policies of policy mode: %v", err)
	}
	out.Reset()
	errOut.Reset()
	if err := runFence(t.Context(), &out, &errOut, "--kubeconfig", kc, "check", "-n", ns.Name, "--wait=60s"); err != nil {
		t.Fatalf("check in policy mode: %v\n%s%s", err, out.String(), errOut.String())
	}
	testenv.WantContains(t, "check output in policy mode", out.String(),
		"FencedLease policy: answers (policy mode: kubefence-fencedleases refused a dry-run FencedLease with another user's request)",
		"fencing policy: answers (policy mode: kubefence-fencing refused a dry-run ConfigMap guarded by a lease that does not exist)",
	)
	testenv.WantContains(t, "check warnings in policy mode", errOut.String(),
		"Warning: policy mode does not fence group "+aggregatedGroup+": APIService v1."+aggregatedGroup+" has it served by the aggregated API server default/no-such-server",
		"docs/design.md",
	)
	if n := strings.Count(errOut.String(), "Warning: policy mode does not fence group"); n != 1 {
		t.Errorf("check in policy mode warned about %d groups, want 1 (%s; the built-in groups' APIServices have no service): %q", n, aggregatedGroup, errOut.String())
	}
}

// aggregatedGroup is the group of the test's aggregated APIService.
const aggregatedGroup = "aggregated.example.kubefence.io"

// TestCheckWarnsAboutSharedServiceAccounts: check warns about every lease
// without Pod binding requested by a service account, with the number of
// pods that run as it (pods sharing a service account pass each other's
// tokenless checks), and suggests identityBinding: Pod; a lease with Pod
// binding, and one requested by a user that is not a service account, are
// not named. The warning comes whatever the outcome (here no webhook
// answers, so check fails).
func TestCheckWarnsAboutSharedServiceAccounts(t *testing.T) {
	ns := newNamespace(t)
	ctx := t.Context()
	if err := k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "worker"}}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"worker-a", "worker-b"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{
			ServiceAccountName: "worker", Containers: []corev1.Container{{Name: "c", Image: "worker"}}}}
		if err := k8s.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	sa := "system:serviceaccount:" + ns + ":worker"
	request := func(id, user string) []coordv1alpha1.LeaseRequest {
		return []coordv1alpha1.LeaseRequest{{HolderIdentity: id, User: user}}
	}
	createLease(t, ns, "shared", coordv1alpha1.FencedLeaseSpec{Requests: request("worker-a", sa)}, coordv1alpha1.FencedLeaseStatus{})
	createLease(t, ns, "bound", coordv1alpha1.FencedLeaseSpec{IdentityBinding: coordv1alpha1.IdentityBindingPod, Requests: request("worker-a", sa)}, coordv1alpha1.FencedLeaseStatus{})
	createLease(t, ns, "people", coordv1alpha1.FencedLeaseSpec{Requests: request("alice", "alice")}, coordv1alpha1.FencedLeaseStatus{})

	_, stderr, err := fence(t, "check", "-n", ns)
	if err == nil {
		t.Errorf("check without webhooks succeeded")
	}
	testenv.WantContains(t, "check's warnings", stderr,
		"Warning: lease "+ns+"/shared (identityBinding: None) is requested by service account "+sa+", which 2 pods run as now: pods that run as one service account pass each other's tokenless fencing checks",
		"set identityBinding: Pod on the lease",
	)
	for _, lease := range []string{ns + "/bound", ns + "/people"} {
		if strings.Contains(stderr, "lease "+lease+" ") {
			t.Errorf("check warns about lease %s:\n%s", lease, stderr)
		}
	}
}

// TestCheckTellsMissingAndSkippingWebhooks runs check as a user the
// FencedLease webhook trusts as the controller, whose probe the webhook
// allows, so check must find the webhook configuration that covers it:
// honouring each webhook's selectors and matchConditions (the fencing
// webhook's guarded entry covers every resource but its matchCondition skips
// FencedLeases), and telling a deleted configuration from a live one.
func TestCheckTellsMissingAndSkippingWebhooks(t *testing.T) {
	const trusted = "trusted-operator"
	cluster, kc, ns := startWithWebhooks(t, trusted)
	c := cluster.Admin
	serveWebhooks(t, cluster, trusted)

	// Live: the trusted user's probe is allowed by the FencedLease webhook.
	out, _, err := fenceWith(t, kc, "check", "-n", ns.Name, "--wait=60s")
	if err != nil {
		t.Fatalf("check with the webhooks served: %v", err)
	}
	testenv.WantContains(t, "check output", out, `FencedLease webhook: answers (validating-webhook-configuration "vfencedlease-v1alpha1.kb.io" accepted a dry-run create`)

	// A matchCondition that skips the probe: the webhook never sees it.
	var hooks admissionregistrationv1.ValidatingWebhookConfiguration
	if err := c.Get(t.Context(), client.ObjectKey{Name: "validating-webhook-configuration"}, &hooks); err != nil {
		t.Fatal(err)
	}
	hooks.Webhooks[0].MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "not-check-probes",
		Expression: "!has(object.metadata.generateName) || !object.metadata.generateName.startsWith('kubectl-fence-check')"}}
	if err := c.Update(t.Context(), &hooks); err != nil {
		t.Fatal(err)
	}
	_, _, err = fenceWith(t, kc, "check", "-n", ns.Name)
	if err == nil || !strings.Contains(err.Error(), `matchCondition "not-check-probes" of webhook "vfencedlease-v1alpha1.kb.io" (validating-webhook-configuration) is false for it`) {
		t.Errorf("check with a matchCondition that skips the probe: %v, want it named", err)
	}
	// A user the webhook does not trust gets the same answer: the webhook
	// is not called, so nothing refuses the probe.
	untrusted, err := cluster.Kubeconfig(t.TempDir(), "someone", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = fenceWith(t, untrusted, "check", "-n", ns.Name)
	if err == nil || !strings.Contains(err.Error(), `matchCondition "not-check-probes"`) {
		t.Errorf("check as an untrusted user with a matchCondition that skips the probe: %v, want it named", err)
	}

	// Deleted: no configuration covers FencedLeases any more. The guarded
	// fencing webhook covers every resource, but its objectSelector and its
	// matchCondition skip FencedLeases: check must not take it for the
	// FencedLease webhook.
	if err := c.Delete(t.Context(), &hooks); err != nil {
		t.Fatal(err)
	}
	_, _, err = fenceWith(t, kc, "check", "-n", ns.Name)
	if err == nil || !strings.Contains(err.Error(), "FencedLease webhook: missing:") ||
		!strings.Contains(err.Error(), `"guarded.fencing.kubefence.io"`) {
		t.Errorf("check after the FencedLease webhook configuration was deleted: %v, want it reported missing (and the guarded webhook named as not covering it)", err)
	}
}

// deployedController is the deployed operator's ServiceAccount, the
// controller user its webhooks trust.
const deployedController = "system:serviceaccount:kubefence-system:kubefence-controller-manager"

// startWithWebhooks starts a control plane of its own with the operator's
// webhook configurations, stopped when t ends, and returns it with a
// kubeconfig acting as user (in system:masters) and a new namespace.
func startWithWebhooks(t *testing.T, user string) (c *testenv.Cluster, kubeconfig string, ns *corev1.Namespace) {
	t.Helper()
	testenv.SkipIfShort(t)
	c, err := testenv.Start(t.Context(), testenv.Input{Root: filepath.Join("..", ".."), CRDs: true, Webhooks: true})
	if err != nil {
		t.Fatalf("starting a control plane with the webhook configurations: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})
	if kubeconfig, err = c.Kubeconfig(t.TempDir(), user, "system:masters"); err != nil {
		t.Fatal(err)
	}
	ns = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "check-"}}
	if err := c.Admin.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	return c, kubeconfig, ns
}

// serveWebhooks serves the operator's webhooks alone, trusting controller as
// the controller, until t ends.
func serveWebhooks(t *testing.T, c *testenv.Cluster, controller string) {
	t.Helper()
	o := c.Webhooks()
	o.ControllerUsers = []string{controller}
	if _, err := c.ServeOperator(t.Context(), o, nil); err != nil {
		t.Fatal(err)
	}
}
