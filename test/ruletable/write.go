package ruletable

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// Tokens are the tokens of a situation, which rows name symbolically: on
// lease job alice held Stale, then bob was granted Current; bob holds lease
// other with Other.
type Tokens struct {
	Stale, Current, Other int64
}

// UnitTokens are the in-process situation's tokens.
var UnitTokens = Tokens{Stale: 41, Current: 42, Other: 7}

// Token is a token annotation: NoToken (none), a token of the situation,
// or a literal value.
type Token string

// The situation's tokens, and a value for an annotation that is set but
// empty. Any other Token is its literal value.
const (
	NoToken  Token = ""
	Stale    Token = "{stale}"
	Current  Token = "{current}"
	Other    Token = "{other}"
	Unissued Token = "{unissued}" // far above every token issued: Current + 1000000
	Empty    Token = "{empty}"
)

// Value is the annotation's value in situation tk, and whether it is set.
func (t Token) Value(tk Tokens) (string, bool) {
	switch t {
	case NoToken:
		return "", false
	case Empty:
		return "", true
	}
	return tk.Render("", string(t)), true
}

// Render spells the situation's tokens and namespace ns in s: {stale},
// {current}, {other}, {unissued} and {ns}.
func (tk Tokens) Render(ns, s string) string {
	return strings.NewReplacer(
		"{stale}", strconv.FormatInt(tk.Stale, 10),
		"{current}", strconv.FormatInt(tk.Current, 10),
		"{other}", strconv.FormatInt(tk.Other, 10),
		"{unissued}", strconv.FormatInt(tk.Current+1000000, 10),
		"{ns}", ns,
	).Replace(s)
}

// Object is what a row says of one version of a written object.
type Object struct {
	// Lease is the guard label's value ("" unguarded).
	Lease string
	Token Token
	// Writer is spec.writer of a Widget, data.writer of a ConfigMap,
	// spec.holderIdentity of a coordination.k8s.io Lease.
	Writer string
	// Phase, if set, is a subresource's change: status.phase of a Widget,
	// status.observedGeneration (7) of a Deployment, an ephemeral
	// container of a Pod.
	Phase      string
	Finalizers []string
	// NodeName is a Pod's spec.nodeName; Deleting sets its
	// metadata.deletionTimestamp (its deletion started). The node rule.
	NodeName string
	Deleting bool
}

// Guarded is bob's object guarded by lease job with token t.
func Guarded(t Token) *Object { return &Object{Lease: "job", Token: t, Writer: "bob"} }

// Unguarded is bob's object without a guard.
func Unguarded() *Object { return &Object{Writer: "bob"} }

// By is o written by writer.
func (o *Object) By(writer string) *Object { c := *o; c.Writer = writer; return &c }

// WithPhase is o with status phase p.
func (o *Object) WithPhase(p string) *Object { c := *o; c.Phase = p; return &c }

// WithToken is o with token t.
func (o *Object) WithToken(t Token) *Object { c := *o; c.Token = t; return &c }

// Kind is a kind of guarded object.
type Kind string

// The kinds the table writes.
const (
	// Widget is the example custom resource (test/crds), with status and
	// scale subresources; a required kind in both tiers.
	Widget Kind = "widget"
	// ConfigMap is a built-in kind without subresources.
	ConfigMap Kind = "configmap"
	// Deployment is a built-in kind whose /status keeps metadata changes.
	Deployment Kind = "deployment"
	// CoordinationLease is a coordination.k8s.io Lease: never fenced (I7).
	CoordinationLease Kind = "coordination-lease"
	// Pod is a built-in kind with the subresources that change a pod
	// (ephemeralcontainers) or delete it (eviction).
	Pod Kind = "pod"
	// ClusterWidget is the cluster-scoped example custom resource
	// (test/crds), with a status subresource.
	ClusterWidget Kind = "cluster-widget"
	// Namespace is a Namespace: cluster-scoped too.
	Namespace Kind = "namespace"
)

// GVK is the kind's group, version and kind.
func (k Kind) GVK() schema.GroupVersionKind {
	switch k {
	case ConfigMap:
		return schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	case Deployment:
		return schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	case CoordinationLease:
		return schema.GroupVersionKind{Group: "coordination.k8s.io", Version: "v1", Kind: "Lease"}
	case Pod:
		return schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
	case ClusterWidget:
		return schema.GroupVersionKind{Group: "example.kubefence.io", Version: "v1", Kind: "ClusterWidget"}
	case Namespace:
		return schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}
	}
	return schema.GroupVersionKind{Group: "example.kubefence.io", Version: "v1", Kind: "Widget"}
}

// GVR is the kind's resource.
func (k Kind) GVR() schema.GroupVersionResource {
	gvk := k.GVK()
	return gvk.GroupVersion().WithResource(strings.ToLower(gvk.Kind) + "s")
}

