package fence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
)

// refusal is what the API server returns when the fencing webhook refuses a write.
func refusal(code int32, msg string, causes ...metav1.StatusCause) error {
	st := metav1.Status{Status: metav1.StatusFailure, Code: code, Message: msg}
	if len(causes) > 0 {
		st.Details = &metav1.StatusDetails{Causes: causes}
	}
	return &apierrors.StatusError{ErrStatus: st}
}

func staleCauses(lease, reason string) []metav1.StatusCause {
	c := func(f, m string) metav1.StatusCause {
		return metav1.StatusCause{Type: coordv1alpha1.CauseTypeStaleFencingToken, Field: f, Message: m}
	}
	return []metav1.StatusCause{c(coordv1alpha1.CauseFieldLease, lease), c(coordv1alpha1.CauseFieldPresentedToken, "41"),
		c(coordv1alpha1.CauseFieldCurrentToken, "42"), c(coordv1alpha1.CauseFieldReason, reason)}
}

func TestIsStale(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"typed cause, reworded message", refusal(http.StatusConflict, `admission webhook "guarded.fencing.kubefence.io" denied the request: too old`, staleCauses("jobs/job", "stale")...), true},
		{"typed cause on a 403", refusal(http.StatusForbidden, "someone else holds it", staleCauses("jobs/job", "not-holder")...), true},
		{"stale marker in a 409, no causes (admission policy)", refusal(http.StatusConflict, "ValidatingAdmissionPolicy 'fence' denied request: stale fencing token 41 for lease jobs/job"), true},
		{"not-holder marker in a 403, no causes", refusal(http.StatusForbidden, "alice is not the holder of lease jobs/job (held by bob with token 42)"), true},
		{"stale marker on a 403 is not ours", refusal(http.StatusForbidden, "stale fencing token 41"), false},
		{"optimistic-concurrency conflict", apierrors.NewConflict(corev1.Resource("configmaps"), "w", errors.New("the object has been modified")), false},
		{"another cause type", refusal(http.StatusConflict, "conflict", metav1.StatusCause{Type: metav1.CauseTypeFieldValueInvalid, Field: "lease"}), false},
		{"not an API error", errors.New("stale fencing token"), false},
		{"nil", nil, false},
		{"wrapped StaleError", fmt.Errorf("writing: %w", &StaleError{Lease: "jobs/job", Err: errors.New("x")}), true},
		{"wrapped refusal", fmt.Errorf("writing: %w", refusal(http.StatusConflict, "x", staleCauses("jobs/job", "expired")...)), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsStale(tc.err); got != tc.want {
				t.Fatalf("IsStale(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

type fixedToken struct {
	token int64
	ok    bool
}

func (f fixedToken) Token() (int64, bool) { return f.token, f.ok }

// A FencedClient reports a stale refusal only when it is about its own lease:
// by the cause's lease when the refusal has causes, by the message otherwise.
func TestFencedClientStaleOnlyForItsLease(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		wantStale bool
	}{
		{"cause names this lease", refusal(409, "reworded", staleCauses("jobs/job", "stale")...), true},
		{"cause names another lease, message this one", refusal(409, "stale fencing token 41 for lease jobs/job", staleCauses("jobs/other", "stale")...), false},
		{"no causes, message names this lease", refusal(409, "stale fencing token 41 for lease jobs/job: current token is 42"), true},
		{"no causes, message names another lease", refusal(409, "stale fencing token 41 for lease jobs/other: current token is 42"), false},
		{"not stale", refusal(409, "the object has been modified"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
				Update: func(context.Context, client.WithWatch, client.Object, ...client.UpdateOption) error { return tc.err },
			}).Build()
			var reported []error
			c := NewFencedClient(base, "job", fixedToken{42, true}, ClientConfig{OnStale: func(err error) { reported = append(reported, err) }})
			err := c.Update(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "jobs", Name: "cm"}})
			var se *StaleError
			if got := errors.As(err, &se); got != tc.wantStale {
				t.Fatalf("StaleError %v, want %v (err %v)", got, tc.wantStale, err)
			}
			if tc.wantStale && (len(reported) != 1 || se.Lease != "jobs/job") {
				t.Fatalf("reported %v, lease %q; want one report for jobs/job", reported, se.Lease)
			}
			if !tc.wantStale && len(reported) != 0 {
				t.Fatalf("reported %v, want none", reported)
			}
		})
	}
}

