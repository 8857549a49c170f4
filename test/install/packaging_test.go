package install

// Tests of the packaging around config/default: the Helm chart in dist/chart,
// the cert-manager component, and `make undeploy` keeping token history.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsyaml "sigs.k8s.io/yaml"
)

// releaseNamespace is the namespace the chart is rendered for: config/default's.
const releaseNamespace = "kubefence-system"

// buildDir renders a kustomize directory under config/ with the pinned kustomize.
func buildDir(t *testing.T, dir string) []byte {
	t.Helper()
	skipWithoutPinnedTools(t, "kustomize")
	kustomize := filepath.Join(root, "bin", "kustomize")
	if _, err := os.Stat(kustomize); err != nil {
		t.Fatalf("kustomize not installed at %s: run `make kustomize` (make test does)", kustomize)
	}
	out, err := exec.Command(kustomize, "build", filepath.Join(root, dir)).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("kustomize build %s: %v\n%s", dir, err, stderr)
	}
	return out
}

// skipWithoutPinnedTools skips t under -short: the unit tier (make
// test-unit) needs Go alone, and tool (kustomize, helm) is a pinned binary of
// ./bin that make test installs before it runs this package.
func skipWithoutPinnedTools(t *testing.T, tool string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs the pinned %s (./bin/%s); skipped by -short (make test-unit needs Go alone), run by make test", tool, tool)
	}
}

// helmBin is the pinned helm of ./bin.
func helmBin(t *testing.T) string {
	t.Helper()
	skipWithoutPinnedTools(t, "helm")
	helm := filepath.Join(root, "bin", "helm")
	if _, err := os.Stat(helm); err != nil {
		t.Fatalf("helm not installed at %s: run `make helm` (make test does)", helm)
	}
	return helm
}

// kubeVersion is the Kubernetes version helm template renders for: the
// envtest default. (A helm built with go install assumes v1.20, which the
// chart's kubeVersion refuses.)
const kubeVersion = "1.37.2"

// testImageRepo is the image.repository the tests render the chart with:
// the chart has no default image (docs/operations.md#image).
const testImageRepo = "registry.example.com/kubefence"

// helmTemplate renders dist/chart as release "kubefence" in releaseNamespace,
// with image.repository testImageRepo unless args set another.
func helmTemplate(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(helmBin(t), append([]string{"template", "kubefence", filepath.Join(root, "dist", "chart"),
		"--namespace", releaseNamespace, "--kube-version", kubeVersion, "--set", "image.repository=" + testImageRepo}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template %v: %v\n%s", args, err, stderr.String())
	}
	return out
}

// objKey names an object by kind, namespace and name.
func objKey(o map[string]any) string {
	md, _ := o["metadata"].(map[string]any)
	return fmt.Sprintf("%v %v/%v", o["kind"], md["namespace"], md["name"])
}

// The differences between the chart (default values) and config/default that
// are intended. normalize removes exactly these, so anything else that differs
// fails the comparison.
var intendedDifferences = []struct{ what, why string }{
	{"labels app.kubernetes.io/managed-by, app.kubernetes.io/instance, app.kubernetes.io/version, helm.sh/chart",
		"Helm's standard labels; kustomize marks its objects managed-by: kustomize instead"},
	{"the chart adds app.kubernetes.io/* and helm.sh/chart labels to objects config/ leaves unlabelled (generated ClusterRole and Role manager-role, the webhook configurations)",
		"every object of a release carries the release's labels"},
	{"annotation helm.sh/resource-policy: keep on the CRD",
		"helm upgrade and uninstall must never delete token history; kubectl has no such annotation (make undeploy keeps it by label instead)"},
	{"no Namespace object in the chart",
		"Helm installs into the release namespace (helm install -n kubefence-system --create-namespace); label it pod-security.kubernetes.io/enforce=restricted yourself"},
	{"the objects of `helm test` (annotation helm.sh/hook: test: the check Pod, its ServiceAccount and RBAC)",
		"helm creates them only for `helm test`; config/ has no test hook"},
	{"container image and imagePullPolicy",
		"neither has a default image (docs/operations.md#image): config/ names the unpullable image-not-set.invalid/kubefence that make deploy and build-installer replace with IMG; the chart requires image.repository"},
}

// normalize parses a rendered manifest into objects by key, without the
// intended differences.
func normalize(t *testing.T, manifest []byte) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, o := range documents(t, manifest) {
		// Round-trip through JSON so that numbers and maps compare alike.
		b, err := sigsyaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		var n map[string]any
		if err := sigsyaml.Unmarshal(b, &n); err != nil {
			t.Fatal(err)
		}
		if n["kind"] == "Namespace" {
			continue
		}
		md, _ := n["metadata"].(map[string]any)
		if ann, _ := md["annotations"].(map[string]any); ann["helm.sh/hook"] == "test" {
			continue
		}
		if labels, ok := md["labels"].(map[string]any); ok {
			for _, k := range []string{"app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version", "helm.sh/chart"} {
				delete(labels, k)
			}
			if len(labels) == 1 && labels["app.kubernetes.io/name"] == "kubefence" && isUnlabelledInConfig(n) {
				delete(labels, "app.kubernetes.io/name")
			}
			if len(labels) == 0 {
				delete(md, "labels")
			}
		}
		if ann, ok := md["annotations"].(map[string]any); ok {
			delete(ann, "helm.sh/resource-policy")
			if len(ann) == 0 {
				delete(md, "annotations")
			}
		}
		if n["kind"] == "Deployment" {
			spec := n["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
			for _, c := range spec["containers"].([]any) {
				c := c.(map[string]any)
				delete(c, "image")
				delete(c, "imagePullPolicy")
			}
		}
		out[objKey(n)] = n
	}
	return out
}

// isUnlabelledInConfig reports the objects config/ renders without labels.
func isUnlabelledInConfig(o map[string]any) bool {
	switch o["kind"] {
	case "ValidatingWebhookConfiguration", "CustomResourceDefinition":
		return true
	case "ClusterRole", "Role":
		return o["metadata"].(map[string]any)["name"] == "kubefence-manager-role"
	}
	return false
}

// compareObjects fails for every object only one side has or that differs.
func compareObjects(t *testing.T, wantName string, want map[string]map[string]any, gotName string, got map[string]map[string]any) {
	t.Helper()
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		w, inWant := want[k]
		g, inGot := got[k]
		switch {
		case !inGot:
			t.Errorf("%s is in %s but not in %s", k, wantName, gotName)
		case !inWant:
			t.Errorf("%s is in %s but not in %s", k, gotName, wantName)
		case !reflect.DeepEqual(w, g):
			wy, _ := sigsyaml.Marshal(w)
			gy, _ := sigsyaml.Marshal(g)
			t.Errorf("%s differs\n--- %s\n%s\n--- %s\n%s", k, wantName, wy, gotName, gy)
		}
	}
}

