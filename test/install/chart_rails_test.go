package install

// The chart's rails: values.schema.json refuses bad values by name and covers
// every value; imagePullSecrets, pod labels and annotations, the
// NetworkPolicy switch, the per-lease metrics switch, the ServiceMonitor's
// authorization and TLS verification, the alerts' runbook links and the
// helm test hook render as documented.

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"
)

// helmRefusal runs helm (template or lint) with args and returns its output,
// failing the test if helm accepted them.
func helmRefusal(t *testing.T, verb string, args ...string) string {
	t.Helper()
	base := []string{verb}
	if verb == "template" {
		base = append(base, "kubefence")
	}
	base = append(base, filepath.Join(root, "dist", "chart"), "--namespace", releaseNamespace, "--kube-version", kubeVersion)
	out, err := exec.Command(helmBin(t), append(base, args...)...).CombinedOutput()
	if err == nil {
		t.Errorf("helm %s %v accepted the values:\n%s", verb, args, out)
	}
	return string(out)
}

func TestChartSchemaRefusesBadValues(t *testing.T) {
	for _, c := range []struct {
		name string
		set  []string
		want string
	}{
		{"unknown top-level key", []string{"--set", "replica=2"}, "additional properties 'replica' not allowed"},
		{"unknown nested key", []string{"--set", "serviceMonitor.bearerTokenFile=/x"}, "at '/serviceMonitor': additional properties 'bearerTokenFile' not allowed"},
		{"imagePullSecrets without name", []string{"--set", "imagePullSecrets[0].nam=x"}, "at '/imagePullSecrets/0': missing property 'name'"},
		{"wrong enum: enforcement", []string{"--set", "enforcement=vault"}, "at '/enforcement': value must be one of 'webhook', 'policy'"},
		{"wrong enum: certificates.mode", []string{"--set", "certificates.mode=vault"}, "at '/certificates/mode': value must be one of 'self-signed', 'cert-manager'"},
		{"wrong enum: image.pullPolicy", []string{"--set", "image.pullPolicy=Sometimes"}, "at '/image/pullPolicy': value must be one of"},
		{"wrong type: replicas", []string{"--set", "replicas=two"}, "at '/replicas': got string, want integer"},
		{"wrong type: metrics.perLease", []string{"--set", "metrics.perLease=no"}, "at '/metrics/perLease': got string, want boolean"},
		{"replicas 0", []string{"--set", "replicas=0"}, "at '/replicas': minimum: got 0, want 1"},
		{"runbookBaseURL not a URL", []string{"--set", "prometheusRule.runbookBaseURL=docs"}, "at '/prometheusRule/runbookBaseURL'"},
		{"tests.timeout not a duration", []string{"--set", "tests.timeout=soon"}, "at '/tests/timeout'"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, verb := range []string{"template", "lint"} {
				if out := helmRefusal(t, verb, c.set...); !strings.Contains(out, c.want) {
					t.Errorf("helm %s %v: output lacks %q:\n%s", verb, c.set, c.want, out)
				}
			}
		})
	}
	// Not a schema rule: the test's probes in an excluded namespace prove nothing.
	if out := helmRefusal(t, "template", "--set", "tests.namespace=kube-system"); !strings.Contains(out, `tests.namespace "kube-system"`) {
		t.Errorf("tests.namespace=kube-system: output lacks the reason:\n%s", out)
	}
}

// valuePaths lists the paths of values.yaml down to depth levels ("a",
// "a.b"); maps at the last level are not entered.
func valuePaths(prefix string, v any, depth int, out map[string]any) {
	m, ok := v.(map[string]any)
	if !ok || depth == 0 || (len(m) == 0 && prefix != "") {
		out[prefix] = v
		return
	}
	for k, sub := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		valuePaths(p, sub, depth-1, out)
	}
}

func chartValues(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "dist", "chart", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := sigsyaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestChartSchemaCoversEveryValue: every key of values.yaml, at every depth
// the schema defines, is a property of values.schema.json (whose objects
// refuse unknown keys), so a value added without its schema fails here.
func TestChartSchemaCoversEveryValue(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "dist", "chart", "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	var walk func(path string, v any, s map[string]any)
	walk = func(path string, v any, s map[string]any) {
		m, ok := v.(map[string]any)
		if !ok {
			return
		}
		props, _ := s["properties"].(map[string]any)
		if props == nil {
			return // a free-form object (labels, resources' quantities, affinity)
		}
		if s["additionalProperties"] != false {
			t.Errorf("schema of %q defines properties but allows others (additionalProperties is not false)", path)
		}
		for k, sub := range m {
			ps, ok := props[k].(map[string]any)
			if !ok {
				t.Errorf("values.yaml has %s%s, values.schema.json does not", path, k)
				continue
			}
			walk(path+k+".", sub, ps)
		}
	}
	walk("", chartValues(t), schema)
}

// TestChartValuesDocumented: every value (down to a.b) is named in the values
// table of docs/operations.md, "The Helm chart".
func TestChartValuesDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	i := strings.Index(s, "\n### The Helm chart\n")
	if i < 0 {
		t.Fatal("docs/operations.md has no heading \"### The Helm chart\"")
	}
	table := ""
	for _, line := range strings.Split(s[i:], "\n") {
		if strings.HasPrefix(line, "| `") {
			table += line + "\n"
		}
		if strings.HasPrefix(line, "### ") && table != "" {
			break
		}
	}
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-zA-Z.]+)`").FindAllStringSubmatch(table, -1) {
		named[m[1]] = true
	}
	paths := map[string]any{}
	valuePaths("", chartValues(t), 2, paths)
	var missing []string
	for p := range paths {
		if !named[p] {
			missing = append(missing, p)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("the values table of docs/operations.md (The Helm chart) does not name %v", missing)
	}
}

func TestChartRails(t *testing.T) {
	objs := normalizeRaw(t, helmTemplate(t,
		"--set", "imagePullSecrets[0].name=regcred", "--set", "podLabels.team=platform",
		"--set", "podAnnotations.example\\.com/owner=platform", "--set", "networkPolicy.enabled=true",
		"--set", "networkPolicy.metrics.namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=monitoring",
		"--set", "metrics.perLease=false"))
	y := func(k string) string { return renderedYAML(t, objs, k) }
	dep := y("Deployment kubefence-system/kubefence-controller-manager")
	for _, want := range []string{"- name: regcred", "team: platform", "example.com/owner: platform", "--metrics-per-lease=false",
		"kubectl.kubernetes.io/default-container: manager"} {
		if !strings.Contains(dep, want) {
			t.Errorf("Deployment lacks %q:\n%s", want, dep)
		}
	}
	if hook := y("Pod kubefence-system/kubefence-test-check"); !strings.Contains(hook, "- name: regcred") {
		t.Errorf("the test Pod lacks the imagePullSecrets:\n%s", hook)
	}
	if w := y("NetworkPolicy kubefence-system/kubefence-allow-webhook-traffic"); !strings.Contains(w, "port: 9443") || strings.Contains(w, "from:") {
		t.Errorf("the webhook NetworkPolicy must admit port 9443 from anywhere:\n%s", w)
	}
	m := y("NetworkPolicy kubefence-system/kubefence-allow-metrics-traffic")
	for _, want := range []string{"port: 8443", "kubernetes.io/metadata.name: monitoring"} {
		if !strings.Contains(m, want) {
			t.Errorf("the metrics NetworkPolicy lacks %q:\n%s", want, m)
		}
	}

	// Defaults: no NetworkPolicy, per-lease series on, pod labels as config/.
	def := normalizeRaw(t, helmTemplate(t))
	for k := range def {
		if strings.HasPrefix(k, "NetworkPolicy ") {
			t.Errorf("the default values render %s (networkPolicy.enabled is false)", k)
		}
	}
	b, _ := sigsyaml.Marshal(def["Deployment kubefence-system/kubefence-controller-manager"])
	if strings.Contains(string(b), "metrics-per-lease") || strings.Contains(string(b), "imagePullSecrets") {
		t.Errorf("the default Deployment sets --metrics-per-lease or imagePullSecrets:\n%s", b)
	}
}

func TestChartTestHook(t *testing.T) {
	objs := normalizeRaw(t, helmTemplate(t, "--set", "tests.namespace=probes", "--set", "tests.timeout=90s"))
	pod, ok := objs["Pod kubefence-system/kubefence-test-check"]
	if !ok {
		t.Fatalf("no test Pod; have %v", keysOf(objs))
	}
	b, _ := sigsyaml.Marshal(pod)
	for _, want := range []string{"helm.sh/hook: test", "- /kubectl-fence", "- check", "- --wait=90s", "- --namespace=probes",
		"serviceAccountName: kubefence-test", "runAsNonRoot: true", "restartPolicy: Never"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the test Pod lacks %q:\n%s", want, b)
		}
	}
	for _, k := range []string{"Role probes/kubefence-test", "RoleBinding probes/kubefence-test", "ClusterRole <nil>/kubefence-test",
		"ClusterRoleBinding <nil>/kubefence-test", "ServiceAccount kubefence-system/kubefence-test"} {
		o, ok := objs[k]
		if !ok {
			t.Errorf("no %s rendered", k)
			continue
		}
		if ann, _ := o["metadata"].(map[string]any)["annotations"].(map[string]any); ann["helm.sh/hook"] != "test" {
			t.Errorf("%s is not a test hook (annotations %v): it would stay installed", k, ann)
		}
	}
}

func TestChartMonitoring(t *testing.T) {
	monitor := func(args ...string) string {
		t.Helper()
		objs := normalizeRaw(t, helmTemplate(t, append([]string{"--set", "serviceMonitor.enabled=true"}, args...)...))
		o, ok := objs["ServiceMonitor kubefence-system/kubefence-controller-manager-metrics-monitor"]
		if !ok {
			t.Fatalf("no ServiceMonitor; have %v", keysOf(objs))
		}
		b, _ := sigsyaml.Marshal(o)
		return string(b)
	}
	def := monitor()
	for _, want := range []string{"authorization:", "name: kubefence-metrics-scraper-token", "key: token", "type: Bearer",
		"name: kubefence-webhook-server-cert", "key: ca.crt", "serverName: kubefence-controller-manager-metrics-service.kubefence-system.svc"} {
		if !strings.Contains(def, want) {
			t.Errorf("default ServiceMonitor lacks %q:\n%s", want, def)
		}
	}
	for _, bad := range []string{"bearerTokenFile", "insecureSkipVerify"} {
		if strings.Contains(def, bad) {
			t.Errorf("default ServiceMonitor has %s:\n%s", bad, def)
		}
	}
	objs := normalizeRaw(t, helmTemplate(t, "--set", "serviceMonitor.enabled=true"))
	for _, k := range []string{"ServiceAccount kubefence-system/kubefence-metrics-scraper", "Secret kubefence-system/kubefence-metrics-scraper-token",
		"ClusterRoleBinding <nil>/kubefence-metrics-scraper-rolebinding"} {
		if _, ok := objs[k]; !ok {
			t.Errorf("serviceMonitor.enabled without authorization.secretName renders no %s", k)
		}
	}
	own := monitor("--set", "serviceMonitor.authorization.secretName=prom-token", "--set", "serviceMonitor.tlsConfig.ca.configMap.name=metrics-ca",
		"--set", "serviceMonitor.tlsConfig.ca.configMap.key=ca.pem", "--set", "serviceMonitor.tlsConfig.serverName=metrics.example")
	for _, want := range []string{"name: prom-token", "configMap:", "name: metrics-ca", "key: ca.pem", "serverName: metrics.example"} {
		if !strings.Contains(own, want) {
			t.Errorf("ServiceMonitor with own secret and CA lacks %q:\n%s", want, own)
		}
	}
	if insecure := monitor("--set", "serviceMonitor.tlsConfig.insecureSkipVerify=true"); !strings.Contains(insecure, "insecureSkipVerify: true") {
		t.Errorf("insecureSkipVerify asked for but not rendered:\n%s", insecure)
	}
	// cert-manager mode: the Certificate names the metrics Service and the
	// manager serves it on the metrics port.
	cm := normalizeRaw(t, helmTemplate(t, "--set", "certificates.mode=cert-manager"))
	cb, _ := sigsyaml.Marshal(cm["Certificate kubefence-system/kubefence-serving-cert"])
	db, _ := sigsyaml.Marshal(cm["Deployment kubefence-system/kubefence-controller-manager"])
	if !strings.Contains(string(cb), "kubefence-controller-manager-metrics-service.kubefence-system.svc") || !strings.Contains(string(db), "--metrics-cert-path=/tmp/k8s-webhook-server/serving-certs") {
		t.Errorf("cert-manager mode: the metrics server does not serve a certificate for its Service:\n%s\n%s", cb, db)
	}
}

// TestChartRunbookLinks: no alert links to a repository the project does not
// control; with runbookBaseURL each links to <base>/operations.md#<anchor>;
// and an alert on the client metrics ships.
func TestChartRunbookLinks(t *testing.T) {
	rule := func(args ...string) []map[string]any {
		t.Helper()
		objs := normalizeRaw(t, helmTemplate(t, append([]string{"--set", "prometheusRule.enabled=true"}, args...)...))
		var r struct {
			Spec struct {
				Groups []struct {
					Rules []map[string]any
				}
			}
		}
		b, _ := sigsyaml.Marshal(objs["PrometheusRule kubefence-system/kubefence-controller-manager-alerts"])
		if err := sigsyaml.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		var out []map[string]any
		for _, g := range r.Spec.Groups {
			out = append(out, g.Rules...)
		}
		if len(out) < 8 {
			t.Fatalf("%d alerts rendered", len(out))
		}
		return out
	}
	url := func(r map[string]any) string {
		return r["annotations"].(map[string]any)["runbook_url"].(string)
	}
	alerts := map[string]bool{}
	for _, r := range rule() {
		alerts[r["alert"].(string)] = true
		if u := url(r); strings.Contains(u, "github.com/kubefence") {
			t.Errorf("alert %s links to %s, a repository this project does not control", r["alert"], u)
		}
	}
	for _, a := range []string{"KubefenceClientsLeadingTogether", "KubefenceClientRenewalsFailing", "KubefenceClientWritesSlow"} {
		if !alerts[a] {
			t.Errorf("no alert %s on the client metrics", a)
		}
	}
	for _, r := range rule("--set", "prometheusRule.runbookBaseURL=https://docs.example.com/kubefence/v0.1.0/") {
		u := url(r)
		if !regexp.MustCompile(`^https://docs\.example\.com/kubefence/v0\.1\.0/operations\.md#kubefence[a-z]+$`).MatchString(u) {
			t.Errorf("alert %s: runbook_url %q, want https://docs.example.com/kubefence/v0.1.0/operations.md#<anchor>", r["alert"], u)
		}
	}
}

