package main

import (
	"flag"
	"fmt"

	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/controllers/policy"
)

// enforcementFlags choose where fencing is judged (docs/design.md, "Policy
// mode").
type enforcementFlags struct {
	mode          string
	requiredKinds stringList
}

func (f *enforcementFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&f.mode, "enforcement", operator.EnforcementWebhook,
		"Where fencing is judged: \"webhook\" (the fencing webhook decides every guarded write) or \"policy\" (a ValidatingAdmissionPolicy "+
			"the operator installs decides inside the API server; the webhook then serves /scale and evictions only).")
	fs.Var(&f.requiredKinds, "required-fencing-kind",
		"With --enforcement=policy: a kind whose unguarded writes are refused in namespaces labelled kubefence.io/fencing=required, "+
			"as <resource>.<group> (e.g. widgets.example.kubefence.io, deployments.apps, configmaps); repeatable.")
}

func (f *enforcementFlags) apply(o *operator.Options) error {
	o.Enforcement = f.mode
	for _, k := range f.requiredKinds {
		gr, err := policy.ParseGroupResource(k)
		if err != nil {
			return fmt.Errorf("--required-fencing-kind: %w", err)
		}
		o.RequiredKinds = append(o.RequiredKinds, gr)
	}
	return nil
}