func TestChartLints(t *testing.T) {
	for _, set := range [][]string{{"--set", "image.repository=" + testImageRepo}, {"--set", "image.repository=" + testImageRepo, "--set", "certificates.mode=cert-manager", "--set", "enforcement=policy", "--set", "serviceMonitor.enabled=true", "--set", "prometheusRule.enabled=true", "--set", "grafanaDashboard.enabled=true"}} {
		out, err := exec.Command(helmBin(t), append([]string{"lint", "--strict", filepath.Join(root, "dist", "chart"), "--namespace", releaseNamespace, "--kube-version", kubeVersion}, set...)...).CombinedOutput()
		if err != nil {
			t.Errorf("helm lint --strict %v: %v\n%s", set, err, out)
		}
		if !strings.Contains(string(out), "0 chart(s) failed") {
			t.Errorf("helm lint %v did not report success:\n%s", set, out)
		}
	}
}

// TestChartCopiesAreCurrent checks the files the chart carries from config/.
func TestChartCopiesAreCurrent(t *testing.T) {
	for src, dst := range map[string]string{
		"config/crd/bases/coordination.kubefence.io_fencedleases.yaml": "dist/chart/files/crds/coordination.kubefence.io_fencedleases.yaml",
		"config/prometheus/prometheus_rule.yaml":                       "dist/chart/files/prometheus_rule.yaml",
		"config/prometheus/grafana_dashboard.json":                     "dist/chart/files/grafana_dashboard.json",
	} {
		a, err := os.ReadFile(filepath.Join(root, src))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(root, dst))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs from %s: run `make chart-sync`", dst, src)
		}
	}
}

func TestChartDefaultsMatchConfigDefault(t *testing.T) {
	for _, d := range intendedDifferences {
		t.Logf("ignored, intended: %s (%s)", d.what, d.why)
	}
	want := normalize(t, buildDir(t, "config/default"))
	got := normalize(t, helmTemplate(t))
	if len(want) < 25 {
		t.Fatalf("config/default renders only %d objects", len(want))
	}
	compareObjects(t, "config/default", want, "dist/chart", got)
}

func TestChartCertManagerMatchesConfigCertManager(t *testing.T) {
	want := normalize(t, buildDir(t, "config/cert-manager"))
	got := normalize(t, helmTemplate(t, "--set", "certificates.mode=cert-manager"))
	compareObjects(t, "config/cert-manager", want, "dist/chart (certificates.mode=cert-manager)", got)
}

