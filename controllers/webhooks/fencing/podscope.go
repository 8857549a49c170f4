package fencing

import (
	"context"
	"fmt"
	"net/http"

	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// FencingEnabledValue is the value of the namespace label
// kubefence.io/fencing that puts a namespace's pod evictions in scope without
// making fencing mandatory there ("required" does both).
const FencingEnabledValue = "enabled"

// PodScopeHandler serves the pod-scope entry: a Pod that becomes guarded
// (created with the kubefence.io/lease label, or given it) in a namespace
// without the label kubefence.io/fencing. The eviction entry sees only
// namespaces with that label (so that an operator outage stops no drain of
// unrelated pods), and an Eviction carries no labels for any other entry to
// find: such a pod's evictions would reach no check. The entry's selectors
// and match condition send only those writes here, and every one is refused
// (docs/design.md, "Pod subresources"). It reads nothing, so it answers the
// same whatever the cluster's state.
type PodScopeHandler struct{}

// Handle refuses the write.
func (PodScopeHandler) Handle(_ context.Context, req admission.Request) admission.Response {
	resp := admission.Denied(fmt.Sprintf(
		"pod %s/%s carries the fencing guard %s, but namespace %s is not labelled %s: pod evictions there reach no fencing check (the eviction webhook sees only labelled namespaces), so nobody could stop a non-holder evicting it; label the namespace first (kubectl label namespace %s %s=%s), or leave the pod unguarded",
		req.Namespace, req.Name, coordv1alpha1.GuardLeaseLabel, req.Namespace, coordv1alpha1.FencingNamespaceLabel,
		req.Namespace, coordv1alpha1.FencingNamespaceLabel, FencingEnabledValue))
	resp.Result.Code = http.StatusForbidden
	resp.Result.Reason = "Forbidden"
	return resp
}
