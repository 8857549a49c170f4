package fencing

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/clock"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/metrics"
)

// Mode says which webhook entry of config/webhook/fencing.yaml a handler serves.
type Mode string

const (
	// ModeGuarded serves objects labelled kubefence.io/lease, of any kind.
	ModeGuarded Mode = "guarded"
	// ModeRequired serves the listed kinds in namespaces labelled
	// kubefence.io/fencing=required: unguarded writes are refused.
	ModeRequired Mode = "required"
	// ModeScale serves the /scale subresource of the listed kinds, and
	// pods/eviction. The API server hands admission a Scale or an Eviction
	// object without labels, so the handler reads the parent object (the pod)
	// to learn its guard.
	ModeScale Mode = "scale"
)

// Handler is one generic admission.Handler over arbitrary kinds.
type Handler struct {
	Mode Mode
	// Leases reads FencedLeases from the API server for every decision that
	// depends on a lease, each read sent after the decision arrived (never
	// from a cache; see LeaseReader).
	Leases LeaseSource
	// Parents reads the parent object of a /scale write.
	Parents dynamic.Interface
	// Clock is the webhook's clock; Skew covers its difference from the
	// controller's; CommitLag bounds the time from a decision to the write's
	// commit (see CutOff and AnswerBy). CommitLag must be > 0: with 0 no
	// decision that takes any time is in time, and every one is refused.
	Clock     clock.PassiveClock
	Skew      time.Duration
	CommitLag time.Duration
	// CleanupUsers may DELETE guarded objects without holding their lease
	// (and write what Requester.Cleanup says): the cluster's namespace
	// controller and garbage collector (DefaultCleanupUsers in the deployed
	// operator). Nil: nobody.
	CleanupUsers []string
}

// Register adds the three fencing handlers and the pod-scope handler to the
// webhook server.
func Register(srv webhook.Server, base Handler) {
	for mode, path := range map[Mode]string{ModeGuarded: coordv1alpha1.FencingGuardedPath, ModeRequired: coordv1alpha1.FencingRequiredPath, ModeScale: coordv1alpha1.FencingScalePath} {
		h := base
		h.Mode = mode
		srv.Register(path, &webhook.Admission{Handler: &h})
	}
	srv.Register(coordv1alpha1.FencingPodScopePath, &webhook.Admission{Handler: PodScopeHandler{}})
}

// guardOnly is the part of an object the fencing rule reads: decoding only
// labels and annotations skips the rest of metadata (managedFields above all).
// deletionTimestamp (and a Pod's spec.nodeName, podNode) serve the node rule.
type guardOnly struct {
	Metadata struct {
		Labels            map[string]string `json:"labels"`
		Annotations       map[string]string `json:"annotations"`
		DeletionTimestamp *string           `json:"deletionTimestamp"`
		OwnerReferences   []struct {
			Kind string `json:"kind"`
			Name string `json:"name"`
		} `json:"ownerReferences"`
	} `json:"metadata"`
}

// podNode is the part of a Pod the node rule reads besides guardOnly.
type podNode struct {
	Spec struct {
		NodeName string `json:"nodeName"`
	} `json:"spec"`
}

// maxCallTime bounds a decision whose context lost its cancellation: the
// longest timeoutSeconds a webhook configuration may set.
const maxCallTime = 30 * time.Second