func TestChartKeepsTokenHistory(t *testing.T) {
	objs := normalizeRaw(t, helmTemplate(t))
	for _, k := range []string{
		"CustomResourceDefinition <nil>/fencedleases.coordination.kubefence.io",
	} {
		o, ok := objs[k]
		if !ok {
			t.Errorf("the chart renders no %s", k)
			continue
		}
		md := o["metadata"].(map[string]any)
		ann, _ := md["annotations"].(map[string]any)
		if ann["helm.sh/resource-policy"] != "keep" {
			t.Errorf("%s lacks helm.sh/resource-policy: keep (annotations %v): helm uninstall would delete token history", k, ann)
		}
		labels, _ := md["labels"].(map[string]any)
		if labels["kubefence.io/token-history"] != "true" {
			t.Errorf("%s lacks the label kubefence.io/token-history=true (labels %v)", k, labels)
		}
	}
}

func normalizeRaw(t *testing.T, manifest []byte) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, o := range documents(t, manifest) {
		out[objKey(o)] = o
	}
	return out
}

func TestChartValues(t *testing.T) {
	out := helmTemplate(t, "--namespace", "fence-ops",
		"--set", "fencedKinds[0].apiGroup=batch.example.com", "--set", "fencedKinds[0].resource=jobs",
		"--set", "fencedKinds[1].apiGroup=apps", "--set", "fencedKinds[1].resource=statefulsets",
		"--set", "controllerUsers[0]=alice@example.com", "--set", "leaseAdminGroups[0]=platform-admins",
		"--set", "replicas=3", "--set", "priorityClassName=system-cluster-critical",
		"--set", "image.repository=registry.example.com/kubefence", "--set", "image.tag=v9.9.9",
		"--set", "excludedNamespaces[0]=kube-system", "--set", "excludedNamespaces[1]=monitoring",
		"--set", "serviceMonitor.enabled=true", "--set", "prometheusRule.enabled=true",
		"--set", "prometheusRule.labels.release=kube-prometheus-stack")
	objs := normalizeRaw(t, out)
	y := func(k string) string { return renderedYAML(t, objs, k) }
	dep := y("Deployment fence-ops/kubefence-controller-manager")
	for _, want := range []string{"replicas: 3", "priorityClassName: system-cluster-critical",
		"image: registry.example.com/kubefence:v9.9.9", "--controller-user=alice@example.com", "--lease-admin-group=platform-admins"} {
		if !strings.Contains(dep, want) {
			t.Errorf("Deployment lacks %q:\n%s", want, dep)
		}
	}
	hooks := y("ValidatingWebhookConfiguration <nil>/kubefence-fencing-webhook-configuration")
	for _, want := range []string{"batch.example.com", "jobs/scale", "jobs/status", "statefulsets/scale", "namespace: fence-ops"} {
		if !strings.Contains(hooks, want) {
			t.Errorf("fencing webhooks lack %q:\n%s", want, hooks)
		}
	}
	if strings.Contains(hooks, "widgets") || strings.Contains(hooks, "kubefence-system") {
		t.Errorf("fencing webhooks keep the default kinds or namespace:\n%s", hooks)
	}
	// Every fencing webhook excludes the release namespace and the listed ones.
	var vwc struct {
		Webhooks []struct {
			Name              string
			NamespaceSelector struct {
				MatchExpressions []struct {
					Key      string
					Operator string
					Values   []string
				} `json:"matchExpressions"`
			} `json:"namespaceSelector"`
		}
	}
	if err := sigsyaml.Unmarshal([]byte(hooks), &vwc); err != nil {
		t.Fatal(err)
	}
	if len(vwc.Webhooks) != 6 {
		t.Errorf("%d fencing webhooks, want 6 (guarded, required, scale, eviction, cluster-scoped, pod-scope)", len(vwc.Webhooks))
	}
	for _, w := range vwc.Webhooks {
		var excluded []string
		for _, e := range w.NamespaceSelector.MatchExpressions {
			if e.Key == "kubernetes.io/metadata.name" && e.Operator == "NotIn" {
				excluded = e.Values
			}
		}
		if !reflect.DeepEqual(excluded, []string{"fence-ops", "kube-system", "monitoring"}) {
			t.Errorf("webhook %s excludes %v, want [fence-ops kube-system monitoring]", w.Name, excluded)
		}
	}
	parents := y("ClusterRole <nil>/kubefence-fencing-parents-role")
	for _, want := range []string{"batch.example.com", "jobs", "apps", "statefulsets", "pods"} {
		if !strings.Contains(parents, want) {
			t.Errorf("parents role lacks %q:\n%s", want, parents)
		}
	}
	rule := y("PrometheusRule fence-ops/kubefence-controller-manager-alerts")
	for _, want := range []string{"release: kube-prometheus-stack", "KubefenceStaleWritesRejected", "{{ $labels.lease }}"} {
		if !strings.Contains(rule, want) {
			t.Errorf("PrometheusRule lacks %q:\n%s", want, rule)
		}
	}
	y("ServiceMonitor fence-ops/kubefence-controller-manager-metrics-monitor")

	// An unknown certificate mode is refused, not silently self-signed.
	cmd := exec.Command(helmBin(t), "template", "kubefence", filepath.Join(root, "dist", "chart"), "--kube-version", kubeVersion, "--set", "image.repository="+testImageRepo, "--set", "certificates.mode=vault")
	if b, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(b), "certificates/mode") {
		t.Errorf("helm template with certificates.mode=vault: err %v, output %s; want a refusal naming certificates.mode", err, b)
	}
}

