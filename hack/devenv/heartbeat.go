package devenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// HeartbeatPolicyPath is the shipped heartbeat admission policy and its
// binding (config/heartbeat), below the module root.
func HeartbeatPolicyPath(root string) string {
	return filepath.Join(root, "config", "heartbeat", "heartbeat_policy.yaml")
}

// ApplyHeartbeatPolicy creates the policy kubefence-heartbeats and its
// binding as shipped (HeartbeatPolicyPath), as config/default installs them.
func ApplyHeartbeatPolicy(ctx context.Context, c client.Client, root string) error {
	f, err := os.Open(HeartbeatPolicyPath(root))
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	d := yaml.NewYAMLOrJSONDecoder(f, 4096)
	var policy admissionv1.ValidatingAdmissionPolicy
	var binding admissionv1.ValidatingAdmissionPolicyBinding
	if err := d.Decode(&policy); err != nil {
		return fmt.Errorf("reading the heartbeat policy: %w", err)
	}
	if err := d.Decode(&binding); err != nil {
		return fmt.Errorf("reading the heartbeat policy's binding: %w", err)
	}
	if err := c.Create(ctx, &policy); err != nil {
		return err
	}
	return c.Create(ctx, &binding)
}
