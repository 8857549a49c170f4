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
// (config/components/policy): no FencedLease webhook (the policy
// kubefence-fencedleases judges FencedLease writes), and of the fencing
// webhook configuration only the entries for /scale and evictions, whose
// objects carry no labels for a policy to read.
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
	env.WebhookInstallOptions.Paths = nil
	env.WebhookInstallOptions.ValidatingWebhooks = []*admissionv1.ValidatingWebhookConfiguration{&cfg}
	return nil
}

// ListenOnEveryAddress makes env's kube-apiserver listen on every address of
// the host (--bind-address 0.0.0.0) instead of the loopback address only, so
// that the address it lists for itself in the kubernetes Service's endpoints
// (its advertise address: the host's default interface) reaches it, as
// policy mode's barrier needs (policy.APIServers); clients still address
// and verify it at the loopback address. Not for StartTwo, whose servers
// share one port on two loopback addresses.
func ListenOnEveryAddress(env *envtest.Environment) {
	env.ControlPlane.GetAPIServer().Configure().Set("bind-address", "0.0.0.0")
}