// renderedYAML is the rendered object k ("Kind namespace/name") of objs, as
// YAML; t fails if none was rendered.
func renderedYAML(t *testing.T, objs map[string]map[string]any, k string) string {
	t.Helper()
	o, ok := objs[k]
	if !ok {
		t.Fatalf("no %s rendered; have %v", k, keysOf(objs))
	}
	b, _ := sigsyaml.Marshal(o)
	return string(b)
}

func keysOf(m map[string]map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// TestChartFailClosedProtections renders the protections of the pods behind
// the fail-closed webhooks: a priority class (and the ResourceQuota GKE needs
// to admit it outside kube-system), a spread over nodes and zones that never
// blocks scheduling, and a PodDisruptionBudget only when it can allow a
// disruption (more than one replica).
func TestChartFailClosedProtections(t *testing.T) {
	type spread struct {
		TopologyKey       string `json:"topologyKey"`
		WhenUnsatisfiable string `json:"whenUnsatisfiable"`
	}
	type podSpec struct {
		PriorityClassName         string   `json:"priorityClassName"`
		TopologySpreadConstraints []spread `json:"topologySpreadConstraints"`
	}
	pod := func(objs map[string]map[string]any) podSpec {
		t.Helper()
		o, ok := objs["Deployment kubefence-system/kubefence-controller-manager"]
		if !ok {
			t.Fatalf("no Deployment rendered; have %v", keysOf(objs))
		}
		b, _ := sigsyaml.Marshal(o["spec"].(map[string]any)["template"].(map[string]any)["spec"])
		var s podSpec
		if err := sigsyaml.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	const pdb, quota = "PodDisruptionBudget kubefence-system/kubefence-controller-manager", "ResourceQuota kubefence-system/kubefence-critical-pods"

	objs := normalizeRaw(t, helmTemplate(t))
	s := pod(objs)
	if s.PriorityClassName != "system-cluster-critical" {
		t.Errorf("default priorityClassName %q, want system-cluster-critical", s.PriorityClassName)
	}
	want := []spread{{"kubernetes.io/hostname", "ScheduleAnyway"}, {"topology.kubernetes.io/zone", "ScheduleAnyway"}}
	if !reflect.DeepEqual(s.TopologySpreadConstraints, want) {
		t.Errorf("default topologySpreadConstraints %+v, want %+v", s.TopologySpreadConstraints, want)
	}
	if _, ok := objs[pdb]; !ok {
		t.Errorf("no PodDisruptionBudget with the default 2 replicas")
	}
	q, ok := objs[quota]
	if !ok {
		t.Fatalf("no ResourceQuota admitting system-cluster-critical pods; have %v", keysOf(objs))
	}
	if b, _ := sigsyaml.Marshal(q); !strings.Contains(string(b), "scopeName: PriorityClass") || !strings.Contains(string(b), "- system-cluster-critical") {
		t.Errorf("the ResourceQuota is not scoped to the priority class:\n%s", b)
	}

	objs = normalizeRaw(t, helmTemplate(t, "--set", "replicas=1"))
	if _, ok := objs[pdb]; ok {
		t.Errorf("replicas=1 renders a PodDisruptionBudget: minAvailable 1 of 1 pod blocks every drain of its node")
	}
	objs = normalizeRaw(t, helmTemplate(t, "--set", "replicas=3"))
	if _, ok := objs[pdb]; !ok {
		t.Errorf("replicas=3 renders no PodDisruptionBudget")
	}

	objs = normalizeRaw(t, helmTemplate(t, "--set", "priorityClassName=", "--set", "topologySpreadConstraints=null"))
	if s := pod(objs); s.PriorityClassName != "" || len(s.TopologySpreadConstraints) != 0 {
		t.Errorf("priorityClassName= and topologySpreadConstraints=null render %+v", s)
	}
	if _, ok := objs[quota]; ok {
		t.Errorf("the ResourceQuota is rendered without a priority class")
	}
	objs = normalizeRaw(t, helmTemplate(t, "--set", "priorityClassName=tenant-critical", "--set", "priorityClassResourceQuota=false"))
	if s := pod(objs); s.PriorityClassName != "tenant-critical" {
		t.Errorf("priorityClassName=tenant-critical renders %q", s.PriorityClassName)
	}
	if _, ok := objs[quota]; ok {
		t.Errorf("priorityClassResourceQuota=false still renders the ResourceQuota")
	}
}

// TestEvictionScopeRenders checks where the fail-closed eviction entry looks:
// by default only namespaces labelled kubefence.io/fencing, with the
// pod-scope entry refusing guarded pods elsewhere, in both modes and both
// installs; widened (chart evictionScope=cluster, kustomize
// config/components/cluster-evictions) every namespace but the excluded ones,
// without the pod-scope entry, the chart rendering what the component
// builds. test/enforcement TestEvictionScope runs the default on the API
// server.
func TestEvictionScopeRenders(t *testing.T) {
	type entry struct {
		name     string
		selector string
	}
	entries := func(t *testing.T, manifest []byte) []entry {
		t.Helper()
		var out []entry
		for _, c := range decodeKind[admissionregistrationv1.ValidatingWebhookConfiguration](t, documents(t, manifest), "ValidatingWebhookConfiguration") {
			if c.Name != "kubefence-fencing-webhook-configuration" {
				continue
			}
			for _, w := range c.Webhooks {
				if w.Name == "eviction.fencing.kubefence.io" || w.Name == "pod-scope.fencing.kubefence.io" {
					sel, err := metav1.LabelSelectorAsSelector(w.NamespaceSelector)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, entry{w.Name, sel.String()})
				}
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
		return out
	}
	const excluded = "kubernetes.io/metadata.name notin (kube-system,kubefence-system)"
	labelled := []entry{
		{"eviction.fencing.kubefence.io", "kubefence.io/fencing," + excluded},
		{"pod-scope.fencing.kubefence.io", "!kubefence.io/fencing," + excluded},
	}
	cluster := []entry{{"eviction.fencing.kubefence.io", excluded}}
	for _, c := range []struct {
		what     string
		manifest []byte
		want     []entry
	}{
		{"config/default", buildDir(t, "config/default"), labelled},
		{"config/policy", buildDir(t, "config/policy"), labelled},
		{"chart", helmTemplate(t), labelled},
		{"chart enforcement=policy", helmTemplate(t, "--set", "enforcement=policy"), labelled},
		{"config/cluster-evictions", buildDir(t, "config/cluster-evictions"), cluster},
		{"chart evictionScope=cluster", helmTemplate(t, "--set", "evictionScope=cluster"), cluster},
		{"chart evictionScope=cluster enforcement=policy", helmTemplate(t, "--set", "evictionScope=cluster", "--set", "enforcement=policy"), cluster},
	} {
		if got := entries(t, c.manifest); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: eviction and pod-scope entries %+v, want %+v", c.what, got, c.want)
		}
	}
	// The widened chart is the widened kustomize install (webhooks compared by name).
	byName := func(objs map[string]map[string]any) map[string]map[string]any {
		for _, o := range objs {
			if hooks, ok := o["webhooks"].([]any); ok {
				sort.Slice(hooks, func(i, j int) bool {
					return hooks[i].(map[string]any)["name"].(string) < hooks[j].(map[string]any)["name"].(string)
				})
			}
		}
		return objs
	}
	compareObjects(t, "config/cluster-evictions", byName(normalize(t, buildDir(t, "config/cluster-evictions"))),
		"dist/chart (evictionScope=cluster)", byName(normalize(t, helmTemplate(t, "--set", "evictionScope=cluster"))))
	cmd := exec.Command(helmBin(t), "template", "kubefence", filepath.Join(root, "dist", "chart"), "--kube-version", kubeVersion, "--set", "evictionScope=everywhere")
	if b, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(b), `at '/evictionScope': value must be one of 'labelled', 'cluster'`) {
		t.Errorf("helm template with evictionScope=everywhere: err %v, output %s; want a refusal naming evictionScope", err, b)
	}
}
