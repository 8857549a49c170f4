package fencing

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
	// ModeScale serves the /scale subresource of the listed kinds. The API server
	// hands admission a Scale object without labels, so the handler reads the
	// parent object to learn its guard.
	ModeScale Mode = "scale"
)

// Paths of the fencing webhooks.
const (
	PathGuarded  = "/fence-guarded"
	PathRequired = "/fence-required"
	PathScale    = "/fence-scale"
)

// DefaultSkew is subtracted from a tenure's expiry before the webhook refuses
// its token as expired: it covers the difference between the webhook's clock
// and the controller's (pods on different nodes).
const DefaultSkew = 100 * time.Millisecond

// Handler is one generic admission.Handler over arbitrary kinds.
type Handler struct {
	Mode Mode
	// Leases reads FencedLeases from the manager's cache.
	Leases client.Reader
	// LiveLeases reads FencedLeases from the API server; used only when a token is
	// ahead of the cache or when the object is ahead of the cache.
	LiveLeases client.Reader
	// Parents reads the parent object of a /scale write.
	Parents dynamic.Interface
	// Clock is the webhook's clock; Skew covers its difference from the controller's.
	Clock clock.PassiveClock
	Skew  time.Duration
	// CleanupUsers may DELETE guarded objects without holding their lease:
	// the cluster's namespace controller and garbage collector
	// (DefaultCleanupUsers in the deployed operator). Nil: nobody.
	CleanupUsers []string
}

// Register adds the three fencing handlers to the webhook server.
func Register(srv webhook.Server, base Handler) {
	for mode, path := range map[Mode]string{ModeGuarded: PathGuarded, ModeRequired: PathRequired, ModeScale: PathScale} {
		h := base
		h.Mode = mode
		srv.Register(path, &webhook.Admission{Handler: &h})
	}
}

// guardOnly is the part of an object the fencing rule reads: decoding only
// labels and annotations skips the rest of metadata (managedFields above all).
type guardOnly struct {
	Metadata struct {
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
}

// Handle decides one write.
func (h *Handler) Handle(ctx context.Context, req admission.Request) admission.Response {
	start := time.Now()
	fresh := false
	in := Input{
		Operation:   req.Operation,
		SubResource: req.SubResource,
		Namespace:   req.Namespace,
		Required:    h.Mode == ModeRequired,
		Requester:   Requester{Username: req.UserInfo.Username},
		Now:         h.Clock.Now(),
		Skew:        h.Skew,
	}
	if pods := req.UserInfo.Extra[coordv1alpha1.PodNameExtraKey]; len(pods) == 1 {
		in.Requester.PodName = pods[0]
	}
	in.Requester.Cleanup = slices.Contains(h.CleanupUsers, req.UserInfo.Username)
	// One decision may consult a lease more than once (an inherited token, then
	// the holder check): read each lease once per source.
	type leaseRead struct {
		st  LeaseState
		err error
	}
	reads := map[string]leaseRead{}
	in.Lease = func(name string, live bool) (LeaseState, error) {
		key := name
		r := h.Leases
		if live {
			r, fresh, key = h.LiveLeases, true, "live/"+name
		}
		if got, ok := reads[key]; ok {
			return got.st, got.err
		}
		st, err := readLease(ctx, r, req.Namespace, name)
		reads[key] = leaseRead{st, err}
		return st, err
	}
	var err error
	if req.SubResource == "scale" {
		in.Old, in.New, err = h.scaleParent(ctx, req)
	} else {
		in.Old, in.New, err = decodeObjects(req)
	}
	var v Verdict
	if err != nil {
		v = refuse(400, ReasonMalformed, "", 0, 0, "%v", err)
	} else {
		v = Decide(in)
	}
	metrics.FencingChecks.WithLabelValues(map[bool]string{true: "api", false: "cache"}[fresh]).Observe(time.Since(start).Seconds())
	if v.Allowed {
		return admission.Allowed("")
	}
	h.report(ctx, req, v)
	return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{
		Allowed: false,
		Result:  &metav1.Status{Status: metav1.StatusFailure, Code: v.Code, Reason: statusReason(v.Code), Message: v.Message, Details: staleDetails(v)},
	}}
}

// staleDetails carries a stale refusal to clients as typed causes (the wire
// contract in api/v1alpha1): the lease, the presented and current tokens and
// the reason. Other refusals carry none.
func staleDetails(v Verdict) *metav1.StatusDetails {
	switch v.Reason {
	case ReasonStale, ReasonExpired, ReasonNoHolder, ReasonNotHolder:
	default:
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
	}
	return metav1.StatusReasonInternalError
}

func (h *Handler) report(ctx context.Context, req admission.Request, v Verdict) {
	metrics.GuardedWritesRefused.WithLabelValues(string(v.Reason)).Inc()
	leaseName := strings.TrimPrefix(v.Lease, req.Namespace+"/")
	switch v.Reason {
	case ReasonStale, ReasonExpired, ReasonNoHolder, ReasonNotHolder:
		metrics.StaleWritesRejected.WithLabelValues(req.Namespace, leaseName, string(req.Operation)).Inc()
	}
	// Never the payload: scope, tokens and who asked.
	logf.FromContext(ctx).Info("Refused write to guarded object",
		"lease", v.Lease, "presentedToken", v.Presented, "currentToken", v.Current, "reason", string(v.Reason),
		"operation", string(req.Operation), "resource", req.Resource.Resource, "subResource", req.SubResource,
		"namespace", req.Namespace, "name", req.Name, "user", req.UserInfo.Username)
}

func decodeObjects(req admission.Request) (oldObj, newObj *Object, err error) {
	if len(req.OldObject.Raw) > 0 {
		if oldObj, err = decode(req.OldObject.Raw, req.Kind); err != nil {
			return nil, nil, err
		}
	}
	if len(req.Object.Raw) > 0 && req.Operation != admissionv1.Delete {
		if newObj, err = decode(req.Object.Raw, req.Kind); err != nil {
			return nil, nil, err
		}
	}
	return oldObj, newObj, nil
}

func decode(raw []byte, kind metav1.GroupVersionKind) (*Object, error) {
	var m guardOnly
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("cannot decode the %s object to read its kubefence.io/ guard (expected a JSON object with metadata): %v", kind.Kind, err)
	}
	return objectOf(m.Metadata.Labels, m.Metadata.Annotations), nil
}

func objectOf(labels, annotations map[string]string) *Object {
	tok, has := annotations[coordv1alpha1.FencingTokenAnnotation]
	return &Object{Lease: labels[coordv1alpha1.GuardLeaseLabel], Token: tok, HasToken: has}
}

// scaleParent reads the object whose /scale is written; its guard stands for
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

func readLease(ctx context.Context, r client.Reader, namespace, name string) (LeaseState, error) {
	var l coordv1alpha1.FencedLease
	if err := r.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &l); err != nil {
		if apierrors.IsNotFound(err) {
			return LeaseState{}, nil
		}
		return LeaseState{}, err
	}
	st := LeaseState{Exists: true, Token: l.Status.FencingToken, Holder: l.Status.HolderIdentity, Binding: l.Spec.IdentityBinding, TokenBase: l.Status.TokenBase}
	if l.Status.ExpireTime != nil {
		st.ExpireTime = l.Status.ExpireTime.Time
	}
	for _, r := range l.Spec.Requests {
		if r.HolderIdentity == st.Holder {
			st.HolderUser = r.User
		}
	}
	return st, nil
}
