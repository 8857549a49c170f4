package main

import (
	"context"
	"fmt"
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	admissioncel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// probeRequest is the admission request of a probe's dry-run create, as the
// API server presents it to the webhooks: what it creates, where, and who
// asks (check's own user, from a SelfSubjectReview).
type probeRequest struct {
	object   client.Object
	gvk      schema.GroupVersionKind
	resource schema.GroupVersionResource
	// nsLabels are the labels of the probe's namespace (namespaceSelector).
	nsLabels labels.Set
	user     user.Info
}

// newProbeRequest reads what the webhooks' selectors and matchConditions
// look at for p's create in c's namespace.
func newProbeRequest(ctx context.Context, c *clients, p probe) (*probeRequest, error) {
	gvk, err := c.kube.GroupVersionKindFor(p.object)
	if err != nil {
		return nil, err
	}
	mapping, err := c.kube.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	var ns corev1.Namespace
	if err := c.kube.Get(ctx, client.ObjectKey{Name: p.object.GetNamespace()}, &ns); err != nil {
		return nil, fmt.Errorf("reading namespace %s for the webhooks' namespaceSelector: %w", p.object.GetNamespace(), err)
	}
	review := &authenticationv1.SelfSubjectReview{}
	if err := c.kube.Create(ctx, review); err != nil {
		return nil, fmt.Errorf("asking the API server who this user is, for the webhooks' matchConditions: %w", err)
	}
	ui := review.Status.UserInfo
	extra := map[string][]string{}
	for k, v := range ui.Extra {
		extra[k] = v
	}
	return &probeRequest{object: p.object, gvk: gvk, resource: mapping.Resource, nsLabels: ns.Labels,
		user: &user.DefaultInfo{Name: ui.Username, UID: ui.UID, Groups: ui.Groups, Extra: extra}}, nil
}

// skip is why the API server does not call a webhook for a request: what
// of the webhook ("objectSelector (...)") does what ("does not select the
// probe").
type skip struct{ what, does string }

// skipReason says why the API server does not call webhook w (of
// configuration cfg) for the request, or nil when it does: its rules,
// namespaceSelector, objectSelector and matchConditions, as the API server
// applies them (the matchConditions with the API server's CEL library).
func (r *probeRequest) skipReason(ctx context.Context, cfg string, w admissionregistrationv1.ValidatingWebhook) (*skip, error) {
	if !covers(w, r.resource.Group, r.resource.Resource) {
		return &skip{"rules", "do not cover it"}, nil
	}
	if sel, err := metav1.LabelSelectorAsSelector(w.NamespaceSelector); err != nil {
		return nil, fmt.Errorf("webhook %q: namespaceSelector: %w", w.Name, err)
	} else if !sel.Matches(r.nsLabels) {
		return &skip{fmt.Sprintf("namespaceSelector (%s)", sel), "does not select namespace " + r.object.GetNamespace()}, nil
	}
	if sel, err := metav1.LabelSelectorAsSelector(w.ObjectSelector); err != nil {
		return nil, fmt.Errorf("webhook %q: objectSelector: %w", w.Name, err)
	} else if !sel.Matches(labels.Set(r.object.GetLabels())) {
		return &skip{fmt.Sprintf("objectSelector (%s)", sel), "does not select the probe"}, nil
	}
	if len(w.MatchConditions) == 0 {
		return nil, nil
	}
	obj := r.object.DeepCopyObject().(client.Object)
	obj.GetObjectKind().SetGroupVersionKind(r.gvk)
	attr := admission.NewAttributesRecord(obj, nil, r.gvk, obj.GetNamespace(), obj.GetName(), r.resource, "",
		admission.Create, &metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}, true, r.user)
	versioned := &admission.VersionedAttributes{Attributes: attr, VersionedKind: r.gvk, VersionedObject: admission.NewLazyObject(obj)}
	hook := w
	res := webhook.NewValidatingWebhookAccessor(w.Name, cfg, &hook).GetCompiledMatcher(matchCompiler).Match(ctx, versioned, nil, nil)
	switch {
	case res.Error != nil:
		return nil, fmt.Errorf("webhook %q: evaluating its matchConditions for the probe: %w", w.Name, res.Error)
	case !res.Matches:
		return &skip{fmt.Sprintf("matchCondition %q", res.FailedConditionName), "is false for it"}, nil
	}
	return nil, nil
}

// matchCompiler compiles matchConditions as the API server does.
var matchCompiler = admissioncel.NewConditionCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))

// webhooksFor sorts the validating webhooks of every configuration for the
// request: the fail-closed ones the API server calls for it ("<config>
// \"<webhook>\""), and why each other webhook whose rules cover the resource
// does not check it.
func webhooksFor(ctx context.Context, r *probeRequest, configs []admissionregistrationv1.ValidatingWebhookConfiguration) (called, skipped []string, err error) {
	for _, cfg := range configs {
		for _, w := range cfg.Webhooks {
			reason, err := r.skipReason(ctx, cfg.Name, w)
			if err != nil {
				return nil, nil, err
			}
			switch {
			case reason != nil && reason.what == "rules":
				continue
			case reason != nil:
				skipped = append(skipped, fmt.Sprintf("%s of webhook %q (%s) %s", reason.what, w.Name, cfg.Name, reason.does))
			case w.FailurePolicy != nil && *w.FailurePolicy != admissionregistrationv1.Fail:
				skipped = append(skipped, fmt.Sprintf("webhook %q (%s) covers it but fails open (failurePolicy %s)", w.Name, cfg.Name, *w.FailurePolicy))
			default:
				called = append(called, fmt.Sprintf("%s %q", cfg.Name, w.Name))
			}
		}
	}
	slices.Sort(skipped)
	return called, skipped, nil
}
