package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// checkInterval is how often check --wait tries again.
const checkInterval = time.Second

// probeIdentity names the check's dry-run probes.
const probeIdentity = "kubectl-fence-check"

type checkOptions struct {
	*rootOptions
	wait time.Duration
}

func newCheckCmd(root *rootOptions) *cobra.Command {
	o := &checkOptions{rootOptions: root}
	cmd := noArgsCommand(&cobra.Command{
		Use:   "check",
		Short: "Check that the kubefence API is served and its webhooks answer",
		Long: `Check, as 'cmctl check api' does for cert-manager, that kubefence is ready:

1. the API server serves fencedleases.coordination.kubefence.io/v1alpha1 (the
   CRD is installed and established);
2. the FencedLease webhook answers: a server-side dry-run create of a lease
   carrying another user's request must be refused by the webhook (a user
   trusted as the controller is let through; then a fail-closed webhook must
   have checked it, which check tells by applying each webhook's rules,
   namespaceSelector, objectSelector and matchConditions to the probe as the
   API server does: "missing" names the webhooks that skipped it); in policy
   mode the refusal comes from the ValidatingAdmissionPolicy
   kubefence-fencedleases;
3. the fencing webhook answers: a server-side dry-run create of a ConfigMap
   guarded by a lease that does not exist must be refused by it (in policy
   mode by the ValidatingAdmissionPolicy kubefence-fencing).

It also warns (on stderr, whatever the outcome) about FencedLeases whose
identityBinding is not Pod and whose requests come from service accounts:
pods that run as one service account pass each other's tokenless checks
(deletes, /status and /scale writes, updates that keep the stored token), so
a paused replica can make them after another replica of the same service
account was granted the lease. Set identityBinding: Pod on such leases.

In policy mode check also warns about every API group an aggregated API
server serves (an APIService with spec.service set): the kube-apiserver
proxies those writes without running the fencing policy, so guarded
objects of those groups are not fenced as the design promises.

Dry runs store nothing. The probes run in the namespace of -n; the fencing
webhook skips kubefence-system and kube-system, so choose another one.
With --wait, check tries again every second until everything is ready or the
time is up. The exit code is 0 when ready, 1 otherwise.`,
		Example: `  # After installing, in CI
  kubectl fence check --wait=2m`,
	}, o.run)
	cmd.Flags().DurationVar(&o.wait, "wait", 0, "How long to keep trying until kubefence is ready (for example 2m); 0 tries once.")
	return cmd
}

