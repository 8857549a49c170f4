package fencing

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fence/timing"
)

func widgetJSON(token, writer string) []byte {
	return []byte(`{"apiVersion":"example.kubefence.io/v1","kind":"Widget","metadata":{"name":"w","namespace":"ns","uid":"6f1c0a9e-1111-2222-3333-444455556666","resourceVersion":"12345","generation":7,"creationTimestamp":"2026-11-30T08:00:00Z","labels":{"kubefence.io/lease":"job","app":"demo"},"annotations":{"kubefence.io/fencing-token":"` + token + `"},"managedFields":[{"manager":"bench","operation":"Update","apiVersion":"example.kubefence.io/v1","time":"2026-11-30T08:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:annotations":{".":{},"f:kubefence.io/fencing-token":{}},"f:labels":{".":{},"f:app":{},"f:kubefence.io/lease":{}}},"f:spec":{".":{},"f:writer":{},"f:replicas":{}}}}]},"spec":{"writer":"` + writer + `","replicas":1},"status":{"observedWriter":"x"}}`)
}

func benchHandler(b testing.TB) (*Handler, admission.Request, []byte) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = coordv1alpha1.AddToScheme(scheme)
	exp := metav1.NewMicroTime(time.Now().Add(time.Hour))
	lease := &coordv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "job"},
		Spec:       coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: 15, Requests: []coordv1alpha1.LeaseRequest{{HolderIdentity: "a", User: "alice"}}},
		Status:     coordv1alpha1.FencedLeaseStatus{HolderIdentity: "a", FencingToken: 42, ExpireTime: &exp},
	}
	cl := cacheLike{lease: lease}
	h := &Handler{Mode: ModeGuarded, Leases: &LeaseReader{Reader: cl}, Clock: clock.RealClock{}, Skew: timing.DefaultSkew, CommitLag: timing.DefaultCommitLag}
	ar := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: "u", Kind: metav1.GroupVersionKind{Group: "example.kubefence.io", Version: "v1", Kind: "Widget"},
			Resource: metav1.GroupVersionResource{Group: "example.kubefence.io", Version: "v1", Resource: "widgets"},
			Name:     "w", Namespace: "ns", Operation: admissionv1.Update,
			UserInfo:  authenticationv1.UserInfo{Username: "alice", Groups: []string{"system:authenticated"}},
			Object:    runtime.RawExtension{Raw: widgetJSON("42", "a")},
			OldObject: runtime.RawExtension{Raw: widgetJSON("42", "b")},
		},
	}
	body, _ := json.Marshal(ar)
	return h, admission.Request{AdmissionRequest: *ar.Request}, body
}

// BenchmarkHandle is the handler's own decision on a typical guarded UPDATE.
func BenchmarkHandle(b *testing.B) {
	h, req, _ := benchHandler(b)
	b.ReportAllocs()
	for b.Loop() {
		if r := h.Handle(context.Background(), req); !r.Allowed {
			b.Fatalf("refused: %v", r.Result)
		}
	}
}

// BenchmarkServeHTTP adds controller-runtime's AdmissionReview decoding and
// the answer's encoding (what the webhook server does per request, minus TLS).
func BenchmarkServeHTTP(b *testing.B) {
	h, _, body := benchHandler(b)
	wh := &admission.Webhook{Handler: h}
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, coordv1alpha1.FencingGuardedPath, bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		wh.ServeHTTP(rec, r)
		if rec.Code != http.StatusOK || !bytes.Contains(rec.Body.Bytes(), []byte(`"allowed":true`)) {
			b.Fatalf("answer %d %s", rec.Code, rec.Body.String())
		}
	}
}

// cacheLike serves one lease the way the informer cache does: a deep copy.
type cacheLike struct{ lease *coordv1alpha1.FencedLease }

func (c cacheLike) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	c.lease.DeepCopyInto(obj.(*coordv1alpha1.FencedLease))
	return nil
}

func (c cacheLike) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }
