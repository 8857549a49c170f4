package install

// `helm install` of dist/chart on a real API server, then `helm test`.
//
// envtest runs kube-apiserver and etcd, no kubelet: a Pod never runs. The
// test stands in for the kubelet for the chart's test Pod and nothing else:
// it waits for the Pod helm test creates, runs the Pod's command (its
// /kubectl-fence is this tree's plugin, built here) with the Pod's
// arguments, authenticated as the Pod's ServiceAccount (a token from the
// TokenRequest API, as the kubelet mounts one), and writes the Pod's status
// phase from the exit code (Succeeded on 0, else Failed), which is what
// helm test waits for. Nor does the API server reach Services: after the
// install the test points the chart's two webhook configurations at the
// operator's webhooks, served in this process (the handlers the manager
// serves), with envtest's serving certificate, as the suites of the
// webhooks do.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kubefence/kubefence/hack/devenv"
	"github.com/kubefence/kubefence/test/testenv"
)

func TestChartHelmTest(t *testing.T) {
	testenv.SkipIfShort(t)
	ctx := t.Context()
	scheme := devenv.NewScheme()
	dir := t.TempDir()
	cluster, kc := startInstaller(t, testenv.Input{Scheme: scheme, Configure: func(env *envtest.Environment) {
		// No webhook configurations (the chart installs them): only the
		// serving port and certificate for the in-process webhooks.
		env.WebhookInstallOptions = envtest.WebhookInstallOptions{LocalServingHost: "127.0.0.1"}
	}}, dir)
	env, c := cluster.Env, cluster.Admin
	plugin := filepath.Join(dir, "kubectl-fence")
	if b, err := exec.Command("go", "build", "-o", plugin, filepath.Join(root, "cmd", "kubectl-fence")).CombinedOutput(); err != nil {
		t.Fatalf("building kubectl-fence: %v\n%s", err, b)
	}
	helm := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, helmBin(t), append(args, "--kubeconfig", kc)...).CombinedOutput()
		t.Logf("helm %s:\n%s", strings.Join(args, " "), out)
		return string(out), err
	}

	out, err := helm("install", "kubefence", testenv.ChartWithoutKubeVersion(t, root, dir), "--namespace", releaseNamespace, "--create-namespace",
		"--set", "tests.timeout=10s", "--set", "image.repository="+testImageRepo)
	if err != nil {
		t.Fatalf("helm install: %v", err)
	}
	testenv.WantContains(t, "helm install's NOTES", out, "kubefence v0.1.0 is installed in namespace kubefence-system (release kubefence)",
		"enforcement: webhook", "helm test kubefence -n kubefence-system", "kubectl fence check --wait=2m -n default")

	// The operator's webhooks, served in process; the chart's configurations
	// pointed at them.
	o := cluster.Webhooks()
	o.ControllerUsers = []string{"system:serviceaccount:" + releaseNamespace + ":kubefence-controller-manager"}
	m, err := cluster.ServeOperator(ctx, o, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Stop(30 * time.Second); err != nil {
			t.Errorf("operator webhooks: %v", err)
		}
	})
	w := env.WebhookInstallOptions
	for _, name := range []string{"kubefence-validating-webhook-configuration", "kubefence-fencing-webhook-configuration"} {
		var h admissionregistrationv1.ValidatingWebhookConfiguration
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &h); err != nil {
			t.Fatalf("the chart installed no %s: %v", name, err)
		}
		for i := range h.Webhooks {
			cc := &h.Webhooks[i].ClientConfig
			path := *cc.Service.Path
			cc.Service, cc.URL, cc.CABundle = nil, ptr.To(fmt.Sprintf("https://%s:%d%s", w.LocalServingHost, w.LocalServingPort, path)), w.LocalServingCAData
		}
		if err := c.Update(ctx, &h); err != nil {
			t.Fatal(err)
		}
	}

	kubelet := startTestPodRunner(t, c, cluster.Config.Host, cluster.Config.CAData, plugin, dir)
	if out, err := helm("test", "kubefence", "--namespace", releaseNamespace, "--timeout", "2m"); err != nil {
		t.Fatalf("helm test with the webhooks answering: %v", err)
	} else {
		testenv.WantContains(t, "helm test", out, "TEST SUITE:     kubefence-test-check", "Phase:          Succeeded")
	}
	testenv.WantContains(t, "kubectl fence check in the test Pod", kubelet.output(),
		"FencedLease webhook: answers (it refused a dry-run FencedLease with another user's request)",
		"fencing webhook: answers (it refused a dry-run ConfigMap guarded by a lease that does not exist)",
		"The kubefence API and webhooks are ready")

	// The FencedLease webhook's configuration deleted: helm test fails.
	if err := c.Delete(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "kubefence-validating-webhook-configuration"}}); err != nil {
		t.Fatal(err)
	}
	out, err = helm("test", "kubefence", "--namespace", releaseNamespace, "--timeout", "2m")
	if err == nil {
		t.Fatal("helm test passed after the FencedLease webhook configuration was deleted")
	}
	testenv.WantContains(t, "helm test", out, "Phase:          Failed")
	testenv.WantContains(t, "kubectl fence check in the test Pod", kubelet.output(), "FencedLease webhook: missing:")
}

