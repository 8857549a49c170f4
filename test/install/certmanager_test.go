package install

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kubefence/kubefence/test/testenv"
)

// TestCertManagerComponent checks config/cert-manager (config/default plus
// the component config/components/cert-manager) object by object.
func TestCertManagerComponent(t *testing.T) {
	docs := documents(t, buildDir(t, "config/cert-manager"))
	defaults := documents(t, buildDir(t, "config/default"))

	for _, d := range docs {
		name := d["metadata"].(map[string]any)["name"]
		if d["kind"] == "Secret" || strings.Contains(name.(string), "cert-rotation") {
			t.Errorf("%s %s is left in: self-signed mode only (cert-manager creates its own Secret of type kubernetes.io/tls)", d["kind"], name)
		}
	}

	deps := decodeKind[appsv1.Deployment](t, docs, "Deployment")
	defDeps := decodeKind[appsv1.Deployment](t, defaults, "Deployment")
	if len(deps) != 1 || len(defDeps) != 1 {
		t.Fatalf("%d and %d Deployments, want 1 each", len(deps), len(defDeps))
	}
	// The component replaces args whole: they must be config/default's without
	// the self-signed flags, plus provided mode.
	var want []string
	for _, a := range defDeps[0].Spec.Template.Spec.Containers[0].Args {
		if !strings.HasPrefix(a, "--webhook-cert-mode=") && !strings.HasPrefix(a, "--webhook-service-name=") &&
			!strings.HasPrefix(a, "--webhook-secret-name=") && !strings.HasPrefix(a, "--webhook-configuration-name=") {
			want = append(want, a)
		}
	}
	// The metrics server serves the same certificate (it names the metrics
	// Service too), so the ServiceMonitor can verify it.
	want = append(want, "--webhook-cert-mode=provided", "--metrics-cert-path=/tmp/k8s-webhook-server/serving-certs")
	if got := deps[0].Spec.Template.Spec.Containers[0].Args; !slices.Equal(got, want) {
		t.Errorf("manager args %v, want %v (keep config/components/cert-manager/manager_patch.yaml in step with config/manager/manager.yaml)", got, want)
	}
	secretName := ""
	for _, v := range deps[0].Spec.Template.Spec.Volumes {
		if v.Name == "webhook-certs" && v.Secret != nil {
			secretName = v.Secret.SecretName
		}
	}

	var certName, certNS, issuerName string
	for _, d := range docs {
		u := unstructured.Unstructured{Object: d}
		switch d["kind"] {
		case "Certificate":
			certName, certNS = u.GetName(), u.GetNamespace()
			dns, _, _ := unstructured.NestedStringSlice(d, "spec", "dnsNames")
			wantDNS := []string{"kubefence-webhook-service.kubefence-system.svc", "kubefence-webhook-service.kubefence-system.svc.cluster.local",
				"kubefence-controller-manager-metrics-service.kubefence-system.svc", "kubefence-controller-manager-metrics-service.kubefence-system.svc.cluster.local"}
			if !slices.Equal(dns, wantDNS) {
				t.Errorf("Certificate dnsNames %v, want %v", dns, wantDNS)
			}
			sn, _, _ := unstructured.NestedString(d, "spec", "secretName")
			if sn != secretName || sn != "kubefence-webhook-server-cert" {
				t.Errorf("Certificate secretName %q, the Deployment mounts %q", sn, secretName)
			}
			issuerName, _, _ = unstructured.NestedString(d, "spec", "issuerRef", "name")
		case "Issuer":
			if u.GetNamespace() != "kubefence-system" {
				t.Errorf("Issuer in namespace %q", u.GetNamespace())
			}
		}
	}
	if certName == "" || certNS != "kubefence-system" {
		t.Fatalf("Certificate %s/%s, want one in kubefence-system", certNS, certName)
	}
	found := false
	for _, d := range docs {
		if d["kind"] == "Issuer" && d["metadata"].(map[string]any)["name"] == issuerName {
			found = true
		}
	}
	if !found {
		t.Errorf("the Certificate's issuer %q is not rendered", issuerName)
	}
	hooks := decodeKind[admissionregistrationv1.ValidatingWebhookConfiguration](t, docs, "ValidatingWebhookConfiguration")
	if len(hooks) != 2 {
		t.Fatalf("%d webhook configurations, want 2", len(hooks))
	}
	for _, h := range hooks {
		if got := h.Annotations["cert-manager.io/inject-ca-from"]; got != certNS+"/"+certName {
			t.Errorf("%s: cert-manager.io/inject-ca-from %q, want %s/%s (else nobody fills caBundle and every write fails closed)", h.Name, got, certNS, certName)
		}
	}
}

// apiServer is a control plane of the install tests: an admin's client (with
// the core kinds and CRDs) and kubectl command line.
type apiServer struct {
	env     *envtest.Environment
	c       client.Client
	kubectl []string
}