func (o *checkOptions) run(ctx context.Context) error {
	c, err := o.clients()
	if err != nil {
		return err
	}
	for _, w := range sharedServiceAccountWarnings(ctx, c) {
		fmt.Fprintln(o.streams.ErrOut, "Warning: "+w)
	}
	deadline := time.Now().Add(o.wait)
	lastReason := ""
	for {
		report, warnings, err := check(ctx, c)
		if err == nil {
			for _, line := range report {
				fmt.Fprintln(o.streams.Out, line)
			}
			for _, w := range warnings {
				fmt.Fprintln(o.streams.ErrOut, "Warning: "+w)
			}
			fmt.Fprintln(o.streams.Out, "The kubefence API and webhooks are ready")
			return nil
		}
		if o.wait <= 0 || !time.Now().Add(checkInterval).Before(deadline) || ctx.Err() != nil {
			if o.wait > 0 {
				return fmt.Errorf("kubefence is not ready after %s: %w", o.wait, err)
			}
			return fmt.Errorf("kubefence is not ready: %w", err)
		}
		if err.Error() != lastReason {
			lastReason = err.Error()
			fmt.Fprintf(o.streams.ErrOut, "Not ready yet: %v\n", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubefence is not ready: %w", err)
		case <-time.After(checkInterval):
		}
	}
}

// check runs the three checks once; the report says what answered, the
// warnings what policy mode leaves unfenced.
func check(ctx context.Context, c *clients) (report, warnings []string, err error) {
	gv := coordv1alpha1.GroupVersion.String()
	res, err := c.discovery.ServerResourcesForGroupVersion(gv)
	if err != nil || !slices.ContainsFunc(res.APIResources, func(r metav1.APIResource) bool { return r.Name == "fencedleases" }) {
		if err == nil {
			err = errors.New("the group version has no fencedleases")
		}
		return nil, nil, fmt.Errorf("the API server does not serve fencedleases.%s (%v): install the CRD (make install or make deploy)", gv, err)
	}
	report = []string{fmt.Sprintf("API: fencedleases.%s is served", gv)}

	policyMode := false
	for _, p := range []probe{leaseProbe(c.namespace), fencingProbe(c.namespace)} {
		line, byPolicy, err := p.run(ctx, c)
		if err != nil {
			return nil, nil, err
		}
		report = append(report, line)
		policyMode = policyMode || (byPolicy && p.policy == coordv1alpha1.FencingPolicyName)
	}
	if policyMode {
		warnings = aggregatedGroups(ctx, c)
	}
	return report, warnings, nil
}

// aggregatedGroups warns about every API group served by an aggregated API
// server (an APIService with spec.service set). The kube-apiserver proxies
// those requests without admission; the aggregated server judges them with
// its own admission, if it runs the fencing policy at all, from its own
// parameter cache, which the propagation barrier never probes
// (docs/design.md, "Policy mode").
func aggregatedGroups(ctx context.Context, c *clients) []string {
	var list unstructured.UnstructuredList
	list.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiregistration.k8s.io", Version: "v1", Kind: "APIServiceList"})
	if err := c.kube.List(ctx, &list); err != nil {
		return []string{fmt.Sprintf("policy mode does not fence the groups of aggregated API servers, and the APIServices cannot be listed to find them (%v)", err)}
	}
	type served struct{ apiServices, servers []string }
	groups := map[string]*served{}
	for _, a := range list.Items {
		group, _, _ := unstructured.NestedString(a.Object, "spec", "group")
		svcNamespace, hasService, _ := unstructured.NestedString(a.Object, "spec", "service", "namespace")
		svcName, _, _ := unstructured.NestedString(a.Object, "spec", "service", "name")
		if !hasService {
			continue // served by the kube-apiserver itself
		}
		g := groups[group]
		if g == nil {
			g = &served{}
			groups[group] = g
		}
		g.apiServices = append(g.apiServices, a.GetName())
		if server := svcNamespace + "/" + svcName; !slices.Contains(g.servers, server) {
			g.servers = append(g.servers, server)
		}
	}
	var warnings []string
	for _, group := range slices.Sorted(maps.Keys(groups)) {
		g := groups[group]
		noun := "APIService"
		if len(g.apiServices) > 1 {
			noun = "APIServices"
		}
		warnings = append(warnings, fmt.Sprintf("policy mode does not fence group %s: %s %s has it served by the aggregated API server %s, "+
			"which the kube-apiserver proxies to without running ValidatingAdmissionPolicy %s; guarded objects of that group are fenced only if that server runs the policy itself, "+
			"from a tenure table cache the propagation barrier never probes. Do not guard its kinds in policy mode, or use webhook mode (docs/design.md, \"Policy mode\")",
			group, noun, strings.Join(g.apiServices, ", "), strings.Join(g.servers, ", "), coordv1alpha1.FencingPolicyName))
	}
	return warnings
}

// probe is a dry-run create that kubefence's admission (a webhook, or in
// policy mode a ValidatingAdmissionPolicy) must refuse.
type probe struct {
	// subject names the webhook ("<subject> webhook") and the policy
	// ("<subject> policy").
	subject string
	// policy is the name of the ValidatingAdmissionPolicy of policy mode.
	policy string
	object client.Object
	// what the object is, after "a " or "a dry-run ".
	what string
}

// run dry-run creates the object and says which check answered, and
// whether it was the policy of policy mode.
func (p probe) run(ctx context.Context, c *clients) (line string, byPolicy bool, err error) {
	webhook := p.subject + " webhook"
	err = c.kube.Create(ctx, p.object, client.DryRunAll)
	switch {
	case err == nil:
		line, err = acceptedProbe(ctx, c, webhook, p)
		return line, false, err
	case webhookDenied(err):
		return webhook + ": answers (it refused a dry-run " + p.what + ")", false, nil
	case policyDenied(err, p.policy):
		return p.subject + " policy: answers (policy mode: " + p.policy + " refused a dry-run " + p.what + ")", true, nil
	default:
		return "", false, webhookError(webhook, err)
	}
}

// leaseProbe creates a lease with a request in another user's name, which the
// FencedLease webhook refuses to anyone but a controller user.
func leaseProbe(namespace string) probe {
	return probe{
		subject: "FencedLease",
		policy:  coordv1alpha1.LeasePolicyName,
		object: &coordv1alpha1.FencedLease{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: probeIdentity + "-"},
			Spec: coordv1alpha1.FencedLeaseSpec{Requests: []coordv1alpha1.LeaseRequest{
				{HolderIdentity: probeIdentity, User: probeIdentity + ":someone-else"},
			}},
		},
		what: "FencedLease with another user's request",
	}
}