// countingClient is a client that sends nothing: each create, update, patch,
// apply, delete and status update it is asked for only adds one to *sent.
func countingClient() (client.WithWatch, *int) {
	sent := new(int)
	count := func() error { *sent++; return nil }
	return fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error { return count() },
		Update: func(context.Context, client.WithWatch, client.Object, ...client.UpdateOption) error { return count() },
		Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
			return count()
		},
		Apply: func(context.Context, client.WithWatch, runtime.ApplyConfiguration, ...client.ApplyOption) error {
			return count()
		},
		Delete: func(context.Context, client.WithWatch, client.Object, ...client.DeleteOption) error { return count() },
		SubResourceUpdate: func(context.Context, client.Client, string, client.Object, ...client.SubResourceUpdateOption) error {
			return count()
		},
	}).Build(), sent
}

// A client that does not lead sends nothing.
func TestFencedClientNotLeading(t *testing.T) {
	base, sent := countingClient()
	c := NewFencedClient(base, "job", fixedToken{})
	ctx := context.Background()
	cm := func() *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "jobs", Name: "cm"}}
	}
	for name, err := range map[string]error{
		"create": c.Create(ctx, cm()),
		"update": c.Update(ctx, cm()),
		"patch":  c.Patch(ctx, cm(), client.MergeFrom(cm())),
		"delete": c.Delete(ctx, cm()),
		"status": c.Status().Update(ctx, cm()),
	} {
		if !errors.Is(err, ErrNotLeading) {
			t.Errorf("%s: %v, want ErrNotLeading", name, err)
		}
	}
	if *sent != 0 {
		t.Fatalf("%d writes sent while not leading", *sent)
	}
}

// Create and Update stamp the guard label and the token on the object.
func TestFencedClientStampsObjects(t *testing.T) {
	base := fake.NewClientBuilder().Build()
	c := NewFencedClient(base, "job", fixedToken{42, true})
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "jobs", Name: "cm", Labels: map[string]string{"app": "x"}}}
	if err := c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	var got corev1.ConfigMap
	if err := base.Get(ctx, client.ObjectKeyFromObject(cm), &got); err != nil {
		t.Fatal(err)
	}
	wantLabels := map[string]string{"app": "x", coordv1alpha1.GuardLeaseLabel: "job"}
	wantAnn := map[string]string{coordv1alpha1.FencingTokenAnnotation: "42"}
	if !reflect.DeepEqual(got.Labels, wantLabels) || !reflect.DeepEqual(got.Annotations, wantAnn) {
		t.Fatalf("labels %v annotations %v; want %v %v", got.Labels, got.Annotations, wantLabels, wantAnn)
	}
}