// startAPIServer starts kube-apiserver and etcd with the given CRD files
// installed; the test's cleanup stops them.
func startAPIServer(t *testing.T, crdPaths ...string) *apiServer {
	t.Helper()
	testenv.SkipIfShort(t)
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = apiextensionsv1.AddToScheme(scheme)
	c, kc := startInstaller(t, testenv.Input{Scheme: scheme, Configure: func(env *envtest.Environment) {
		env.CRDDirectoryPaths, env.ErrorIfCRDPathMissing = crdPaths, true
	}}, t.TempDir())
	return &apiServer{env: c.Env, c: c.Admin, kubectl: []string{filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl"), "--kubeconfig=" + kc}}
}

// startInstaller starts the control plane of in (the test's cleanup stops
// it) and writes into dir the kubeconfig of an installer (system:masters).
func startInstaller(t *testing.T, in testenv.Input, dir string) (*testenv.Cluster, string) {
	t.Helper()
	c, err := testenv.Start(t.Context(), in)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	kc, err := c.Kubeconfig(dir, "installer", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	return c, kc
}

// apply runs kubectl apply --server-side, with args (--dry-run=server, say),
// on manifest, and checks that its output has every line of want.
func (a *apiServer) apply(t *testing.T, manifest []byte, args []string, want ...string) {
	t.Helper()
	// Not t.TempDir(): a subtest's name may hold a comma, and kubectl splits
	// -f arguments on commas.
	dir, err := os.MkdirTemp("", "kubefence-manifest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	file := filepath.Join(dir, "manifest.yaml")
	if err := os.WriteFile(file, manifest, 0o600); err != nil {
		t.Fatal(err)
	}
	args = append(append(append([]string(nil), a.kubectl[1:]...), "apply", "--server-side"), append(args, "-f", file)...)
	out, err := exec.Command(a.kubectl[0], args...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args[1:], " "), err, out)
	}
	for _, w := range want {
		if !strings.Contains(string(out), w) {
			t.Errorf("apply output lacks %q:\n%s", w, out)
		}
	}
}

// TestPackagedManifestsApplyWithServerSideDryRun dry-runs config/cert-manager
// and the chart in both certificate modes against one API server, with
// cert-manager's CRDs (test/crds/cert-manager) installed.
func TestPackagedManifestsApplyWithServerSideDryRun(t *testing.T) {
	a := startAPIServer(t, filepath.Join(root, "test", "crds", "cert-manager"))
	if err := a.c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: releaseNamespace}}); err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct {
		name     string
		manifest []byte
		want     []string
	}{
		{"config/cert-manager", buildDir(t, "config/cert-manager"), []string{
			"certificate.cert-manager.io/kubefence-serving-cert serverside-applied (server dry run)",
			"issuer.cert-manager.io/kubefence-selfsigned-issuer serverside-applied (server dry run)",
		}},
		{"config/policy", buildDir(t, "config/policy"), []string{
			"clusterrole.rbac.authorization.k8s.io/kubefence-policy-role serverside-applied (server dry run)",
		}},
		{"chart, default values", helmTemplate(t), []string{
			"secret/kubefence-webhook-server-cert serverside-applied (server dry run)",
		}},
		{"chart, cert-manager", helmTemplate(t, "--set", "certificates.mode=cert-manager"), []string{
			"certificate.cert-manager.io/kubefence-serving-cert serverside-applied (server dry run)",
		}},
	} {
		t.Run(m.name, func(t *testing.T) {
			a.apply(t, m.manifest, []string{"--dry-run=server"}, append(m.want, dryRunCore...)...)
		})
	}
}

// dryRunCore are lines every packaging's server-side dry run prints: the
// CRD, the operator's Deployment and the fencing webhook's configuration.
var dryRunCore = []string{
	"customresourcedefinition.apiextensions.k8s.io/fencedleases.coordination.kubefence.io serverside-applied (server dry run)",
	"deployment.apps/kubefence-controller-manager serverside-applied (server dry run)",
	"validatingwebhookconfiguration.admissionregistration.k8s.io/kubefence-fencing-webhook-configuration serverside-applied (server dry run)",
}

// TestUndeployKeepsTokenHistory installs config/default for real, then runs
// `make undeploy`: the CRD stays, the rest goes; with KEEP_HISTORY=false the
// CRD goes too.
func TestUndeployKeepsTokenHistory(t *testing.T) {
	a := startAPIServer(t)
	c, kubectl := a.c, a.kubectl
	ctx := context.Background()
	a.apply(t, buildDir(t, "config/default"), nil)
	undeploy := func(args ...string) {
		t.Helper()
		cmd := exec.Command("make", append([]string{"--no-print-directory", "-C", root, "undeploy",
			"KUBECTL=" + strings.Join(kubectl, " "),
			// envtest runs no namespace controller: a namespace never finishes terminating.
			"UNDEPLOY_WAIT=false"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make undeploy %v: %v\n%s", args, err, out)
		}
		t.Logf("make undeploy %v:\n%s", args, out)
	}
	exists := func(obj client.Object, key client.ObjectKey) bool {
		t.Helper()
		err := c.Get(ctx, key, obj)
		if apierrors.IsNotFound(err) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		return obj.GetDeletionTimestamp() == nil
	}
	crd := client.ObjectKey{Name: "fencedleases.coordination.kubefence.io"}
	ns := client.ObjectKey{Name: "kubefence-system"}

	undeploy()
	if !exists(&apiextensionsv1.CustomResourceDefinition{}, crd) {
		t.Error("make undeploy deleted the FencedLease CRD (every lease and its token)")
	}
	if exists(&corev1.Namespace{}, ns) {
		t.Error("make undeploy left the operator namespace (it holds no token history)")
	}
	if exists(&appsv1.Deployment{}, client.ObjectKey{Namespace: "kubefence-system", Name: "kubefence-controller-manager"}) {
		t.Error("make undeploy left the Deployment")
	}
	if exists(&admissionregistrationv1.ValidatingWebhookConfiguration{}, client.ObjectKey{Name: "kubefence-fencing-webhook-configuration"}) {
		t.Error("make undeploy left the fencing webhook configuration (fail closed, with no server behind it)")
	}

	undeploy("KEEP_HISTORY=false", "ignore-not-found=true")
	deadline := time.Now().Add(30 * time.Second)
	for exists(&apiextensionsv1.CustomResourceDefinition{}, crd) && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if exists(&apiextensionsv1.CustomResourceDefinition{}, crd) {
		t.Error("make undeploy KEEP_HISTORY=false left the CRD")
	}
}