// fencingProbe creates a ConfigMap guarded by a lease that does not exist,
// which the fencing webhook refuses.
func fencingProbe(namespace string) probe {
	return probe{
		subject: "fencing",
		policy:  coordv1alpha1.FencingPolicyName,
		object: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, GenerateName: probeIdentity + "-",
			Labels:      map[string]string{coordv1alpha1.GuardLeaseLabel: probeIdentity + "-no-such-lease"},
			Annotations: map[string]string{coordv1alpha1.FencingTokenAnnotation: "1"},
		}},
		what: "ConfigMap guarded by a lease that does not exist",
	}
}

// acceptedProbe judges a probe the API server accepted: fine when a
// fail-closed webhook checks it (the caller is trusted, so the webhook
// allowed it), which check finds by applying each webhook's rules,
// selectors and matchConditions to the probe as the API server does;
// otherwise no webhook looked at it, and check says which webhooks cover
// the resource and why each skipped the probe.
func acceptedProbe(ctx context.Context, c *clients, what string, p probe) (string, error) {
	probeWhat := "a " + p.what
	var list admissionregistrationv1.ValidatingWebhookConfigurationList
	if err := c.kube.List(ctx, &list); err != nil {
		return "", fmt.Errorf("%s: a dry-run create of %s was accepted, so no webhook refused it, and the webhook configurations cannot be read to tell why (%v)", what, probeWhat, err)
	}
	req, err := newProbeRequest(ctx, c, p)
	if err == nil {
		var called, skipped []string
		called, skipped, err = webhooksFor(ctx, req, list.Items)
		switch {
		case err != nil:
		case len(called) > 0:
			return fmt.Sprintf("%s: answers (%s accepted a dry-run create of %s, as it does for a user trusted as the controller)", what, called[0], probeWhat), nil
		case len(skipped) == 0:
			return "", fmt.Errorf("%s: missing: a dry-run create of %s was accepted unchecked: no ValidatingWebhookConfiguration has a webhook whose rules cover it; is the operator deployed (make deploy, helm install), or was its webhook configuration deleted?", what, probeWhat)
		default:
			return "", fmt.Errorf("%s: missing: a dry-run create of %s was accepted unchecked: no fail-closed webhook checks it (%s); is the operator's webhook configuration intact (make deploy, helm upgrade)?", what, probeWhat, strings.Join(skipped, "; "))
		}
	}
	return "", fmt.Errorf("%s: a dry-run create of %s was accepted, so no webhook refused it, and check cannot tell whether a webhook allowed it (%v)", what, probeWhat, err)
}