// Handle decides one write.
func (h *Handler) Handle(ctx context.Context, req admission.Request) admission.Response {
	// The decision's arrival: after the write's admission began, so a lease
	// read sent after it sees every grant and tenure end committed before
	// the write (LeaseReader). The monotonic clock, not h.Clock.
	start := time.Now()
	// A stopping manager cancels the context of every call in flight (the
	// webhook server derives them from the manager's) and then waits for
	// their answers: decide them anyway, within maxCallTime, so
	// that a terminating replica does not refuse a live holder's write with
	// "context canceled" (test/upgrade, TestCallsInFlightAreDecidedWhileTheManagerStops).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), maxCallTime)
	defer cancel()
	in := Input{
		Operation:   req.Operation,
		SubResource: req.SubResource,
		Namespace:   objectNamespace(req),
		Pod:         req.Resource.Group == "" && req.Resource.Resource == "pods",
		Required:    h.Mode == ModeRequired,
		Requester:   Requester{Username: req.UserInfo.Username, Groups: req.UserInfo.Groups},
		Now:         h.Clock.Now(),
		Skew:        h.Skew,
		CommitLag:   h.CommitLag,
	}
	if pods := req.UserInfo.Extra[coordv1alpha1.PodNameExtraKey]; len(pods) == 1 {
		in.Requester.PodName = pods[0]
	}
	in.Requester.Cleanup = slices.Contains(h.CleanupUsers, req.UserInfo.Username)
	// One decision may consult a lease more than once (an inherited token, then
	// the holder check): read each lease once per decision.
	type leaseRead struct {
		st  LeaseState
		err error
	}
	reads := map[string]leaseRead{}
	in.Lease = func(name string) (LeaseState, error) {
		if got, ok := reads[name]; ok {
			return got.st, got.err
		}
		st, err := h.Leases.Read(ctx, req.Namespace, name, start)
		reads[name] = leaseRead{st, err}
		return st, err
	}
	var err error
	if readsParent(req) {
		in.Old, in.New, err = h.scaleParent(ctx, req)
	} else {
		in.Old, in.New, err = decodeObjects(req, in.Pod)
	}
	if err == nil && in.Requester.Cleanup && req.Operation == admissionv1.Update {
		in.CleanupOnly = onlyFinalizersOrOwnersChanged(req.OldObject.Raw, req.Object.Raw)
	}
	var v Verdict
	if err != nil {
		v = refuse(400, coordv1alpha1.RefusalMalformed, "", 0, 0, "%v", err)
	} else {
		v = Decide(in)
	}
	if v.Allowed && len(reads) > 0 {
		v = h.inTime(v, in.Now, h.Clock.Now())
	}
	metrics.FencingChecked(len(reads) > 0, time.Since(start))
	if v.Allowed {
		return admission.Allowed("").WithWarnings(ownerWarnings(req, in.New)...)
	}
	h.report(ctx, req, v)
	return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{
		Allowed: false,
		Result:  &metav1.Status{Status: metav1.StatusFailure, Code: v.Code, Reason: statusReason(v.Code), Message: v.Message, Details: staleDetails(v)},
	}}
}

// inTime refuses (503, retry) an admitting decision that started at start
// and ends at end too late for the write to commit before the next grant.
// The commit-lag bound runs from the lease read to the commit: the webhook
// keeps its own half of it (read and decision) and assumes the other half
// (its answer's way back, the API server's other admission, the commit).
// So the decision may take at most half the commit lag (a tenure revoked, or
// a lease recreated, after the read: the controller grants the next one the
// commit lag after it saw the end), and must end by the tenure's AnswerBy
// (an expiry: for a lease shorter than FullMarginLease half the commit-lag
// budget is less than half the commit lag; docs/design.md).
func (h *Handler) inTime(v Verdict, start, end time.Time) Verdict {
	took := end.Sub(start)
	switch {
	case took > h.CommitLag/2:
		return refuse(503, coordv1alpha1.RefusalSlow, v.Lease, v.Presented, v.Current,
			"the fencing check of lease %s took %v, more than half of the commit lag %v, so its lease read may be too old to admit the write by; refusing (fail closed): retry",
			v.Lease, took.Round(time.Millisecond), h.CommitLag)
	case !v.AnswerBy.IsZero() && end.After(v.AnswerBy):
		return refuse(503, coordv1alpha1.RefusalSlow, v.Lease, v.Presented, v.Current,
			"the fencing check of lease %s took %v and ended at %s, after %s, the last instant that leaves half of the tenure's commit-lag budget before its expiry (a lease shorter than 10 x (clock skew + commit lag) has a cut-off margin of only a tenth of its duration), so the write could commit after the next grant; refusing (fail closed): retry",
			v.Lease, took.Round(time.Millisecond), end.UTC().Format(time.RFC3339Nano), v.AnswerBy.UTC().Format(time.RFC3339Nano))
	}
	return v
}