// ClusterScoped tells whether objects of kind k have no namespace.
func (k Kind) ClusterScoped() bool { return k == ClusterWidget || k == Namespace }

// Render is o as an object of kind k named ns/name in situation tk (nil
// for nil; ns is ignored for a cluster-scoped kind).
func (k Kind) Render(o *Object, tk Tokens, ns, name string) *unstructured.Unstructured {
	if o == nil {
		return nil
	}
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetGroupVersionKind(k.GVK())
	if !k.ClusterScoped() {
		u.SetNamespace(ns)
	}
	u.SetName(name)
	if o.Lease != "" {
		u.SetLabels(map[string]string{coordv1alpha1.GuardLeaseLabel: o.Lease})
	}
	if v, ok := o.Token.Value(tk); ok {
		u.SetAnnotations(map[string]string{coordv1alpha1.FencingTokenAnnotation: v})
	}
	if len(o.Finalizers) > 0 {
		u.SetFinalizers(o.Finalizers)
	}
	set := func(v any, path ...string) { _ = unstructured.SetNestedField(u.Object, v, path...) }
	switch k {
	case Widget:
		set(o.Writer, "spec", "writer")
		set(int64(1), "spec", "replicas")
		if o.Phase != "" {
			set(o.Phase, "status", "phase")
		}
	case ClusterWidget:
		set(o.Writer, "spec", "writer")
		if o.Phase != "" {
			set(o.Phase, "status", "phase")
		}
	case ConfigMap:
		set(o.Writer, "data", "writer")
	case CoordinationLease:
		set(o.Writer, "spec", "holderIdentity")
	case Pod:
		set([]any{map[string]any{"name": "c", "image": "example.invalid/c"}}, "spec", "containers")
		if o.NodeName != "" {
			set(o.NodeName, "spec", "nodeName")
		}
		if o.Deleting {
			set("2026-01-01T00:00:00Z", "metadata", "deletionTimestamp")
		}
		if o.Phase != "" {
			set([]any{map[string]any{"name": o.Phase, "image": "example.invalid/d"}}, "spec", "ephemeralContainers")
		}
	case Deployment:
		app := map[string]any{"app": name}
		set(app, "spec", "selector", "matchLabels")
		set(app, "spec", "template", "metadata", "labels")
		set([]any{map[string]any{"name": "c", "image": "example.invalid/c"}}, "spec", "template", "spec", "containers")
		if o.Phase != "" {
			set(int64(7), "status", "observedGeneration")
		}
	}
	return u
}

// Where is the namespace a write goes to.
type Where string

// The namespaces of the table.
const (
	// Plain is a lease namespace.
	Plain Where = "plain"
	// Required is a lease namespace labelled kubefence.io/fencing=required.
	Required Where = "required"
	// Excluded is the operator's own namespace: never fenced (I7).
	Excluded Where = "excluded"
	// Terminating is a lease namespace being deleted, which the operator
	// has marked policy.TerminatingLabel (policy mode's NamespaceMarker).
	Terminating Where = "terminating"
	// MarkedLive is a live lease namespace labelled policy.TerminatingLabel
	// by hand.
	MarkedLive Where = "marked-live"
	// ClusterScoped is no namespace: the object is cluster-scoped.
	ClusterScoped Where = "cluster-scoped"
)

// User is who sends a write.
type User struct {
	Name string
	// Groups beyond the clients' (kubefence:clients, system:authenticated).
	Groups []string
	// Pod is the pod name of a pod-bound service-account token.
	Pod string
}

// The writers of the tables.
var (
	Bob     = User{Name: "bob"}
	Alice   = User{Name: "alice"}
	Mallory = User{Name: "mallory"}
	// GC and NamespaceController are the cluster's clean-up controllers
	// (fencing.DefaultCleanupUsers).
	GC                  = User{Name: "system:serviceaccount:kube-system:generic-garbage-collector"}
	NamespaceController = User{Name: "system:serviceaccount:kube-system:namespace-controller"}
	// Controller is the kubefence controller's user (the envtest admin in
	// the cluster tier): the fencing rule gives it no exemption.
	Controller = User{Name: UnitController}
	// KubeControllerManager is not a clean-up user: every controller of
	// kube-controller-manager runs as it without
	// --use-service-account-credentials.
	KubeControllerManager = User{Name: "system:kube-controller-manager"}
)

// Node is the kubelet of node: user system:node:<node> in group
// system:nodes.
func Node(node string) User {
	return User{Name: coordv1alpha1.NodeUserPrefix + node, Groups: []string{coordv1alpha1.NodesGroup}}
}

// BobFromPod is bob's service account from pod.
func BobFromPod(pod string) User { return User{Name: "bob", Pod: pod} }

func (u User) String() string {
	if u.Pod != "" {
		return fmt.Sprintf("%s (pod %s)", u.Name, u.Pod)
	}
	return u.Name
}