// TestLeaseRefusalReasonsDocumented: the reasons docs/metrics.md lists for
// kubefence_lease_writes_refused_total are exactly those the FencedLease
// webhook refuses with.
func TestLeaseRefusalReasonsDocumented(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(root, "controllers", "webhooks", "fencedlease", "fencedlease_webhook.go"))
	if err != nil {
		t.Fatal(err)
	}
	names, err := os.ReadFile(filepath.Join(root, "api", "v1alpha1", "names.go"))
	if err != nil {
		t.Fatal(err)
	}
	value := map[string]string{} // LeaseRefusal... constant -> reason
	for _, m := range regexp.MustCompile(`(?m)^\s+(LeaseRefusal\w+)\s+RefusalReason = "([a-z-]+)"`).FindAllStringSubmatch(string(names), -1) {
		value[m[1]] = m[2]
	}
	code := map[string]bool{}
	for _, m := range regexp.MustCompile(`v\.refuse\(lease, coordv1alpha1\.(LeaseRefusal\w+)`).FindAllStringSubmatch(string(src), -1) {
		r, ok := value[m[1]]
		if !ok {
			t.Errorf("the FencedLease webhook refuses with %s, which api/v1alpha1/names.go does not declare", m[1])
		}
		code[r] = true
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `kubefence_lease_writes_refused_total` \\| counter \\| `reason` \\(([^)]*)\\)").FindStringSubmatch(string(doc))
	if row == nil {
		t.Fatal("docs/metrics.md has no row for kubefence_lease_writes_refused_total with its reasons")
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z-]+)`").FindAllStringSubmatch(row[1], -1) {
		documented[m[1]] = true
	}
	for r := range code {
		if !documented[r] {
			t.Errorf("the FencedLease webhook refuses with reason %q, which docs/metrics.md does not list", r)
		}
	}
	for r := range documented {
		if !code[r] {
			t.Errorf("docs/metrics.md lists reason %q, which the FencedLease webhook never uses", r)
		}
	}
	if len(code) < 10 {
		t.Errorf("found %d refusal reasons in the webhook; the pattern no longer matches its code", len(code))
	}
}