// The patch is stamped with the guard label and the token, whatever its type.
func TestStampedPatchData(t *testing.T) {
	withMeta := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"a": "b"}, Annotations: map[string]string{"c": "d"}}}
	bare := &corev1.ConfigMap{}
	stampedObject := map[string]any{"metadata": map[string]any{
		"labels":      map[string]any{coordv1alpha1.GuardLeaseLabel: "job"},
		"annotations": map[string]any{coordv1alpha1.FencingTokenAnnotation: "42"},
	}}
	for _, tc := range []struct {
		name  string
		patch client.Patch
		obj   client.Object
		want  any
	}{
		{"merge, empty", client.RawPatch(types.MergePatchType, []byte(`{}`)), bare, stampedObject},
		{"merge, null", client.RawPatch(types.MergePatchType, []byte(`null`)), bare, stampedObject},
		{"merge, keeps the change", client.RawPatch(types.MergePatchType, []byte(`{"data":{"k":"v"},"metadata":{"labels":{"x":"y"}}}`)), bare,
			map[string]any{"data": map[string]any{"k": "v"}, "metadata": map[string]any{
				"labels":      map[string]any{"x": "y", coordv1alpha1.GuardLeaseLabel: "job"},
				"annotations": map[string]any{coordv1alpha1.FencingTokenAnnotation: "42"},
			}}},
		{"strategic", client.RawPatch(types.StrategicMergePatchType, []byte(`{"data":{"k":"v"}}`)), bare,
			map[string]any{"data": map[string]any{"k": "v"}, "metadata": stampedObject["metadata"]}},
		{"apply", client.RawPatch(types.ApplyPatchType, []byte(`{"apiVersion":"v1","kind":"ConfigMap"}`)), bare,
			map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": stampedObject["metadata"]}},
		{"JSON patch, object without maps", client.RawPatch(types.JSONPatchType, []byte(`[{"op":"replace","path":"/data/k","value":"v"}]`)), bare,
			[]any{
				map[string]any{"op": "replace", "path": "/data/k", "value": "v"},
				map[string]any{"op": "add", "path": "/metadata/labels", "value": map[string]any{coordv1alpha1.GuardLeaseLabel: "job"}},
				map[string]any{"op": "add", "path": "/metadata/annotations", "value": map[string]any{coordv1alpha1.FencingTokenAnnotation: "42"}},
			}},
		{"JSON patch, object with maps (keys escaped)", client.RawPatch(types.JSONPatchType, []byte(`[]`)), withMeta,
			[]any{
				map[string]any{"op": "add", "path": "/metadata/labels/kubefence.io~1lease", "value": "job"},
				map[string]any{"op": "add", "path": "/metadata/annotations/kubefence.io~1fencing-token", "value": "42"},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &stampedPatch{Patch: tc.patch, lease: "job", token: 42}
			if p.Type() != tc.patch.Type() {
				t.Fatalf("type %s, want %s", p.Type(), tc.patch.Type())
			}
			data, err := p.Data(tc.obj)
			if err != nil {
				t.Fatal(err)
			}
			var got any
			if err := json.Unmarshal(data, &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("patch\n%s\nwant\n%v", data, tc.want)
			}
		})
	}
	if _, err := (&stampedPatch{Patch: client.RawPatch(types.JSONPatchType, []byte(`{}`)), lease: "job", token: 1}).Data(bare); err == nil {
		t.Fatal("a JSON patch that is not a list was accepted")
	}
}

// Apply stamps the guard label and the token on an apply configuration,
// keeps the rest of it, writes the answer back, and sends nothing while not
// leading; a stale refusal through Apply is a StaleError.
func TestFencedClientApplyStamps(t *testing.T) {
	var sent []map[string]any
	var answer error
	base := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Apply: func(_ context.Context, _ client.WithWatch, obj runtime.ApplyConfiguration, _ ...client.ApplyOption) error {
			data, err := json.Marshal(obj)
			if err != nil {
				return err
			}
			var m map[string]any
			if err := json.Unmarshal(data, &m); err != nil {
				return err
			}
			sent = append(sent, m)
			return answer
		},
	}).Build()
	ctx := context.Background()
	ac := corev1ac.ConfigMap("cm", "jobs").WithLabels(map[string]string{"app": "x"}).WithData(map[string]string{"k": "v"})

	if err := NewFencedClient(base, "job", fixedToken{}).Apply(ctx, ac); !errors.Is(err, ErrNotLeading) || len(sent) != 0 {
		t.Fatalf("not leading: %v, %d applies sent; want ErrNotLeading and none", err, len(sent))
	}

	c := NewFencedClient(base, "job", fixedToken{42, true})
	if err := c.Apply(ctx, ac, client.FieldOwner("test")); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{
			"name": "cm", "namespace": "jobs",
			"labels":      map[string]any{"app": "x", coordv1alpha1.GuardLeaseLabel: "job"},
			"annotations": map[string]any{coordv1alpha1.FencingTokenAnnotation: "42"},
		},
		"data": map[string]any{"k": "v"},
	}
	if len(sent) != 1 || !reflect.DeepEqual(sent[0], want) {
		t.Fatalf("sent %v\nwant %v", sent, want)
	}
	if ac.Labels[coordv1alpha1.GuardLeaseLabel] != "job" || ac.Annotations[coordv1alpha1.FencingTokenAnnotation] != "42" || ac.Data["k"] != "v" {
		t.Fatalf("the answer was not written back into the apply configuration: labels %v annotations %v data %v", ac.Labels, ac.Annotations, ac.Data)
	}

	var reported int
	c.cfg.OnStale = func(error) { reported++ }
	answer = refusal(409, "stale fencing token 41 for lease jobs/job: current token is 42", staleCauses("jobs/job", "stale")...)
	err := c.Apply(ctx, corev1ac.ConfigMap("cm", "jobs"))
	var se *StaleError
	if !errors.As(err, &se) || se.Lease != "jobs/job" || reported != 1 || !IsStale(err) {
		t.Fatalf("stale apply: %v (reported %d); want a StaleError for jobs/job, reported once", err, reported)
	}

	if _, err := stampApplyConfiguration(kindless{}, "job", 1); err == nil {
		t.Fatal("an apply configuration without apiVersion and kind was stamped")
	}
}

