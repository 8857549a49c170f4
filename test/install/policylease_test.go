package install

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// TestPolicyModeHasNoFencedLeaseWebhook checks that config/policy and the
// chart with enforcement=policy install no FencedLease webhook: the policy
// kubefence-fencedleases judges FencedLease writes, so that renewals do not
// depend on the operator. The configuration stays, empty, for the
// certificate rotation that names it.
func TestPolicyModeHasNoFencedLeaseWebhook(t *testing.T) {
	for name, out := range map[string][]byte{
		"config/policy":                   buildDir(t, "config/policy"),
		"dist/chart (enforcement=policy)": helmTemplate(t, "--set", "enforcement=policy"),
	} {
		found := false
		for _, c := range decodeKind[admissionregistrationv1.ValidatingWebhookConfiguration](t, documents(t, out), "ValidatingWebhookConfiguration") {
			if c.Name != "kubefence-validating-webhook-configuration" {
				continue
			}
			found = true
			for _, w := range c.Webhooks {
				t.Errorf("%s: FencedLease webhook configuration has entry %s, want none in policy mode", name, w.Name)
			}
		}
		if !found {
			t.Errorf("%s: no ValidatingWebhookConfiguration kubefence-validating-webhook-configuration (the certificate rotation names it)", name)
		}
	}
}
