package ruletable

import (
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/controllers/policy"
	"github.com/kubefence/kubefence/test/inprocess"
)

// The unit tier's operator: the deployed defaults (operator.DefaultOptions:
// clock skew 100 ms, commit lag 1 s, the cluster's clean-up users), its
// namespace, its service account as the controller user, and the example
// kind required in namespaces labelled for it (as config/webhook/fencing.yaml
// lists it).
const (
	UnitNamespace  = "kubefence-system"
	UnitController = "system:serviceaccount:kubefence-system:kubefence-controller-manager"
)

// RequiredKinds are the kinds of mandatory fencing in both tiers.
var RequiredKinds = []schema.GroupResource{{Group: "example.kubefence.io", Resource: "widgets"}}

// UnitOperator is the unit tier's operator in mode m.
func UnitOperator(m string) operator.Options {
	o := operator.DefaultOptions()
	o.Namespace = UnitNamespace
	o.ControllerUsers = []string{UnitController}
	o.Enforcement = m
	o.RequiredKinds = RequiredKinds
	return o
}

// UnitNow is the unit tier's clock.
var UnitNow = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// UnitNamespaces are the namespaces of the unit tier.
func UnitNamespaces() []*corev1.Namespace {
	var out []*corev1.Namespace
	for _, name := range []string{Plain.Unit(), Required.Unit(), Excluded.Unit(), Terminating.Unit(), MarkedLive.Unit(), "kube-system"} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/metadata.name": name}}}
		switch name {
		case Required.Unit():
			ns.Labels[coordv1alpha1.FencingNamespaceLabel] = "required"
		case Terminating.Unit():
			ns.Labels[policy.TerminatingLabel] = "true"
			ns.Status.Phase = corev1.NamespaceTerminating
		case MarkedLive.Unit():
			ns.Labels[policy.TerminatingLabel] = "true"
		}
		// Namespaces where guarded objects live carry kubefence.io/fencing
		// (enabled, unless required): the eviction entry's scope, as the
		// envtest harness labels its namespaces.
		if name != Excluded.Unit() && name != "kube-system" && ns.Labels[coordv1alpha1.FencingNamespaceLabel] == "" {
			ns.Labels[coordv1alpha1.FencingNamespaceLabel] = "enabled"
		}
		out = append(out, ns)
	}
	return out
}

// HeldLease is lease ns/name held by holder (user user) with token, for
// the unit tier: its tenure expires 10 s from UnitNow, of a 15 s lease.
func HeldLease(ns, name, holder, user string, token int64) *coordv1alpha1.FencedLease {
	expire := metav1.NewMicroTime(UnitNow.Add(10 * time.Second))
	return &coordv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: 15,
			Requests: []coordv1alpha1.LeaseRequest{{HolderIdentity: holder, User: user, RenewSequence: 1}}},
		Status: coordv1alpha1.FencedLeaseStatus{HolderIdentity: holder, HolderUser: user, FencingToken: token, ExpireTime: &expire,
			LeaseDurationSeconds: 15, RenewSequence: 1, ObservedGeneration: 1},
	}
}

// World is the state the unit tier judges the row in: lease state
// r.Lease in the write's namespace, and the stored object as the parent
// of a /scale write.
func (r FencingRow) World() inprocess.World {
	tk := UnitTokens
	ns := r.Write.In.Unit()
	if r.Write.In == Excluded {
		ns = Plain.Unit()
	}
	w := inprocess.World{Namespaces: UnitNamespaces(), Now: UnitNow}
	job := HeldLease(ns, "job", "bob", "bob", tk.Current)
	other := HeldLease(ns, "other", "bob", "bob", tk.Other)
	switch r.Lease {
	case Released:
		job.Spec.Requests = nil
		job.Status.HolderIdentity, job.Status.HolderUser, job.Status.ExpireTime = "", "", nil
	case Expired:
		gone := metav1.NewMicroTime(UnitNow.Add(-5 * time.Second))
		job.Status.ExpireTime = &gone
	case NoExpireTime:
		job.Status.ExpireTime = nil
	case Recreated:
		w.Deleted = []inprocess.Deleted{{Namespace: ns, Name: "job", High: tk.Current}}
		job.Spec.Requests = nil
		job.Status = coordv1alpha1.FencedLeaseStatus{TokenBase: tk.Current, ObservedGeneration: 1}
	case PodBound:
		job = HeldLease(ns, "job", "worker-1", "bob", tk.Current)
		job.Spec.IdentityBinding = coordv1alpha1.IdentityBindingPod
	case DeletedLease:
		w.Deleted = []inprocess.Deleted{{Namespace: ns, Name: "job", High: tk.Current}}
	case LeftoverTable:
		w.Table = func(_ string, cm *corev1.ConfigMap) *corev1.ConfigMap {
			cm.Data[policy.IncarnationKey] = "another"
			return cm
		}
	}
	switch r.Lease {
	case NoLeases:
	case DeletedLease:
		w.Leases = []*coordv1alpha1.FencedLease{other}
	default:
		w.Leases = []*coordv1alpha1.FencedLease{job, other}
	}
	if r.Write.Sub == "scale" || r.Write.Sub == "eviction" {
		w.Objects = append(w.Objects, r.Write.Kind.Render(r.Write.Old, tk, r.Write.In.Unit(), "w"))
	}
	return w
}

