package certrotation

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kubefence/kubefence/test/testenv"
)

// The envtest tests share one kube-apiserver and etcd, started by TestMain
// (testenv.Run); under -short none is started and they skip (needEnv). Each
// test works in a namespace of its own.
var (
	// cluster is the control plane; k8sClient its admin's client.
	cluster   *testenv.Cluster
	k8sClient client.Client
	nsCounter atomic.Int32
)

func TestMain(m *testing.M) {
	flag.Parse()
	var logs io.Writer = io.Discard
	if testing.Verbose() {
		logs = os.Stderr
	}
	os.Exit(testenv.Run(m, testenv.Input{Log: logs, Setup: func(_ context.Context, c *testenv.Cluster) error {
		cluster, k8sClient = c, c.Admin
		return nil
	}}))
}

// needEnv skips the test under -short (make test-unit): it needs the
// control plane.
func needEnv(t *testing.T) {
	t.Helper()
	testenv.SkipIfShort(t)
}

// fixture is one test's namespace, Secret name and webhook configuration name.
type fixture struct {
	ns, secret, webhookConfig, service string
}

func (f fixture) secretKey() types.NamespacedName {
	return types.NamespacedName{Namespace: f.ns, Name: f.secret}
}

func (f fixture) options(certDir string) Options {
	return Options{
		SecretKey:             f.secretKey(),
		CertDir:               certDir,
		DNSNames:              ServiceDNSNames(f.service, f.ns),
		WebhookConfigurations: []string{f.webhookConfig},
	}
}

// newFixture creates a namespace and, as config/ ships them, an empty Opaque
// Secret and a ValidatingWebhookConfiguration of two webhooks with no
// caBundle. The webhooks match a resource that does not exist and ignore
// failures, so they never get in the way.
func newFixture(t *testing.T, withSecret bool) fixture {
	t.Helper()
	needEnv(t)
	n := nsCounter.Add(1)
	f := fixture{
		ns:            fmt.Sprintf("certrotation-%d", n),
		secret:        "kubefence-webhook-server-cert",
		webhookConfig: fmt.Sprintf("kubefence-validating-webhook-configuration-%d", n),
		service:       "kubefence-webhook-service",
	}
	mustCreate(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}})
	if withSecret {
		mustCreate(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: f.secret}, Type: corev1.SecretTypeOpaque})
	}
	webhook := func(name string) admissionregistrationv1.ValidatingWebhook {
		return admissionregistrationv1.ValidatingWebhook{
			Name: name,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
				Namespace: f.ns, Name: f.service, Path: ptr.To("/validate"),
			}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{"example.kubefence.io"},
					APIVersions: []string{"v1"}, Resources: []string{"widgets"}},
			}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		}
	}
	mustCreate(t, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: f.webhookConfig},
		Webhooks:   []admissionregistrationv1.ValidatingWebhook{webhook("a.kubefence.io"), webhook("b.kubefence.io")},
	})
	t.Cleanup(func() {
		_ = k8sClient.Delete(context.Background(), &admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: f.webhookConfig}})
	})
	return f
}

func mustCreate(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8sClient.Create(t.Context(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

// startRotator runs a Rotator in a manager of its own (one "replica") as the
// user of restCfg, until the test ends.
func startRotator(t *testing.T, restCfg *rest.Config, opts Options) *Rotator {
	t.Helper()
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                 cluster.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatalf("creating a manager: %v", err)
	}
	r, err := AddToManager(mgr, opts)
	if err != nil {
		t.Fatalf("AddToManager: %v", err)
	}
	testenv.Serve(t, "manager", mgr.Start)
	return r
}

func waitReady(t *testing.T, r *Rotator) {
	t.Helper()
	select {
	case <-r.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("rotator not ready after 30s")
	}
	if err := r.ReadyCheck(nil); err != nil {
		t.Fatalf("Ready is closed but ReadyCheck fails: %v", err)
	}
}

// eventually polls cond every 100ms for up to 20s.
func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after 20s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func getSecret(t *testing.T, f fixture) artifacts {
	t.Helper()
	s := &corev1.Secret{}
	if err := k8sClient.Get(t.Context(), f.secretKey(), s); err != nil {
		t.Fatalf("reading the Secret: %v", err)
	}
	return artifactsFromData(s.Data)
}

// caBundles returns the caBundle of every webhook of f's configuration.
func caBundles(t *testing.T, f fixture) [][]byte {
	t.Helper()
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := k8sClient.Get(t.Context(), client.ObjectKey{Name: f.webhookConfig}, cfg); err != nil {
		t.Fatalf("reading the webhook configuration: %v", err)
	}
	var out [][]byte
	for _, w := range cfg.Webhooks {
		out = append(out, w.ClientConfig.CABundle)
	}
	return out
}

// bundleIs checks that every webhook's caBundle equals want.
func bundleIs(t *testing.T, f fixture, want []byte) error {
	t.Helper()
	for i, b := range caBundles(t, f) {
		if string(b) != string(want) {
			return fmt.Errorf("webhook %d: caBundle is not the Secret's ca.crt", i)
		}
	}
	return nil
}
