// Package install checks the rendered installation manifests (config/default)
// against a real API server, with server-side dry-run.
package install

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"
)

const root = "../.."

// render builds config/default with the project's pinned kustomize.
func render(t *testing.T) []byte {
	t.Helper()
	skipWithoutPinnedTools(t, "kustomize")
	kustomize := filepath.Join(root, "bin", "kustomize")
	if _, err := os.Stat(kustomize); err != nil {
		t.Fatalf("kustomize not installed at %s: run `make kustomize` (make test does)", kustomize)
	}
	out, err := exec.Command(kustomize, "build", filepath.Join(root, "config", "default")).Output()
	if err != nil {
		t.Fatalf("kustomize build config/default: %v", err)
	}
	return out
}

func documents(t *testing.T, manifest []byte) []map[string]any {
	t.Helper()
	var docs []map[string]any
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			break
		}
		if m != nil {
			docs = append(docs, m)
		}
	}
	return docs
}

func decodeKind[T any](t *testing.T, docs []map[string]any, kind string) []T {
	t.Helper()
	var out []T
	for _, d := range docs {
		if d["kind"] != kind {
			continue
		}
		b, _ := sigsyaml.Marshal(d)
		var v T
		if err := sigsyaml.Unmarshal(b, &v); err != nil {
			t.Fatalf("decoding %s: %v", kind, err)
		}
		out = append(out, v)
	}
	return out
}

func TestRenderedManifestsAreSafe(t *testing.T) {
	docs := documents(t, render(t))
	deps := decodeKind[appsv1.Deployment](t, docs, "Deployment")
	if len(deps) != 1 {
		t.Fatalf("%d Deployments, want 1", len(deps))
	}
	d := deps[0]
	if d.Namespace != "kubefence-system" {
		t.Errorf("Deployment in namespace %q, want kubefence-system", d.Namespace)
	}
	pod := d.Spec.Template.Spec
	if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
		t.Error("pod does not set runAsNonRoot")
	}
	for _, c := range pod.Containers {
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
			t.Errorf("container %s: security context %+v is not restricted", c.Name, sc)
		}
		args := strings.Join(c.Args, " ")
		for _, want := range []string{"--leader-elect", "--health-probe-bind-address", "--metrics-bind-address=:8443"} {
			if !strings.Contains(args, want) {
				t.Errorf("container %s args %q lack %s", c.Name, args, want)
			}
		}
		if c.LivenessProbe == nil || c.ReadinessProbe == nil {
			t.Errorf("container %s lacks probes", c.Name)
		}
	}
	hooks := decodeKind[admissionregistrationv1.ValidatingWebhookConfiguration](t, docs, "ValidatingWebhookConfiguration")
	if len(hooks) != 2 {
		t.Fatalf("%d ValidatingWebhookConfigurations, want 2 (FencedLease, fencing)", len(hooks))
	}
	names := map[string]bool{}
	for _, h := range hooks {
		for _, w := range h.Webhooks {
			names[w.Name] = true
			if w.FailurePolicy == nil || *w.FailurePolicy != admissionregistrationv1.Fail {
				t.Errorf("webhook %s: failurePolicy is not Fail (I7)", w.Name)
			}
			if w.TimeoutSeconds == nil || *w.TimeoutSeconds > 3 {
				t.Errorf("webhook %s: timeoutSeconds %v, want at most 3", w.Name, w.TimeoutSeconds)
			}
			if w.ClientConfig.Service == nil || w.ClientConfig.Service.Namespace != "kubefence-system" {
				t.Errorf("webhook %s: service %+v not in kubefence-system", w.Name, w.ClientConfig.Service)
			}
			for _, r := range w.Rules {
				for _, g := range r.APIGroups {
					if g == "coordination.k8s.io" {
						t.Errorf("webhook %s matches coordination.k8s.io (Leases) explicitly (I7)", w.Name)
					}
				}
			}
			if strings.Contains(w.Name, "fencing") {
				excluded := false
				if w.NamespaceSelector != nil {
					for _, e := range w.NamespaceSelector.MatchExpressions {
						if e.Key == "kubernetes.io/metadata.name" && e.Operator == metav1.LabelSelectorOpNotIn {
							excluded = strings.Contains(strings.Join(e.Values, ","), "kubefence-system")
						}
					}
				}
				if !excluded {
					t.Errorf("fencing webhook %s does not exclude the operator's namespace (I7)", w.Name)
				}
				leasesExcluded := false
				for _, mc := range w.MatchConditions {
					leasesExcluded = leasesExcluded || strings.Contains(mc.Expression, "coordination.k8s.io")
				}
				if !leasesExcluded {
					t.Errorf("fencing webhook %s has no matchCondition excluding coordination.k8s.io (I7)", w.Name)
				}
			}
		}
	}
	// In self-signed mode the manager patches the caBundle of exactly the
	// configurations it is told about: a missing one would fail every call.
	var allArgs []string
	for _, c := range pod.Containers {
		allArgs = append(allArgs, c.Args...)
	}
	for _, h := range hooks {
		want := "--webhook-configuration-name=" + h.Name
		if !strings.Contains(strings.Join(allArgs, " "), want) {
			t.Errorf("the manager is not told to keep the caBundle of %s current (missing %s)", h.Name, want)
		}
	}
	for _, want := range []string{"vfencedlease-v1alpha1.kb.io", "guarded.fencing.kubefence.io", "required.fencing.kubefence.io", "scale.fencing.kubefence.io", "eviction.fencing.kubefence.io", "cluster-scoped.fencing.kubefence.io"} {
		if !names[want] {
			t.Errorf("webhook %s missing from the install manifests", want)
		}
	}
}

func TestRenderedManifestsApplyWithServerSideDryRun(t *testing.T) {
	manifest := render(t)
	a := startAPIServer(t)
	// Dry-run creates nothing, so objects in the namespace need it for real.
	if err := a.c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kubefence-system"}}); err != nil {
		t.Fatal(err)
	}
	a.apply(t, manifest, []string{"--dry-run=server"}, append(dryRunCore,
		"flowschema.flowcontrol.apiserver.k8s.io/kubefence-renewals serverside-applied (server dry run)",
		"prioritylevelconfiguration.flowcontrol.apiserver.k8s.io/kubefence-leases serverside-applied (server dry run)")...)
}

// TestManagerAcceptsTheDeployedFlags runs the manager binary with the
// arguments of the rendered Deployment (plus --help, so that it exits after
// parsing): a flag the binary does not know would crash the pod.
func TestManagerAcceptsTheDeployedFlags(t *testing.T) {
	docs := documents(t, render(t))
	deps := decodeKind[appsv1.Deployment](t, docs, "Deployment")
	if len(deps) != 1 {
		t.Fatalf("%d Deployments, want 1", len(deps))
	}
	bin := filepath.Join(t.TempDir(), "manager")
	if out, err := exec.Command("go", "build", "-o", bin, filepath.Join(root, "cmd")).CombinedOutput(); err != nil {
		t.Fatalf("building the manager: %v\n%s", err, out)
	}
	for _, c := range deps[0].Spec.Template.Spec.Containers {
		args := append(append([]string{}, c.Args...), "--help")
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("manager %v: %v\n%s", c.Args, err, out)
		}
		for _, a := range c.Args {
			if strings.HasPrefix(a, "--webhook-cert-mode=") && a != "--webhook-cert-mode=self-signed" {
				t.Errorf("default install uses %s, want self-signed certificates (no cert-manager needed)", a)
			}
		}
	}
}
