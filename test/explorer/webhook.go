package explorer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/webhooks/fencing"
	"github.com/kubefence/kubefence/pkg/fence"
)

// snapshotReader serves the fencing webhook's live lease read: the version
// the model's read saw, and it moves the webhook's clock to the answer, so
// the handler measures the decision's time as the model chose it.
type snapshotReader struct {
	snap *coordv1alpha1.FencedLease
	// hb is the heartbeat Lease as stored (nil: none in the model).
	hb     *coordinationv1.Lease
	clock  *clocktesting.FakePassiveClock
	answer time.Time
}

func (r *snapshotReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	r.clock.SetTime(r.answer)
	if l, ok := obj.(*coordinationv1.Lease); ok {
		if r.hb == nil || key.Name != r.hb.Name {
			return apierrors.NewNotFound(coordinationv1.Resource("leases"), key.Name)
		}
		r.hb.DeepCopyInto(l)
		return nil
	}
	if r.snap == nil || key.Name != leaseName {
		return apierrors.NewNotFound(coordv1alpha1.GroupVersion.WithResource("fencedleases").GroupResource(), key.Name)
	}
	r.snap.DeepCopyInto(obj.(*coordv1alpha1.FencedLease))
	return nil
}

func (r *snapshotReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("the explorer's lease reader only gets")
}

// objectJSON is the guarded object as admission sees it: the guard, and the
// token when it has one.
func (m *model) objectJSON(token int64, withToken bool) []byte {
	if !withToken {
		token = -1
	}
	if raw, ok := m.objects[token]; ok {
		return raw
	}
	meta := map[string]any{"name": "y", "namespace": leaseNamespace, "labels": map[string]string{coordv1alpha1.GuardLeaseLabel: leaseName}}
	if token >= 0 {
		meta["annotations"] = map[string]string{coordv1alpha1.FencingTokenAnnotation: strconv.FormatInt(token, 10)}
	}
	raw, err := json.Marshal(map[string]any{"apiVersion": "example.kubefence.io/v1", "kind": "Widget", "metadata": meta})
	if err != nil {
		panic(err)
	}
	m.objects[token] = raw
	return raw
}

// verdict is the fencing webhook's answer to a guarded write.
type verdict struct {
	allowed bool
	// stale: refused as stale (the client steps down: fence.IsStale).
	stale   bool
	code    int32
	message string
}

// admitGuarded runs the fencing webhook's handler on write w: its decision
// started when w arrived, reads the lease as it is now, and answers at tick
// answerAt.
func (m *model) admitGuarded(s *state, w *write, answerAt int) verdict {
	start := base.Add(time.Duration(w.arrived)*m.cfg.Tick + s.offsets[pFencing])
	answer := base.Add(time.Duration(answerAt)*m.cfg.Tick + s.offsets[pFencing])
	clock := clocktesting.NewFakePassiveClock(start)
	snap := s.lease.obj
	old := w.old
	var hb *coordinationv1.Lease
	if m.hbClient() >= 0 {
		hb = m.hbLease(s)
	}
	h := &fencing.Handler{
		Mode:      fencing.ModeGuarded,
		Leases:    &fencing.LeaseReader{Reader: &snapshotReader{snap: snap, hb: hb, clock: clock, answer: answer}},
		Clock:     clock,
		Skew:      m.cfg.Skew,
		CommitLag: m.cfg.CommitLag,
	}
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID:       "w",
		Kind:      metav1.GroupVersionKind{Group: "example.kubefence.io", Version: "v1", Kind: "Widget"},
		Resource:  metav1.GroupVersionResource{Group: "example.kubefence.io", Version: "v1", Resource: "widgets"},
		Name:      "y",
		Namespace: leaseNamespace,
		UserInfo:  authenticationv1.UserInfo{Username: m.cfg.Clients[w.client].Name},
	}}
	oldRaw := m.objectJSON(old.token, old.hasToken)
	switch {
	case w.tokenless:
		// A /status update: a custom resource drops metadata changes there.
		req.Operation, req.SubResource = admissionv1.Update, "status"
		req.OldObject.Raw, req.Object.Raw = oldRaw, oldRaw
	case !old.exists:
		req.Operation = admissionv1.Create
		req.Object.Raw = m.objectJSON(w.token, true)
	default:
		req.Operation = admissionv1.Update
		req.OldObject.Raw, req.Object.Raw = oldRaw, m.objectJSON(w.token, true)
	}
	resp := h.Handle(context.Background(), req)
	if resp.Allowed {
		return verdict{allowed: true}
	}
	v := verdict{code: resp.Result.Code, message: resp.Result.Message}
	v.stale = fence.IsStale(&apierrors.StatusError{ErrStatus: *resp.Result})
	return v
}

func (v verdict) String() string {
	if v.allowed {
		return "allowed"
	}
	return fmt.Sprintf("refused %d (stale: %v): %s", v.code, v.stale, v.message)
}