// staleDetails carries a stale refusal to clients as typed causes (the wire
// contract in api/v1alpha1): the lease, the presented and current tokens and
// the reason. Other refusals carry none.
func staleDetails(v Verdict) *metav1.StatusDetails {
	if !isStale(v.Reason) {
		return nil
	}
	cause := func(field, msg string) metav1.StatusCause {
		return metav1.StatusCause{Type: coordv1alpha1.CauseTypeStaleFencingToken, Field: field, Message: msg}
	}
	return &metav1.StatusDetails{Causes: []metav1.StatusCause{
		cause(coordv1alpha1.CauseFieldLease, v.Lease),
		cause(coordv1alpha1.CauseFieldPresentedToken, strconv.FormatInt(v.Presented, 10)),
		cause(coordv1alpha1.CauseFieldCurrentToken, strconv.FormatInt(v.Current, 10)),
		cause(coordv1alpha1.CauseFieldReason, string(v.Reason)),
	}}
}

// isStale tells whether a refusal is for a token or tenure that is over (the
// writer's token is stale, expired, has no holder, or is not the holder's):
// the refusals that carry typed causes and count as stale writes.
func isStale(r Reason) bool {
	switch r {
	case coordv1alpha1.RefusalStale, coordv1alpha1.RefusalExpired, coordv1alpha1.RefusalNoHolder, coordv1alpha1.RefusalNotHolder:
		return true
	}
	return false
}

func statusReason(code int32) metav1.StatusReason {
	switch code {
	case http.StatusConflict:
		return metav1.StatusReasonConflict
	case http.StatusBadRequest:
		return metav1.StatusReasonBadRequest
	case http.StatusNotFound:
		return metav1.StatusReasonNotFound
	case http.StatusForbidden:
		return metav1.StatusReasonForbidden
	case http.StatusServiceUnavailable:
		return metav1.StatusReasonServiceUnavailable
	}
	return metav1.StatusReasonInternalError
}

func (h *Handler) report(ctx context.Context, req admission.Request, v Verdict) {
	leaseName := strings.TrimPrefix(v.Lease, req.Namespace+"/")
	metrics.GuardedWriteRefused(string(v.Reason), isStale(v.Reason), req.Namespace, leaseName, string(req.Operation))
	// Never the payload: scope, tokens and who asked.
	logf.FromContext(ctx).Info("Refused write to guarded object",
		"lease", v.Lease, "presentedToken", v.Presented, "currentToken", v.Current, "reason", string(v.Reason),
		"operation", string(req.Operation), "resource", req.Resource.Resource, "subResource", req.SubResource,
		"namespace", req.Namespace, "name", req.Name, "user", req.UserInfo.Username)
}

// ownerWarnings warns about every owner of a guarded object written with
// ownerReferences: the garbage collector deletes the object when its owner
// goes, and it is exempt from fencing, so the owner's deletion is fenced only
// if the owner is guarded by the same lease.
func ownerWarnings(req admission.Request, newObj *Object) []string {
	if newObj == nil || newObj.Lease == "" || len(newObj.Owners) == 0 {
		return nil
	}
	out := make([]string, 0, len(newObj.Owners))
	for _, o := range newObj.Owners {
		out = append(out, fmt.Sprintf("kubefence: %s %s/%s is guarded by lease %s and owned by %s; deleting the owner makes the garbage collector delete it without a fencing check, so guard the owner with lease %s too",
			req.Kind.Kind, req.Namespace, req.Name, newObj.Lease, o, newObj.Lease))
	}
	return out
}

