// Package devenv is what kubefence's development programs (the demo,
// hack/demo) and its test suites (through test/testenv) share, outside test/
// so that no program imports a test package: the repository's files a
// control plane is started with (ModuleRoot, CRDPaths, WebhookPaths), the
// scheme, the example guarded kind (WidgetGVK) and the fenced client's RBAC
// (ClientRules), child processes that die with their parent (Proc), and a
// buffer goroutines share (Buffer).
//
// It imports the API and client libraries only: never the operator
// (controllers/...), and no production package imports it.
package devenv

import (
	"path/filepath"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// CRDPaths are the CRD directories under root (the repository's root): the
// operator's (config/crd/bases) and the test CRDs (test/crds: the example
// guarded kind, Widget).
func CRDPaths(root string) []string {
	return []string{
		filepath.Join(root, "config", "crd", "bases"),
		filepath.Join(root, "test", "crds"),
	}
}

// WebhookPaths are the operator's admission configurations under root (the
// repository's root), as envtest's WebhookInstallOptions.Paths: the
// FencedLease validator and the fencing webhooks.
func WebhookPaths(root string) []string {
	return []string{
		filepath.Join(root, "config", "webhook", "manifests.yaml"),
		filepath.Join(root, "config", "webhook", "fencing.yaml"),
	}
}

// NewScheme is client-go's kinds and the FencedLease API, as cmd/main.go
// registers them.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(coordv1alpha1.AddToScheme(s))
	return s
}

// WidgetGVK is the guarded example kind the suites, the demo, the benchmark
// and the workers write: example.kubefence.io/v1 Widget (test/crds), with
// spec.entries and spec.writer, and status and scale subresources.
var WidgetGVK = schema.GroupVersionKind{Group: "example.kubefence.io", Version: "v1", Kind: "Widget"}

// FixedToken is a fence.TokenSource that always offers one token: the token a
// writer took when it checked its lease (or held once), stamped as is so that
// only the API server, through the fencing webhook, decides whether it is
// stale.
type FixedToken int64

// Token returns t, always as current.
func (t FixedToken) Token() (int64, bool) { return int64(t), true }
