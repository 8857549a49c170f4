package testenv

import (
	"os"
	"path/filepath"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// PolicyModeWebhooks configures env for an operator in policy mode
// (config/components/policy): the FencedLease webhooks of WebhookPaths, and
// of the fencing webhook configuration only the entries for /scale and
// evictions, whose objects carry no labels for a policy to read.
func PolicyModeWebhooks(root string, env *envtest.Environment) error {
	b, err := os.ReadFile(filepath.Join(root, "config", "webhook", "fencing.yaml"))
	if err != nil {
		return err
	}
	var cfg admissionv1.ValidatingWebhookConfiguration
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		return err
	}
	var keep []admissionv1.ValidatingWebhook
	for _, w := range cfg.Webhooks {
		if strings.HasPrefix(w.Name, "scale.") || strings.HasPrefix(w.Name, "eviction.") {
			keep = append(keep, w)
		}
	}
	cfg.Webhooks = keep
	env.WebhookInstallOptions.Paths = WebhookPaths(root)[:1]
	env.WebhookInstallOptions.ValidatingWebhooks = []*admissionv1.ValidatingWebhookConfiguration{&cfg}
	return nil
}