// onlyFinalizersOrOwnersChanged tells whether an update changes nothing but
// metadata.finalizers and metadata.ownerReferences (besides what the API
// server maintains itself): what the garbage collector does to finish
// foreground and orphan cascades.
func onlyFinalizersOrOwnersChanged(oldRaw, newRaw []byte) bool {
	var o, n map[string]any
	if json.Unmarshal(oldRaw, &o) != nil || json.Unmarshal(newRaw, &n) != nil {
		return false
	}
	for _, m := range []map[string]any{o, n} {
		if md, ok := m["metadata"].(map[string]any); ok {
			for _, k := range []string{"finalizers", "ownerReferences", "resourceVersion", "managedFields", "generation"} {
				delete(md, k)
			}
		}
	}
	return reflect.DeepEqual(o, n)
}

func decodeObjects(req admission.Request, pod bool) (oldObj, newObj *Object, err error) {
	if len(req.OldObject.Raw) > 0 {
		if oldObj, err = decode(req.OldObject.Raw, req.Kind, pod); err != nil {
			return nil, nil, err
		}
	}
	if len(req.Object.Raw) > 0 && req.Operation != admissionv1.Delete {
		if newObj, err = decode(req.Object.Raw, req.Kind, pod); err != nil {
			return nil, nil, err
		}
	}
	return oldObj, newObj, nil
}

func decode(raw []byte, kind metav1.GroupVersionKind, pod bool) (*Object, error) {
	var m guardOnly
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("cannot decode the %s object to read its kubefence.io/ guard (expected a JSON object with metadata): %v", kind.Kind, err)
	}
	o := objectOf(m.Metadata.Labels, m.Metadata.Annotations)
	o.Deleting = m.Metadata.DeletionTimestamp != nil
	if pod {
		var p podNode
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, fmt.Errorf("cannot decode the Pod to read its spec.nodeName: %v", err)
		}
		o.NodeName = p.Spec.NodeName
	}
	for _, ref := range m.Metadata.OwnerReferences {
		o.Owners = append(o.Owners, ref.Kind+"/"+ref.Name)
	}
	return o, nil
}

func objectOf(labels, annotations map[string]string) *Object {
	tok, has := annotations[coordv1alpha1.FencingTokenAnnotation]
	return &Object{Lease: labels[coordv1alpha1.GuardLeaseLabel], Token: tok, HasToken: has}
}

// objectNamespace is the namespace of the request's object: "" for a
// cluster-scoped one. The API server names a Namespace object's own name as
// the request's namespace, but a Namespace is cluster-scoped: its guard is
// refused like any other cluster-scoped object's (Decide's uncheckable; the
// policy kubefence-fencing-cluster-scoped does the same in policy mode).
func objectNamespace(req admission.Request) string {
	if req.Resource.Group == "" && req.Resource.Resource == "namespaces" {
		return ""
	}
	return req.Namespace
}

// readsParent tells whether the request's object is not the guarded object
// but stands for it: a Scale (the /scale of any kind) or an Eviction (the
// CREATE of pods/eviction, which deletes the pod without a DELETE admission of
// it). Neither carries the parent's labels, so the guard is read from the
// parent, which the request names.
func readsParent(req admission.Request) bool {
	return req.SubResource == "scale" ||
		(req.SubResource == "eviction" && req.Resource.Group == "" && req.Resource.Resource == "pods")
}

// scaleParent reads the object whose /scale is written (or the pod an
// eviction deletes); its guard stands for
// both the old and the new version (a Scale write changes no metadata).
func (h *Handler) scaleParent(ctx context.Context, req admission.Request) (oldObj, newObj *Object, err error) {
	gvr := schema.GroupVersionResource{Group: req.Resource.Group, Version: req.Resource.Version, Resource: req.Resource.Resource}
	parent, err := h.Parents.Resource(gvr).Namespace(req.Namespace).Get(ctx, req.Name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("cannot read %s %s/%s to check the fencing guard of its scale subresource: %v", gvr.Resource, req.Namespace, req.Name, err)
	}
	o := objectOf(parent.GetLabels(), parent.GetAnnotations())
	return o, o, nil
}
