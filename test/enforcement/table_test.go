package enforcement_test

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/controllers/policy"
	"github.com/kubefence/kubefence/pkg/fence"
	"github.com/kubefence/kubefence/test/testenv"
)

// widget is a Widget to create: testenv.GuardedWidget.
var widget = testenv.GuardedWidget

func tok(n int64) string { return strconv.FormatInt(n, 10) }

// outcome is what a write of the table must meet, the same in both modes.
type outcome struct {
	// allowed: the write is accepted. Otherwise it is refused with a message
	// containing msg, and stale tells whether fence.IsStale recognises it.
	allowed bool
	stale   bool
	msg     string
	// In webhook mode a refusal also has the HTTP status code code (if not
	// 0), a message containing webhookMsg (if not empty) and exactly the
	// typed causes causes (if not nil): what a ValidatingAdmissionPolicy's
	// refusal cannot carry.
	code       int32
	webhookMsg string
	causes     map[string]string
	// then, if set, checks the object after an accepted write.
	then func(t *testing.T, s *situation)
}

var accepted = outcome{allowed: true}

// acceptedThen is accepted, with then checking the result.
func acceptedThen(then func(t *testing.T, s *situation)) outcome {
	return outcome{allowed: true, then: then}
}

// webhook adds the HTTP code and the message of the fencing webhook's refusal.
func (o outcome) webhook(code int32, msg string) outcome {
	o.code, o.webhookMsg = code, msg
	return o
}

// withCauses adds the typed causes of the fencing webhook's refusal.
func (o outcome) withCauses(causes map[string]string) outcome {
	o.causes = causes
	return o
}

func staleRefusal(msg string) outcome { return outcome{stale: true, msg: msg} }
func plainRefusal(msg string) outcome { return outcome{msg: msg} }
func notHolder(lease string) outcome {
	return staleRefusal(coordv1alpha1.NotHolderMarker + " " + lease)
}
func staleToken(token int64) outcome {
	return staleRefusal(fmt.Sprintf("%s %d", coordv1alpha1.StaleMarker, token))
}
func (o outcome) String() string {
	return fmt.Sprintf("%+v", struct {
		Allowed, Stale bool
		Msg            string
		Code           int32
	}{o.allowed, o.stale, o.msg, o.code})
}

func check(t *testing.T, h *harness, what string, err error, want outcome) {
	t.Helper()
	if want.allowed {
		if err != nil {
			t.Errorf("%s: refused, want accepted: %v", what, err)
		}
		return
	}
	if err == nil {
		t.Errorf("%s: accepted, want refused (%s)", what, want.msg)
		return
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		t.Errorf("%s: not an API status: %v", what, err)
		return
	}
	if !strings.Contains(st.Status().Message, want.msg) {
		t.Errorf("%s: message %q does not contain %q", what, st.Status().Message, want.msg)
	}
	// In policy mode no webhook is in the write path of guarded objects:
	// every refusal but /scale's and /eviction's comes from the policy.
	if via := "ValidatingAdmissionPolicy '" + policy.FencingPolicyName + "'"; h.mode == operator.EnforcementPolicy &&
		!strings.Contains(what, "/scale") && !strings.Contains(what, "/eviction") && !strings.Contains(st.Status().Message, via) {
		t.Errorf("%s: refused, but not by %s: %s", what, via, st.Status().Message)
	}
	if got := fence.IsStale(err); got != want.stale {
		t.Errorf("%s: fence.IsStale = %v, want %v (code %d: %s)", what, got, want.stale, st.Status().Code, st.Status().Message)
	}
	if h.mode != operator.EnforcementWebhook {
		return
	}
	if want.code != 0 && st.Status().Code != want.code {
		t.Errorf("%s: HTTP code %d, want %d (%s)", what, st.Status().Code, want.code, st.Status().Message)
	}
	if !strings.Contains(st.Status().Message, want.webhookMsg) {
		t.Errorf("%s: message %q does not contain %q", what, st.Status().Message, want.webhookMsg)
	}
	if got := staleCauses(st); want.causes != nil && !maps.Equal(got, want.causes) {
		t.Errorf("%s: typed causes %v, want %v", what, got, want.causes)
	}
}

