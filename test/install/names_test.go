package install

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// TestNamesMatchTheManifests compares the names declared once in
// api/v1alpha1 (names.go, wire.go) with the files of config/ and
// dist/chart that spell them again, as they are on disk (no kustomize, no
// helm: it runs in the unit tier). A rename in one place fails here.
func TestNamesMatchTheManifests(t *testing.T) {
	prefix := kustomization(t)["namePrefix"]
	if ns := kustomization(t)["namespace"]; ns != coordv1alpha1.OperatorNamespace {
		t.Errorf("config/default/kustomization.yaml installs into %q, api/ says OperatorNamespace %q", ns, coordv1alpha1.OperatorNamespace)
	}

	t.Run("webhook paths", func(t *testing.T) {
		want := []string{coordv1alpha1.FencedLeaseWebhookPath, coordv1alpha1.FencingGuardedPath,
			coordv1alpha1.FencingRequiredPath, coordv1alpha1.FencingScalePath, coordv1alpha1.FencingPodScopePath}
		var config []string
		for _, f := range []string{"config/webhook/manifests.yaml", "config/webhook/fencing.yaml"} {
			for _, o := range objects(t, f) {
				for _, w := range list(o["webhooks"]) {
					config = append(config, str(w, "clientConfig", "service", "path"))
				}
			}
		}
		sameSet(t, "paths in config/webhook", config, want)
		var chart []string
		for _, f := range []string{"dist/chart/templates/fencedlease_webhook.yaml", "dist/chart/templates/fencing_webhook.yaml"} {
			chart = append(chart, matches(t, f, `(?m)^\s+path: (\S+)`)...)
		}
		sameSet(t, "paths in the chart's webhook templates", chart, want)
	})

	t.Run("install names", func(t *testing.T) {
		for _, c := range []struct{ file, kind, want string }{
			{"config/rbac/service_account.yaml", "ServiceAccount", coordv1alpha1.OperatorServiceAccount},
			{"config/webhook/service.yaml", "Service", coordv1alpha1.WebhookServiceName},
			{"config/default/webhook_cert_secret.yaml", "Secret", coordv1alpha1.WebhookSecretName},
			{"config/webhook/manifests.yaml", "ValidatingWebhookConfiguration", coordv1alpha1.LeaseWebhookConfigurationName},
			{"config/webhook/fencing.yaml", "ValidatingWebhookConfiguration", coordv1alpha1.FencingWebhookConfigurationName},
		} {
			var names []string
			for _, o := range objects(t, c.file) {
				if o["kind"] == c.kind {
					names = append(names, prefix+str(o, "metadata", "name"))
				}
			}
			if !slices.Contains(names, c.want) {
				t.Errorf("%s: %s names %v (with namePrefix %q), api/ says %q", c.file, c.kind, names, prefix, c.want)
			}
		}
		// The chart names them outright, and passes the self-signed mode's
		// names to the manager as flags.
		for file, names := range map[string][]string{
			"dist/chart/templates/fencedlease_webhook.yaml": {"name: " + coordv1alpha1.LeaseWebhookConfigurationName, "name: " + coordv1alpha1.WebhookServiceName},
			"dist/chart/templates/fencing_webhook.yaml":     {"name: " + coordv1alpha1.FencingWebhookConfigurationName, "name: " + coordv1alpha1.WebhookServiceName},
			"dist/chart/templates/services.yaml":            {"name: " + coordv1alpha1.WebhookServiceName},
			"dist/chart/templates/deployment.yaml": {
				"--webhook-service-name=" + coordv1alpha1.WebhookServiceName,
				"--webhook-secret-name=" + coordv1alpha1.WebhookSecretName,
				"--webhook-configuration-name=" + coordv1alpha1.LeaseWebhookConfigurationName,
				"--webhook-configuration-name=" + coordv1alpha1.FencingWebhookConfigurationName,
				"serviceAccountName: " + coordv1alpha1.OperatorServiceAccount,
			},
		} {
			contains(t, file, names...)
		}
	})

	t.Run("labels and the leader-election Lease", func(t *testing.T) {
		for _, f := range []string{"config/webhook/fencing.yaml", "dist/chart/templates/fencing_webhook.yaml"} {
			contains(t, f, "key: "+coordv1alpha1.GuardLeaseLabel, "key: "+coordv1alpha1.FencingNamespaceLabel)
		}
		contains(t, "config/crd/kustomization.yaml", coordv1alpha1.TokenHistoryLabel+`: "true"`)
		contains(t, "dist/chart/templates/token_history.yaml", `"`+coordv1alpha1.TokenHistoryLabel+`" "true"`)
		contains(t, "Makefile", "--selector='"+coordv1alpha1.TokenHistoryLabel+"!=true'")
		for _, f := range []string{"config/prometheus/prometheus_rule.yaml", "dist/chart/files/prometheus_rule.yaml"} {
			contains(t, f, `leader_election_master_status{name="`+coordv1alpha1.LeaderElectionID+`"}`)
		}
	})

	t.Run("epoch store shards in RBAC", func(t *testing.T) {
		var names []string
		for _, o := range objects(t, "config/rbac/role.yaml") {
			for _, r := range list(o["rules"]) {
				if rn, ok := r.(map[string]any)["resourceNames"]; ok && slices.Contains(strs(r, "resources"), "configmaps") {
					for _, n := range list(rn) {
						names = append(names, fmt.Sprint(n))
					}
				}
			}
		}
		sameSet(t, "ConfigMap resourceNames of config/rbac/role.yaml", names, coordv1alpha1.EpochShardNames())
		contains(t, "dist/chart/templates/rbac/cluster_roles.yaml",
			fmt.Sprintf("until %d", coordv1alpha1.EpochShards), fmt.Sprintf(`printf "%s-%%02x"`, coordv1alpha1.EpochShardPrefix))
	})
}