// testPodRunner is the kubelet's stand-in for the chart's test Pod.
type testPodRunner struct {
	mu  sync.Mutex
	out strings.Builder
}

func (r *testPodRunner) output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out.String()
}

// startTestPodRunner runs each new incarnation of the Pod
// kubefence-system/kubefence-test-check until the test ends.
func startTestPodRunner(t *testing.T, c client.Client, host string, caData []byte, plugin, dir string) *testPodRunner {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	r := &testPodRunner{}
	go func() {
		defer close(done)
		ran := map[types.UID]bool{}
		for ctx.Err() == nil {
			var pod corev1.Pod
			err := c.Get(ctx, client.ObjectKey{Namespace: releaseNamespace, Name: "kubefence-test-check"}, &pod)
			if err == nil && !ran[pod.UID] && pod.DeletionTimestamp == nil {
				ran[pod.UID] = true
				if err := r.run(ctx, c, &pod, host, caData, plugin, dir); err != nil {
					t.Errorf("running the test Pod: %v", err)
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return r
}

// run does what the kubelet would: runs the Pod's one container (its
// /kubectl-fence is plugin) as the Pod's ServiceAccount, and records the
// phase its exit code gives.
func (r *testPodRunner) run(ctx context.Context, c client.Client, pod *corev1.Pod, host string, caData []byte, plugin, dir string) error {
	if len(pod.Spec.Containers) != 1 {
		return fmt.Errorf("the test Pod has %d containers, the runner knows one", len(pod.Spec.Containers))
	}
	ctr := pod.Spec.Containers[0]
	if len(ctr.Command) != 1 || ctr.Command[0] != "/kubectl-fence" {
		return fmt.Errorf("the test Pod runs %v, the runner knows /kubectl-fence", ctr.Command)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Spec.ServiceAccountName}}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600),
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}}
	if err := c.SubResource("token").Create(ctx, sa, tr); err != nil {
		return fmt.Errorf("a token for service account %s: %w", sa.Name, err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: host, CertificateAuthorityData: caData}
	kc.AuthInfos["pod"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["pod"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "pod"}
	kc.CurrentContext = "pod"
	path := filepath.Join(dir, "pod-"+string(pod.UID)+".kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, plugin, append(append([]string(nil), ctr.Args...), "--kubeconfig", path)...)
	cmd.Env = append(os.Environ(), "KUBERNETES_SERVICE_HOST=")
	out, runErr := cmd.CombinedOutput()
	r.mu.Lock()
	fmt.Fprintf(&r.out, "$ kubectl-fence %s\n%s", strings.Join(ctr.Args, " "), out)
	r.mu.Unlock()
	code := 0
	if runErr != nil {
		code = 1
		if ee, ok := runErr.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	phase := corev1.PodSucceeded
	if code != 0 {
		phase = corev1.PodFailed
	}
	now := metav1.Now()
	pod.Status = corev1.PodStatus{Phase: phase, StartTime: &now, ContainerStatuses: []corev1.ContainerStatus{{
		Name: ctr.Name, Image: ctr.Image, ImageID: ctr.Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: int32(code), StartedAt: now, FinishedAt: metav1.Now()}},
	}}}
	return c.Status().Update(ctx, pod)
}
