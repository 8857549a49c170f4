package operator

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/policy"
	"github.com/kubefence/kubefence/controllers/webhooks/fencing"
)

// BindFlags registers the operator's flags on fs, with o's values as their
// defaults (start from DefaultOptions): the deployer's choices first, then
// the timing group, which only experts should change. Namespace and
// ServiceAccount, when o leaves them empty, default to $POD_NAMESPACE and
// $POD_SERVICE_ACCOUNT, else to the install's names. The test hooks
// (Reconciler, Webhooks, Clock, LeaseReader) have no flags. Parsing checks
// each value's form; Validate (which Setup calls) checks the whole.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	// Who the operator is.
	if o.Namespace == "" {
		o.Namespace = envOr("POD_NAMESPACE", coordv1alpha1.OperatorNamespace)
	}
	if o.ServiceAccount == "" {
		o.ServiceAccount = envOr("POD_SERVICE_ACCOUNT", coordv1alpha1.OperatorServiceAccount)
	}
	fs.StringVar(&o.Namespace, "namespace", o.Namespace,
		"The operator's namespace: never fenced, it holds the leader-election Lease.")
	fs.StringVar(&o.ServiceAccount, "service-account", o.ServiceAccount,
		"The operator's service account; its username is trusted by the FencedLease webhook as the controller.")

	// Where fencing is judged (docs/design.md, "Policy mode").
	fs.StringVar(&o.Enforcement, "enforcement", o.Enforcement,
		"Where fencing is judged: \"webhook\" (the fencing webhook decides every guarded write) or \"policy\" (a ValidatingAdmissionPolicy "+
			"the operator installs decides inside the API server; the webhook then serves /scale and evictions only).")
	fs.Var(&kindsFlag{&o.RequiredKinds}, "required-fencing-kind",
		"With --enforcement=policy: a kind whose unguarded writes are refused in namespaces labelled kubefence.io/fencing=required, "+
			"as <resource>.<group> (e.g. widgets.example.kubefence.io, deployments.apps, configmaps); repeatable.")
	fs.StringVar(&o.BarrierServers, "barrier-servers", o.BarrierServers,
		"With --enforcement=policy: which API servers a grant waits for: \"endpoints\" (every kube-apiserver the default/kubernetes Service lists, "+
			"each addressed directly) or \"configured\" (only the operator's configured API address: a single API server, or a managed control plane "+
			"whose servers cannot be addressed one by one; see docs/design.md for the weaker guarantee).")
	fs.StringVar(&o.OwnerClusterRole, "owner-cluster-role", o.OwnerClusterRole,
		"With --enforcement=policy: the ClusterRole that owns the ValidatingAdmissionPolicies, bindings and tenure tables the operator creates, "+
			"so that deleting it (helm uninstall, make undeploy) has the garbage collector delete them; while it is missing nothing is (re)created. "+
			"The manifests set "+policy.DefaultOwnerClusterRole+". Empty: nothing owns them, and they stay after an uninstall.")

	// Who may do what.
	fs.Var(&listFlag{list: &o.AdminGroups}, "lease-admin-group",
		"A group whose members may change the settings of existing FencedLeases (repeatable; default system:masters).")
	fs.Var(&listFlag{list: &o.ControllerUsers}, "controller-user",
		"An additional username trusted as the controller by the FencedLease webhook (repeatable).")
	fs.Var(&listFlag{list: &o.CleanupUsers, none: "-"}, "fencing-cleanup-user",
		"A user whose DELETEs of guarded objects are accepted without holding their lease (repeatable; default: the namespace controller "+
			"and the garbage collector of kube-controller-manager, "+strings.Join(fencing.DefaultCleanupUsers, ", ")+"; \"-\" for nobody).")
	fs.IntVar(&o.MaxConcurrentReconciles, "max-concurrent-reconciles", o.MaxConcurrentReconciles,
		"How many leases the controller decides at once. After a mass fail-over every expired lease waits for a worker; each worker mostly waits for one API write.")

	// Timing (experts only): docs/operations.md, "Tuning".
	fs.DurationVar(&o.Timing.CommitLag, "max-commit-lag", o.Timing.CommitLag,
		"The longest the API server may take to commit a guarded write after the fencing webhook admitted it; must be > 0. The webhook stops accepting a token this long plus --webhook-clock-skew before its tenure's expiry, "+
			"but at most a tenth of the lease before it: for leases shorter than 10 x (skew + this) the bound shrinks to a tenth of the lease, skew included. "+
			"The controller waits this long after an operator revokes a tenure, before the first grant of a recreated lease, and, with --enforcement=policy, after a grant's barrier.")
	fs.DurationVar(&o.WebhookSkew, "webhook-clock-skew", o.WebhookSkew,
		"The fencing webhook refuses a token this long before its tenure's expiry, covering the clock difference between webhook and controller.")
	fs.Float64Var(&o.Timing.DriftRatio, "drift-ratio", o.Timing.DriftRatio,
		"Clock-drift allowance added to every lease, as a fraction of its duration.")
	fs.DurationVar(&o.Timing.MinDrift, "min-drift", o.Timing.MinDrift,
		"Smallest clock-drift allowance added to every lease.")
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// listFlag is a repeatable string flag. Its first value replaces the
// default list; none, if set, alone stands for the empty list.
type listFlag struct {
	list    *[]string
	none    string
	set     bool
	setNone bool
}

// String shows only values set on the command line: the help texts state
// the defaults.
func (f *listFlag) String() string {
	if f.list == nil || !f.set {
		return ""
	}
	return strings.Join(*f.list, ",")
}

func (f *listFlag) Set(v string) error {
	if !f.set {
		*f.list, f.set = nil, true
	}
	switch {
	case f.none != "" && v == f.none:
		if len(*f.list) > 0 {
			return fmt.Errorf("%q means nobody: expected it alone, not beside %v", v, *f.list)
		}
		f.setNone = true
		return nil
	case f.setNone:
		return fmt.Errorf("%q beside %q, which means nobody: expected one or the other", v, f.none)
	}
	*f.list = append(*f.list, v)
	return nil
}

// kindsFlag is a repeatable <resource>.<group> flag.
type kindsFlag struct{ kinds *[]schema.GroupResource }

func (f *kindsFlag) String() string {
	if f.kinds == nil {
		return ""
	}
	s := make([]string, len(*f.kinds))
	for i, gr := range *f.kinds {
		s[i] = gr.String()
	}
	return strings.Join(s, ",")
}

func (f *kindsFlag) Set(v string) error {
	gr, err := policy.ParseGroupResource(v)
	if err != nil {
		return err
	}
	*f.kinds = append(*f.kinds, gr)
	return nil
}