func read(t *testing.T, file string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func kustomization(t *testing.T) map[string]string {
	t.Helper()
	var k map[string]any
	if err := sigsyaml.Unmarshal(read(t, "config/default/kustomization.yaml"), &k); err != nil {
		t.Fatal(err)
	}
	return map[string]string{"namePrefix": fmt.Sprint(k["namePrefix"]), "namespace": fmt.Sprint(k["namespace"])}
}

// objects are the YAML documents of a file of config/.
func objects(t *testing.T, file string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, doc := range bytes.Split(read(t, file), []byte("\n---")) {
		var o map[string]any
		if err := sigsyaml.Unmarshal(doc, &o); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if o != nil {
			out = append(out, o)
		}
	}
	return out
}

func list(v any) []any { l, _ := v.([]any); return l }

func str(v any, path ...string) string {
	for _, p := range path {
		m, _ := v.(map[string]any)
		v = m[p]
	}
	s, _ := v.(string)
	return s
}

func strs(v any, key string) []string {
	m, _ := v.(map[string]any)
	var out []string
	for _, x := range list(m[key]) {
		out = append(out, fmt.Sprint(x))
	}
	return out
}

func matches(t *testing.T, file, re string) []string {
	t.Helper()
	var out []string
	for _, m := range regexp.MustCompile(re).FindAllStringSubmatch(string(read(t, file)), -1) {
		out = append(out, m[1])
	}
	return out
}

func contains(t *testing.T, file string, want ...string) {
	t.Helper()
	text := string(read(t, file))
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("%s does not contain %q (declared in api/v1alpha1)", file, w)
		}
	}
}

// sameSet reports got and want as different when one holds a name the
// other lacks (repetitions aside).
func sameSet(t *testing.T, what string, got, want []string) {
	t.Helper()
	g, w := slices.Compact(slices.Sorted(slices.Values(got))), slices.Compact(slices.Sorted(slices.Values(want)))
	if !slices.Equal(g, w) {
		t.Errorf("%s: %v, api/v1alpha1 declares %v", what, g, w)
	}
}