// Request is the row's write as the API server hands it to admission in
// the unit tier: object w, or on /scale its Scale.
func (r FencingRow) Request() inprocess.Request {
	wr := r.Write
	ns := wr.In.Unit()
	req := inprocess.Request{Operation: admission.Operation(wr.Op), Kind: wr.Kind.GVK(), Resource: wr.Kind.GVR(), SubResource: wr.Sub,
		Namespace: ns, Name: "w", User: UnitUser(wr.As)}
	if wr.Kind == Namespace {
		// The API server names a Namespace as its own request's namespace.
		req.Namespace = req.Name
	}
	req.OldObject = wr.Kind.Render(wr.Old, UnitTokens, ns, "w")
	if wr.Op != "DELETE" {
		req.Object = wr.Kind.Render(wr.New, UnitTokens, ns, "w")
	}
	switch wr.Sub {
	case "scale":
		// The API server hands admission the Scale, not the parent.
		req.Kind = autoscalingv1.SchemeGroupVersion.WithKind("Scale")
		req.OldObject, req.Object = scaleOf(ns, 1), scaleOf(ns, 3)
	case "eviction":
		// And the Eviction, not the pod it deletes.
		req.Kind = policyv1.SchemeGroupVersion.WithKind("Eviction")
		req.OldObject, req.Object = nil, evictionOf(ns)
	}
	return req
}

func evictionOf(ns string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetGroupVersionKind(policyv1.SchemeGroupVersion.WithKind("Eviction"))
	u.SetNamespace(ns)
	u.SetName("w")
	return u
}

func scaleOf(ns string, replicas int64) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"replicas": replicas}}}
	u.SetGroupVersionKind(autoscalingv1.SchemeGroupVersion.WithKind("Scale"))
	u.SetNamespace(ns)
	u.SetName("w")
	return u
}

// UnitUser is u's user info as an authenticator would make it: in the
// clients' group, with the pod name of a pod-bound token.
func UnitUser(u User) user.Info {
	info := &user.DefaultInfo{Name: u.Name, Groups: append([]string{"kubefence:clients", "system:authenticated"}, u.Groups...)}
	if u.Pod != "" {
		info.Extra = map[string][]string{coordv1alpha1.PodNameExtraKey: {u.Pod}}
	}
	return info
}

// Namespace is the namespace of the row's lease in the unit tier.
func (r LeaseRow) Namespace() string {
	if r.In == Excluded {
		return "kube-system"
	}
	return Plain.Unit()
}

// Operator is the unit tier's operator for the row in mode m.
func (r LeaseRow) Operator(m string) operator.Options {
	o := UnitOperator(m)
	o.AdminGroups = r.AdminGroups
	return o
}

// World is the state the unit tier judges the row in: the namespaces
// (the FencedLease rules read nothing else).
func (r LeaseRow) World() inprocess.World {
	return inprocess.World{Namespaces: UnitNamespaces(), Now: UnitNow}
}

// Request is the row's write as the API server hands it to admission in
// the unit tier.
func (r LeaseRow) Request() (inprocess.Request, error) {
	ns := r.Namespace()
	req := inprocess.Request{Operation: admission.Operation(r.Op), Kind: coordv1alpha1.GroupVersion.WithKind("FencedLease"),
		Resource: coordv1alpha1.GroupVersion.WithResource("fencedleases"), SubResource: r.Sub, Namespace: ns, Name: r.Lease,
		User: UnitUser(r.As.UnitUser())}
	var old, cur *coordv1alpha1.FencedLease
	switch r.Op {
	case "CREATE":
		cur = r.NewLease(ns)
		r.Change(cur, UnitNow)
	case "UPDATE":
		old = r.UnitBase()
		cur = old.DeepCopy()
		r.Change(cur, UnitNow)
	case "DELETE":
		old = r.UnitBase()
	}
	for _, l := range []*coordv1alpha1.FencedLease{old, cur} {
		if l != nil {
			req.Name = l.Name
			l.SetGroupVersionKind(req.Kind)
		}
	}
	var err error
	if req.OldObject, err = toUnstructured(old); err != nil {
		return req, err
	}
	req.Object, err = toUnstructured(cur)
	return req, err
}

func toUnstructured(l *coordv1alpha1.FencedLease) (*unstructured.Unstructured, error) {
	if l == nil {
		return nil, nil
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(l)
	return &unstructured.Unstructured{Object: m}, err
}