// covers tells whether a webhook's rules match CREATE of resource in group.
func covers(w admissionregistrationv1.ValidatingWebhook, group, resource string) bool {
	for _, r := range w.Rules {
		if !slices.Contains(r.Operations, admissionregistrationv1.Create) && !slices.Contains(r.Operations, admissionregistrationv1.OperationAll) {
			continue
		}
		if !slices.Contains(r.APIGroups, group) && !slices.Contains(r.APIGroups, "*") {
			continue
		}
		if slices.Contains(r.Resources, resource) || slices.Contains(r.Resources, "*") {
			return true
		}
	}
	return false
}

// webhookDenied tells whether a validating webhook refused the request (the
// API server's wording for a webhook's denial).
func webhookDenied(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "admission webhook") && strings.Contains(msg, "denied the request")
}

// policyDenied tells whether the ValidatingAdmissionPolicy named policy
// refused the request (policy mode; the API server's wording for a policy's
// denial).
func policyDenied(err error, policy string) bool {
	msg := err.Error()
	return strings.Contains(msg, "ValidatingAdmissionPolicy '"+policy+"'") && strings.Contains(msg, "denied request")
}

// webhookError explains a probe that failed for another reason.
func webhookError(what string, err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "failed calling webhook"):
		return fmt.Errorf("%s: the API server cannot call it (%v): are the manager pods running and ready, and is the caBundle of the webhook configuration set?", what, err)
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%s: the probe's namespace does not exist (%v): choose one with -n", what, err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%s: the dry-run probe was refused by RBAC or another admission check, not by kubefence (%v)", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// serviceAccountPrefix starts the username of a service account.
const serviceAccountPrefix = "system:serviceaccount:"

// sharedServiceAccountWarnings warns about every FencedLease without Pod
// binding whose requests (or current holder) come from a service account:
// the webhook and the policy tell the holder on tokenless paths by username
// only, so every pod running as that service account passes them
// (docs/design.md, "What is not protected"). Each warning says how many pods
// run as the service account now. A lease list that fails is a warning too.
func sharedServiceAccountWarnings(ctx context.Context, c *clients) []string {
	var leases coordv1alpha1.FencedLeaseList
	if err := c.kube.List(ctx, &leases); err != nil {
		return []string{fmt.Sprintf("cannot list FencedLeases to look for leases whose service-account replicas pass each other's tokenless checks (%v)", err)}
	}
	var out []string
	for _, l := range leases.Items {
		binding := l.Spec.IdentityBinding
		if binding == coordv1alpha1.IdentityBindingPod {
			continue
		}
		if binding == "" {
			binding = coordv1alpha1.IdentityBindingNone
		}
		var users []string
		for _, r := range l.Spec.Requests {
			users = append(users, r.User)
		}
		users = append(users, l.Status.HolderUser)
		slices.Sort(users)
		for _, u := range slices.Compact(users) {
			sa, ok := strings.CutPrefix(u, serviceAccountPrefix)
			ns, name, found := strings.Cut(sa, ":")
			if !ok || !found {
				continue
			}
			out = append(out, fmt.Sprintf("lease %s/%s (identityBinding: %s) is requested by service account %s, which %s: pods that run as one service account pass each other's tokenless fencing checks (deletes, /status and /scale writes, updates that keep the stored token), so a paused replica can still make them after another one was granted the lease; set identityBinding: Pod on the lease (or give each replica its own service account)",
				l.Namespace, l.Name, binding, u, podsRunningAs(ctx, c, ns, name)))
		}
	}
	return out
}

// podsRunningAs says how many pods that have not ended run as service account
// ns/name ("cannot be counted" when the pods cannot be listed).
func podsRunningAs(ctx context.Context, c *clients, ns, name string) string {
	var pods corev1.PodList
	if err := c.kube.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		return fmt.Sprintf("an unknown number of pods run as (they cannot be listed: %v)", err)
	}
	n := 0
	for _, p := range pods.Items {
		if p.Spec.ServiceAccountName == name && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			n++
		}
	}
	if n == 1 {
		return "1 pod runs as now (a second one during a rollout or a scale-up)"
	}
	return fmt.Sprintf("%d pods run as now", n)
}