// staleCauses are the typed causes of a stale refusal, field by field: what
// the API server passes on from the webhook to the client.
func staleCauses(st apierrors.APIStatus) map[string]string {
	out := map[string]string{}
	if st.Status().Details == nil {
		return out
	}
	for _, c := range st.Status().Details.Causes {
		if c.Type == coordv1alpha1.CauseTypeStaleFencingToken {
			out[c.Field] = c.Message
		}
	}
	return out
}

// notHolderCauses are the causes of a refused write without a token by a
// user who does not hold lease job.
func (s *situation) notHolderCauses() map[string]string {
	return map[string]string{"lease": s.ns + "/job", "presentedToken": "0", "currentToken": tok(s.current), "reason": "not-holder"}
}

// situation is the seeds' situation on lease "job" in a namespace of its own:
// alice held it with token stale and released it; bob holds it with current.
type situation struct {
	h              *harness
	ns             string
	stale, current int64
	bob            *elector
	// obj is the Widget the object rows write.
	obj string
	// other is bob's token on lease "other" once otherToken made him lead it.
	other int64
}

// otherToken is bob's token on lease "other" of the namespace, which it makes
// him lead the first time.
func (s *situation) otherToken(t *testing.T) int64 {
	t.Helper()
	if s.other == 0 {
		s.h.lease(t, s.ns, "other", 30)
		_, s.other = s.h.lead(t, "bob", s.ns, "other")
	}
	return s.other
}

// repoint points the object at lease "other" with bob's token there, as user.
func (s *situation) repoint(t *testing.T, user string) error {
	w := s.get(t, s.obj)
	w.SetLabels(map[string]string{coordv1alpha1.GuardLeaseLabel: "other"})
	w.SetAnnotations(map[string]string{coordv1alpha1.FencingTokenAnnotation: tok(s.otherToken(t))})
	return s.h.users[user].Update(s.h.ctx, w)
}

// writer is the object's spec.writer.
func (s *situation) writer(t *testing.T) string {
	w, _, _ := unstructured.NestedString(s.get(t, s.obj).Object, "spec", "writer")
	return w
}

func (h *harness) situation(t *testing.T, labels map[string]string) *situation {
	t.Helper()
	s := &situation{h: h, ns: h.namespace(t, labels)}
	h.lease(t, s.ns, "job", 30)
	alice, stale := h.lead(t, "alice", s.ns, "job")
	alice.stop()
	bob, current := h.lead(t, "bob", s.ns, "job")
	if current <= stale {
		t.Fatalf("bob's token %d is not above alice's %d", current, stale)
	}
	s.stale, s.current, s.bob = stale, current, bob
	return s
}

func (s *situation) get(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	u := widget(s.ns, name, "", "", "")
	must(t, s.h.admin.Get(s.h.ctx, types.NamespacedName{Namespace: s.ns, Name: name}, u))
	return u
}

// writeCase is one row of the table: a write by a user on the object w
// (created by bob with the current token before each row).
type writeCase struct {
	name  string
	write func(t *testing.T, s *situation) error
	want  func(s *situation) outcome
}

func patchWith(s *situation, user string, pt types.PatchType, body string) error {
	opts := []client.PatchOption{}
	if pt == types.ApplyPatchType {
		opts = append(opts, client.FieldOwner(user), client.ForceOwnership)
	}
	return s.h.users[user].Patch(s.h.ctx, widget(s.ns, s.obj, "", "", ""), client.RawPatch(pt, []byte(body)), opts...)
}

func tokenPatches(name string, pt types.PatchType, body func(obj string, token int64, writer string) string) []writeCase {
	return []writeCase{
		{name + " with a stale token", func(t *testing.T, s *situation) error {
			return patchWith(s, "alice", pt, body(s.obj, s.stale, "alice"))
		}, func(s *situation) outcome { return staleToken(s.stale).webhook(409, "") }},
		{name + " with the current token", func(t *testing.T, s *situation) error {
			return patchWith(s, "bob", pt, body(s.obj, s.current, "bob"))
		}, func(*situation) outcome { return accepted }},
	}
}

