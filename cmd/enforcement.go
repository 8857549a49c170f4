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
	mode           string
	requiredKinds  stringList
	barrierServers string
	ownerRole      string
}

func (f *enforcementFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&f.mode, "enforcement", operator.EnforcementWebhook,
		"Where fencing is judged: \"webhook\" (the fencing webhook decides every guarded write) or \"policy\" (a ValidatingAdmissionPolicy "+
			"the operator installs decides inside the API server; the webhook then serves /scale and evictions only).")
	fs.Var(&f.requiredKinds, "required-fencing-kind",
		"With --enforcement=policy: a kind whose unguarded writes are refused in namespaces labelled kubefence.io/fencing=required, "+
			"as <resource>.<group> (e.g. widgets.example.kubefence.io, deployments.apps, configmaps); repeatable.")
	fs.StringVar(&f.barrierServers, "barrier-servers", operator.BarrierServersEndpoints,
		"With --enforcement=policy: which API servers a grant waits for: \"endpoints\" (every kube-apiserver the default/kubernetes Service lists, "+
			"each addressed directly) or \"configured\" (only the operator's configured API address: a single API server, or a managed control plane "+
			"whose servers cannot be addressed one by one; see docs/design.md for the weaker guarantee).")
	fs.StringVar(&f.ownerRole, "owner-cluster-role", "",
		"With --enforcement=policy: the ClusterRole that owns the ValidatingAdmissionPolicies, bindings and tenure tables the operator creates, "+
			"so that deleting it (helm uninstall, make undeploy) has the garbage collector delete them; while it is missing nothing is (re)created. "+
			"The manifests set "+policy.DefaultOwnerClusterRole+". Empty: nothing owns them, and they stay after an uninstall.")
}

func (f *enforcementFlags) apply(o *operator.Options) error {
	o.Enforcement = f.mode
	o.BarrierServers = f.barrierServers
	o.OwnerClusterRole = f.ownerRole
	for _, k := range f.requiredKinds {
		gr, err := policy.ParseGroupResource(k)
		if err != nil {
			return fmt.Errorf("--required-fencing-kind: %w", err)
		}
		o.RequiredKinds = append(o.RequiredKinds, gr)
	}
	return nil
}
