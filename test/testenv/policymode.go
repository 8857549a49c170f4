package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	sigsyaml "sigs.k8s.io/yaml"
)

// fencingConfigName is the name of config/webhook/fencing.yaml's configuration
// as the component's patch targets see it (config/default's namePrefix).
const fencingConfigName = "kubefence-fencing-webhook-configuration"

// PolicyModeFencingWebhooks is config/webhook/fencing.yaml with the JSON
// patches of config/components/policy/kustomization.yaml that target it
// applied, as kustomize applies them: the envtest suites run the entries
// policy mode ships, not a copy of them.
func PolicyModeFencingWebhooks(root string) (*admissionv1.ValidatingWebhookConfiguration, error) {
	base, err := os.ReadFile(filepath.Join(root, "config", "webhook", "fencing.yaml"))
	if err != nil {
		return nil, err
	}
	doc, err := sigsyaml.YAMLToJSON(base)
	if err != nil {
		return nil, fmt.Errorf("config/webhook/fencing.yaml: %w", err)
	}
	kpath := filepath.Join(root, "config", "components", "policy", "kustomization.yaml")
	b, err := os.ReadFile(kpath)
	if err != nil {
		return nil, err
	}
	var k struct {
		Patches []struct {
			Patch  string `json:"patch"`
			Target struct {
				Kind string `json:"kind"`
				Name string `json:"name"`
			} `json:"target"`
		} `json:"patches"`
	}
	if err := sigsyaml.Unmarshal(b, &k); err != nil {
		return nil, fmt.Errorf("%s: %w", kpath, err)
	}
	for i, p := range k.Patches {
		if p.Target.Kind != "ValidatingWebhookConfiguration" {
			continue
		}
		name, err := regexp.Compile("^(?:" + p.Target.Name + ")$")
		if err != nil {
			return nil, fmt.Errorf("%s: patch %d: target name %q: %w", kpath, i, p.Target.Name, err)
		}
		if !name.MatchString(fencingConfigName) {
			continue
		}
		ops, err := sigsyaml.YAMLToJSON([]byte(p.Patch))
		if err != nil {
			return nil, fmt.Errorf("%s: patch %d: %w", kpath, i, err)
		}
		patch, err := jsonpatch.DecodePatch(ops)
		if err != nil {
			return nil, fmt.Errorf("%s: patch %d is not a JSON patch (expected a list of operations): %w", kpath, i, err)
		}
		if doc, err = patch.Apply(doc); err != nil {
			return nil, fmt.Errorf("%s: patch %d on config/webhook/fencing.yaml: %w", kpath, i, err)
		}
	}
	var cfg admissionv1.ValidatingWebhookConfiguration
	if err := sigsyaml.Unmarshal(doc, &cfg); err != nil {
		return nil, err
	}
	return &cfg, nil
}