// kindless is an apply configuration that is no Kubernetes object.
type kindless struct{}

func (kindless) IsApplyConfiguration() {}

// TestFencedClientRefusesUnfenceableObjects: the fenced client never stamps a
// token that no lease checks. A cluster-scoped object (no namespace) and,
// when the client knows the lease's namespace, an object in another
// namespace are refused locally with ErrUnfenceable, whatever the write
// (create, update, patch, apply, delete, status), and nothing is sent: the
// webhook checks a guard against the lease of that name in the object's own
// namespace, and refuses it on cluster-scoped objects. Objects in the
// lease's namespace are written as before.
func TestFencedClientRefusesUnfenceableObjects(t *testing.T) {
	base, sent := countingClient()
	ctx := context.Background()
	writes := func(c *FencedClient, obj func() client.Object, ac runtime.ApplyConfiguration) map[string]error {
		return map[string]error{
			"create": c.Create(ctx, obj()),
			"update": c.Update(ctx, obj()),
			"patch":  c.Patch(ctx, obj(), client.MergeFrom(obj())),
			"apply":  c.Apply(ctx, ac),
			"delete": c.Delete(ctx, obj()),
			"status": c.Status().Update(ctx, obj()),
		}
	}
	clusterRole := func() client.Object {
		return &rbacv1.ClusterRole{TypeMeta: metav1.TypeMeta{Kind: "ClusterRole"}, ObjectMeta: metav1.ObjectMeta{Name: "cr"}}
	}
	inNamespace := func(ns string) func() client.Object {
		return func() client.Object {
			return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}}
		}
	}
	for _, tc := range []struct {
		name    string
		c       *FencedClient
		obj     func() client.Object
		ac      runtime.ApplyConfiguration
		message string
	}{
		{"cluster-scoped, lease namespace unknown", NewFencedClient(base, "job", fixedToken{42, true}), clusterRole,
			rbacv1ac.ClusterRole("cr"), `ClusterRole "cr" has no namespace (it is cluster-scoped`},
		{"cluster-scoped", NewFencedClient(base, "job", fixedToken{42, true}, ClientConfig{Namespace: "jobs"}), clusterRole,
			rbacv1ac.ClusterRole("cr"), `ClusterRole "cr" has no namespace (it is cluster-scoped`},
		{"another namespace", NewFencedClient(base, "job", fixedToken{42, true}, ClientConfig{Namespace: "jobs"}), inNamespace("other"),
			corev1ac.ConfigMap("cm", "other"), "other/cm is outside namespace jobs of lease jobs/job"},
	} {
		for write, err := range writes(tc.c, tc.obj, tc.ac) {
			if !errors.Is(err, ErrUnfenceable) || !strings.Contains(err.Error(), tc.message) {
				t.Errorf("%s, %s: %v, want ErrUnfenceable saying %q", tc.name, write, err, tc.message)
			}
		}
	}
	if *sent != 0 {
		t.Fatalf("%d unfenceable writes sent", *sent)
	}
	for write, err := range writes(NewFencedClient(base, "job", fixedToken{42, true}, ClientConfig{Namespace: "jobs"}), inNamespace("jobs"), corev1ac.ConfigMap("cm", "jobs")) {
		if err != nil {
			t.Errorf("the lease's namespace, %s: %v", write, err)
		}
	}
	if *sent != 6 {
		t.Fatalf("%d writes in the lease's namespace sent, want 6", *sent)
	}
}

// An Elector's client (and so the fenced manager's) knows its lease's
// namespace: it refuses objects of other namespaces.
func TestElectorClientKnowsTheLeaseNamespace(t *testing.T) {
	base := fake.NewClientBuilder().Build()
	e, err := New(Config{Client: base, Namespace: "jobs", Name: "job", Identity: "a", User: "a",
		Callbacks: Callbacks{OnStartedLeading: func(context.Context, int64) {}}})
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "cm"}}
	if err := e.Client(base).Create(context.Background(), cm); !errors.Is(err, ErrUnfenceable) {
		t.Fatalf("an Elector's client writing into another namespace: %v, want ErrUnfenceable", err)
	}
}