func objectCases() []writeCase {
	cases := []writeCase{
		{"update with a stale token", func(t *testing.T, s *situation) error {
			w := s.get(t, s.obj)
			w.SetAnnotations(map[string]string{coordv1alpha1.FencingTokenAnnotation: tok(s.stale)})
			_ = unstructured.SetNestedField(w.Object, "alice", "spec", "writer")
			return s.h.users["alice"].Update(s.h.ctx, w)
		}, func(s *situation) outcome {
			return staleToken(s.stale).webhook(409, fmt.Sprintf("for lease %s/job: the object already accepted token %d", s.ns, s.current))
		}},
		{"update inheriting the stored token by a non-holder", func(t *testing.T, s *situation) error {
			w := s.get(t, s.obj)
			_ = unstructured.SetNestedField(w.Object, "alice", "spec", "writer")
			return s.h.users["alice"].Update(s.h.ctx, w)
		}, func(s *situation) outcome { return notHolder(s.ns+"/job").webhook(403, "") }},
		{"update inheriting the stored token by the holder", func(t *testing.T, s *situation) error {
			w := s.get(t, s.obj)
			_ = unstructured.SetNestedField(w.Object, "bob-2", "spec", "writer")
			return s.h.users["bob"].Update(s.h.ctx, w)
		}, func(*situation) outcome {
			return acceptedThen(func(t *testing.T, s *situation) {
				if w := s.writer(t); w != "bob-2" {
					t.Errorf("the holder's update: spec.writer is %q, want bob-2", w)
				}
			})
		}},
		{"delete by a non-holder", func(t *testing.T, s *situation) error {
			return s.h.users["alice"].Delete(s.h.ctx, widget(s.ns, s.obj, "", "", ""))
		}, func(s *situation) outcome {
			return notHolder(s.ns+"/job").webhook(403, fmt.Sprintf("alice is not the holder of lease %s/job (held by bob with token %d)", s.ns, s.current)).
				withCauses(s.notHolderCauses())
		}},
		{"delete by the holder", func(t *testing.T, s *situation) error {
			return s.h.users["bob"].Delete(s.h.ctx, widget(s.ns, s.obj, "", "", ""))
		}, func(*situation) outcome { return accepted }},
		{"/status by a non-holder", func(t *testing.T, s *situation) error {
			w := s.get(t, s.obj)
			_ = unstructured.SetNestedField(w.Object, "alice", "status", "phase")
			return s.h.users["alice"].Status().Update(s.h.ctx, w)
		}, func(s *situation) outcome { return notHolder(s.ns+"/job").webhook(403, "writes to /status") }},
		{"/status by the holder", func(t *testing.T, s *situation) error {
			w := s.get(t, s.obj)
			_ = unstructured.SetNestedField(w.Object, "running", "status", "phase")
			return s.h.users["bob"].Status().Update(s.h.ctx, w)
		}, func(*situation) outcome {
			return acceptedThen(func(t *testing.T, s *situation) {
				if phase, _, _ := unstructured.NestedString(s.get(t, s.obj).Object, "status", "phase"); phase != "running" {
					t.Errorf("the holder's /status write: status.phase is %q, want running", phase)
				}
			})
		}},
		{"/scale by a non-holder", func(t *testing.T, s *situation) error {
			return s.h.users["alice"].SubResource("scale").Update(s.h.ctx, s.get(t, s.obj),
				client.WithSubResourceBody(&autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 5}}))
		}, func(s *situation) outcome { return notHolder(s.ns+"/job").webhook(403, "writes to /scale") }},
		{"/scale by the holder", func(t *testing.T, s *situation) error {
			return s.h.users["bob"].SubResource("scale").Update(s.h.ctx, s.get(t, s.obj),
				client.WithSubResourceBody(&autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 3}}))
		}, func(*situation) outcome {
			return acceptedThen(func(t *testing.T, s *situation) {
				if r, _, _ := unstructured.NestedInt64(s.get(t, s.obj).Object, "spec", "replicas"); r != 3 {
					t.Errorf("the holder's /scale write: spec.replicas is %d, want 3", r)
				}
			})
		}},
		{"removing the guard by a non-holder", func(t *testing.T, s *situation) error {
			w := s.get(t, s.obj)
			w.SetLabels(nil)
			return s.h.users["alice"].Update(s.h.ctx, w)
		}, func(s *situation) outcome { return notHolder(s.ns+"/job").webhook(403, "") }},
		{"removing the guard by the holder", func(t *testing.T, s *situation) error {
			w := s.get(t, s.obj)
			w.SetLabels(nil)
			return s.h.users["bob"].Update(s.h.ctx, w)
		}, func(*situation) outcome { return accepted }},
		{"the garbage collector finishing a cascade (finalizers only)", func(t *testing.T, s *situation) error {
			gc := s.h.cleanupUser(t, "system:serviceaccount:kube-system:generic-garbage-collector")
			if err := gc.Patch(s.h.ctx, widget(s.ns, s.obj, "", "", ""), client.RawPatch(types.MergePatchType,
				[]byte(`{"metadata":{"finalizers":["example.kubefence.io/cascade"]}}`))); err != nil {
				return err
			}
			return gc.Patch(s.h.ctx, widget(s.ns, s.obj, "", "", ""), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
		}, func(*situation) outcome { return accepted }},
		{"the garbage collector changing the spec", func(t *testing.T, s *situation) error {
			gc := s.h.cleanupUser(t, "system:serviceaccount:kube-system:generic-garbage-collector")
			return gc.Patch(s.h.ctx, widget(s.ns, s.obj, "", "", ""), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"writer":"gc"}}`)))
		}, func(s *situation) outcome { return notHolder(s.ns+"/job").webhook(403, "") }},
		{"the namespace controller updating it with the current token", func(t *testing.T, s *situation) error {
			w := s.get(t, s.obj)
			_ = unstructured.SetNestedField(w.Object, "namespace-controller", "spec", "writer")
			return s.h.cleanupUser(t, "system:serviceaccount:kube-system:namespace-controller").Update(s.h.ctx, w)
		}, func(s *situation) outcome { return notHolder(s.ns+"/job").webhook(403, "") }},
		// Not a default clean-up user: without --use-service-account-credentials
		// every controller of kube-controller-manager runs as this user.
		{"kube-controller-manager's own user deleting it", func(t *testing.T, s *situation) error {
			return s.h.cleanupUser(t, "system:kube-controller-manager").Delete(s.h.ctx, widget(s.ns, s.obj, "", "", ""))
		}, func(s *situation) outcome { return notHolder(s.ns+"/job").webhook(403, "") }},
		{"re-pointing it at another lease by a non-holder", func(t *testing.T, s *situation) error {
			return s.repoint(t, "alice")
		}, func(s *situation) outcome { return notHolder(s.ns+"/job").webhook(403, "") }},
		{"re-pointing it at another lease by the holder of both", func(t *testing.T, s *situation) error {
			return s.repoint(t, "bob")
		}, func(*situation) outcome {
			return acceptedThen(func(t *testing.T, s *situation) {
				if l := s.get(t, s.obj).GetLabels()[coordv1alpha1.GuardLeaseLabel]; l != "other" {
					t.Errorf("re-pointed by the holder: the guard label is %q, want other", l)
				}
			})
		}},
		{"the namespace controller deleting it", func(t *testing.T, s *situation) error {
			nsc := s.h.cleanupUser(t, "system:serviceaccount:kube-system:namespace-controller")
			return nsc.Delete(s.h.ctx, widget(s.ns, s.obj, "", "", ""))
		}, func(*situation) outcome { return accepted }},
	}
	cases = append(cases, tokenPatches("JSON patch", types.JSONPatchType, func(_ string, t int64, wr string) string {
		return fmt.Sprintf(`[{"op":"replace","path":"/metadata/annotations/kubefence.io~1fencing-token","value":"%d"},{"op":"replace","path":"/spec/writer","value":%q}]`, t, wr)
	})...)
	cases = append(cases, tokenPatches("merge patch", types.MergePatchType, func(_ string, t int64, wr string) string {
		return fmt.Sprintf(`{"metadata":{"annotations":{"kubefence.io/fencing-token":"%d"}},"spec":{"writer":%q}}`, t, wr)
	})...)
	cases = append(cases, tokenPatches("server-side apply", types.ApplyPatchType, func(obj string, t int64, wr string) string {
		return fmt.Sprintf(`{"apiVersion":"example.kubefence.io/v1","kind":"Widget","metadata":{"name":%q,"labels":{"kubefence.io/lease":"job"},"annotations":{"kubefence.io/fencing-token":"%d"}},"spec":{"writer":%q}}`, obj, t, wr)
	})...)
	return cases
}

// createCases create a new object "bad" (or a ConfigMap) as bob or alice.
func createCases() []writeCase {
	create := func(user, lease, token string, withToken bool) func(t *testing.T, s *situation) error {
		return func(t *testing.T, s *situation) error {
			w := widget(s.ns, "", lease, "", user)
			w.SetGenerateName("bad-")
			if withToken {
				w.SetAnnotations(map[string]string{coordv1alpha1.FencingTokenAnnotation: token})
			}
			return s.h.users[user].Create(s.h.ctx, w)
		}
	}
	fixed := func(o outcome) func(*situation) outcome { return func(*situation) outcome { return o } }
	return []writeCase{
		{"create with a stale token", func(t *testing.T, s *situation) error {
			return create("alice", "job", tok(s.stale), true)(t, s)
		}, func(s *situation) outcome {
			return staleRefusal(fmt.Sprintf("%s %d for lease %s/job: current token is %d", coordv1alpha1.StaleMarker, s.stale, s.ns, s.current)).
				webhook(409, "").withCauses(map[string]string{
				"lease": s.ns + "/job", "presentedToken": tok(s.stale), "currentToken": tok(s.current), "reason": "stale",
			})
		}},
		{"create with the current token", func(t *testing.T, s *situation) error {
			return create("bob", "job", tok(s.current), true)(t, s)
		}, fixed(accepted)},
		{"create without a token", create("bob", "job", "", false), fixed(plainRefusal("missing fencing token").webhook(400, ""))},
		{"create with an empty token", create("bob", "job", "", true), fixed(plainRefusal("invalid fencing token for lease").webhook(400, "is empty"))},
		{"create with a non-numeric token", create("bob", "job", "abc", true), fixed(plainRefusal(`"abc" is not a`).webhook(400, `"abc" is not a decimal integer`))},
		{"create with a negative token", create("bob", "job", "-1", true), fixed(plainRefusal(`"-1" is`).webhook(400, "is negative"))},
		{"create with a token with a leading zero", create("bob", "job", "0042", true), fixed(plainRefusal(`"0042" is not`))},
		{"create with an overflowing token", create("bob", "job", "9223372036854775808", true), fixed(plainRefusal(`"9223372036854775808"`).webhook(400, "overflows int64"))},
		{"create naming an unknown lease", create("bob", "nope", "1", true), fixed(plainRefusal("does not exist").webhook(404, ""))},
		{"create with a token never issued", create("bob", "job", "999999", true), fixed(plainRefusal("was never issued").webhook(409, ""))},
		{"strategic-merge patch of a guarded ConfigMap with a stale token", func(t *testing.T, s *situation) error {
			return s.configMapSMP(t, "alice", s.stale)
		}, func(s *situation) outcome { return staleToken(s.stale).webhook(409, "") }},
		{"strategic-merge patch of a guarded ConfigMap with the current token", func(t *testing.T, s *situation) error {
			return s.configMapSMP(t, "bob", s.current)
		}, fixed(accepted)},
		{"a coordination.k8s.io Lease with the guard label and a garbage token (I7)", func(t *testing.T, s *situation) error {
			return s.h.users["alice"].Create(s.h.ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "plain",
				Labels:      map[string]string{coordv1alpha1.GuardLeaseLabel: "job"},
				Annotations: map[string]string{coordv1alpha1.FencingTokenAnnotation: "garbage"}},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("x")}})
		}, fixed(accepted)},
		{"a guarded object with a garbage token in the operator's namespace (I7)", func(t *testing.T, s *situation) error {
			return s.h.admin.Create(s.h.ctx, widget(operatorNamespace, "own-"+s.ns, "job", "garbage", "operator"))
		}, fixed(accepted)},
	}
}

func (s *situation) configMapSMP(t *testing.T, user string, token int64) error {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "cm"}}
	if err := s.h.admin.Get(s.h.ctx, client.ObjectKeyFromObject(cm), cm); apierrors.IsNotFound(err) {
		cm.Labels = map[string]string{coordv1alpha1.GuardLeaseLabel: "job"}
		cm.Annotations = map[string]string{coordv1alpha1.FencingTokenAnnotation: tok(s.current)}
		must(t, s.h.users["bob"].Create(s.h.ctx, cm))
	}
	body := fmt.Sprintf(`{"metadata":{"annotations":{"kubefence.io/fencing-token":"%d"}},"data":{"writer":%q}}`, token, user)
	return s.h.users[user].Patch(s.h.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "cm"}},
		client.RawPatch(types.StrategicMergePatchType, []byte(body)))
}

func (h *harness) cleanupUser(t *testing.T, name string) client.WithWatch {
	t.Helper()
	if c, ok := h.users[name]; ok {
		return c
	}
	h.users[name] = h.user(t, name)
	return h.users[name]
}

// nodeUser is a client of the kubelet of node: user system:node:<node> in
// group system:nodes (and kubefence:clients for the test's RBAC).
func (h *harness) nodeUser(t *testing.T, node string) client.WithWatch {
	t.Helper()
	name := coordv1alpha1.NodeUserPrefix + node
	if c, ok := h.users[name]; ok {
		return c
	}
	u, err := h.env.AddUser(envtest.User{Name: name, Groups: []string{coordv1alpha1.NodesGroup, "kubefence:clients"}}, nil)
	must(t, err)
	c, err := client.NewWithWatch(u.Config(), client.Options{Scheme: h.scheme})
	must(t, err)
	h.users[name] = c
	return c
}

// runNodeRows: the node rule on a guarded Pod bound to node n1
// (docs/design.md, "Guarded Pods on real nodes"). Its kubelet writes the
// pod's /status and, once the holder's DELETE has started the deletion,
// finishes it with grace period 0, as a kubelet does; another node, and the
// pod's own node before the deletion started, are refused as non-holders.
// A clean-up user may write the pod's /status too.
// envtest runs no kubelet, so the pod stays Terminating until the node's
// final DELETE.
func runNodeRows(t *testing.T, h *harness, s *situation) {
	n1, n2 := h.nodeUser(t, "n1"), h.nodeUser(t, "n2")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "on-n1",
		Labels:      map[string]string{coordv1alpha1.GuardLeaseLabel: "job"},
		Annotations: map[string]string{coordv1alpha1.FencingTokenAnnotation: tok(s.current)}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}}}
	must(t, h.users["bob"].Create(h.ctx, pod))
	// A kubelet's status patch: a strategic merge patch of status only.
	condition := func(c client.Client, kind string) error {
		body := fmt.Sprintf(`{"status":{"conditions":[{"type":"example.kubefence.io/%s","status":"True"}]}}`, kind)
		return c.Status().Patch(h.ctx, &corev1.Pod{ObjectMeta: pod.ObjectMeta}, client.RawPatch(types.StrategicMergePatchType, []byte(body)))
	}
	hasCondition := func(kind string) bool {
		var p corev1.Pod
		must(t, h.admin.Get(h.ctx, client.ObjectKeyFromObject(pod), &p))
		return slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool { return string(c.Type) == "example.kubefence.io/"+kind })
	}
	refused := notHolder(s.ns+"/job").webhook(403, "")

	check(t, h, "pods/status by the pod's node (system:node:n1), guard and token unchanged", condition(n1, "n1"), accepted)
	if !hasCondition("n1") {
		t.Errorf("the pod's node's status patch was accepted, but the pod has no condition example.kubefence.io/n1")
	}
	check(t, h, "pods/status by another node (system:node:n2)", condition(n2, "n2"), refused)
	if hasCondition("n2") {
		t.Errorf("another node's status patch was refused, but the pod has its condition")
	}
	// PodGC and taint eviction mark a pod (phase Failed, a DisruptionTarget
	// condition) before they delete it; where they are clean-up users, so
	// are their marks. The harness's clean-up users are the defaults.
	gc := h.cleanupUser(t, "system:serviceaccount:kube-system:generic-garbage-collector")
	check(t, h, "pods/status by a clean-up user, guard and token unchanged (PodGC's mark before its delete)", condition(gc, "gc"), accepted)
	if !hasCondition("gc") {
		t.Errorf("the clean-up user's status patch was accepted, but the pod has no condition example.kubefence.io/gc")
	}
	check(t, h, "DELETE by the pod's node before its deletion started", n1.Delete(h.ctx, pod), refused)
	must(t, h.users["bob"].Delete(h.ctx, pod, client.GracePeriodSeconds(30)))
	var p corev1.Pod
	must(t, h.admin.Get(h.ctx, client.ObjectKeyFromObject(pod), &p))
	if p.DeletionTimestamp == nil {
		t.Fatalf("the holder's graceful DELETE of a pod bound to a node did not leave it Terminating")
	}
	check(t, h, "DELETE by another node of a terminating pod", n2.Delete(h.ctx, pod, client.GracePeriodSeconds(0)), refused)
	check(t, h, "pods/status by the pod's node while it terminates", condition(n1, "terminating"), accepted)
	check(t, h, "the final DELETE by the pod's node (grace period 0) of a terminating pod", n1.Delete(h.ctx, pod, client.GracePeriodSeconds(0)), accepted)
	if err := h.admin.Get(h.ctx, client.ObjectKeyFromObject(pod), &p); !apierrors.IsNotFound(err) {
		t.Errorf("after the node's final DELETE the pod is still there (%v)", err)
	}
}

// runTable runs every row in one namespace: object rows each on a fresh
// "w" created by bob with the current token.
func runTable(t *testing.T, h *harness) {
	s := h.situation(t, nil)
	for i, c := range objectCases() {
		want := c.want(s)
		s.obj = fmt.Sprintf("w%d", i)
		must(t, h.users["bob"].Create(h.ctx, widget(s.ns, s.obj, "job", tok(s.current), "bob")))
		check(t, h, c.name, c.write(t, s), want)
		switch {
		case want.allowed && want.then != nil:
			want.then(t, s)
		case !want.allowed:
			// A refused write changes nothing: the object keeps bob's data.
			if w := s.writer(t); w != "bob" {
				t.Errorf("%s: refused, but spec.writer is now %q", c.name, w)
			}
		}
	}
	for _, c := range createCases() {
		check(t, h, c.name, c.write(t, s), c.want(s))
	}

	// A subresource of a built-in kind keeps metadata: deployments/status
	// that rewrites the token takes the token rules, on any path.
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "d",
		Labels:      map[string]string{coordv1alpha1.GuardLeaseLabel: "job"},
		Annotations: map[string]string{coordv1alpha1.FencingTokenAnnotation: tok(s.current)}},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "d"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "d"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}}}}}
	must(t, h.users["bob"].Create(h.ctx, d))
	must(t, h.admin.Get(h.ctx, client.ObjectKeyFromObject(d), d))
	d.Annotations[coordv1alpha1.FencingTokenAnnotation] = tok(s.stale)
	check(t, h, "deployments/status rewriting the token to a stale one, by the holder", h.users["bob"].Status().Update(h.ctx, d.DeepCopy()), staleToken(s.stale))
	must(t, h.admin.Get(h.ctx, client.ObjectKeyFromObject(d), d))
	d.Status.ObservedGeneration = 7
	check(t, h, "deployments/status by the holder, token unchanged", h.users["bob"].Status().Update(h.ctx, d.DeepCopy()), accepted)

	runNodeRows(t, h, s)

	// Mandatory fencing of the listed kind in a namespace labelled for it.
	r := h.situation(t, map[string]string{coordv1alpha1.FencingNamespaceLabel: "required"})
	check(t, h, "required: an unguarded create", h.users["bob"].Create(h.ctx, widget(r.ns, "free", "", "", "bob")),
		plainRefusal("fencing is required for this kind").webhook(403, ""))
	must(t, h.users["bob"].Create(h.ctx, widget(r.ns, "w", "job", tok(r.current), "bob")))
	w := r.get(t, "w")
	w.SetLabels(nil)
	check(t, h, "required: the holder removing the guard", h.users["bob"].Update(h.ctx, w), plainRefusal("cannot be removed").webhook(403, ""))
	check(t, h, "required: another kind unguarded", h.users["bob"].Create(h.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: "free"}}), accepted)
	// The subresources of a guarded object in a required namespace: /status
	// and a pod's own subresources carry the object, /scale and evictions do
	// not (the webhook reads the parent). Policy mode keeps the required
	// webhook entry for /scale only (config/components/policy): the scale
	// entry leaves required namespaces to it.
	scale := func(user string, replicas int32) error {
		return h.users[user].SubResource("scale").Update(h.ctx, r.get(t, "w"),
			client.WithSubResourceBody(&autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: replicas}}))
	}
	check(t, h, "required: /scale by a non-holder", scale("alice", 5), notHolder(r.ns+"/job").webhook(403, "writes to /scale"))
	check(t, h, "required: /scale by the holder", scale("bob", 3), accepted)
	if n, _, _ := unstructured.NestedInt64(r.get(t, "w").Object, "spec", "replicas"); n != 3 {
		t.Errorf("required: after the holder's /scale to 3 and a refused one to 5, spec.replicas is %d", n)
	}
	w = r.get(t, "w")
	_ = unstructured.SetNestedField(w.Object, "alice", "status", "phase")
	check(t, h, "required: /status by a non-holder", h.users["alice"].Status().Update(h.ctx, w), notHolder(r.ns+"/job").webhook(403, "writes to /status"))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: "p",
		Labels: map[string]string{coordv1alpha1.GuardLeaseLabel: "job"}, Annotations: map[string]string{coordv1alpha1.FencingTokenAnnotation: tok(r.current)}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}}}
	must(t, h.users["bob"].Create(h.ctx, pod))
	check(t, h, "required: /eviction of a guarded pod by a non-holder", h.users["alice"].SubResource("eviction").Create(h.ctx, pod.DeepCopy(),
		&policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: "p"}}), notHolder(r.ns+"/job").webhook(403, ""))
	must(t, h.admin.Get(h.ctx, client.ObjectKeyFromObject(pod), pod))
	pod.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "example.invalid/d"}}}
	check(t, h, "required: pods/ephemeralcontainers of a guarded pod by a non-holder", h.users["alice"].SubResource("ephemeralcontainers").Update(h.ctx, pod),
		notHolder(r.ns+"/job").webhook(403, ""))
}

func TestFencingTable(t *testing.T) {
	for _, mode := range []string{operator.EnforcementWebhook, operator.EnforcementPolicy} {
		t.Run(mode, func(t *testing.T) {
			h := start(t, mode)
			runTable(t, h)
			runExpiry(t, h)
			runLeaseRules(t, h)
			runFutureStamp(t, h)
			runNamespaceDeletion(t, h)
			runRequeuedHolder(t, h) // stops and restarts the operator
			if mode == operator.EnforcementPolicy {
				runPolicyOnly(t, h)
				runMarkedLiveNamespace(t, h)
			}
			runOperatorDown(t, h) // last: it stops the operator
		})
	}
}
