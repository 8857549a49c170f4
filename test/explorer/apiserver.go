package explorer

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/webhooks/fencedlease"
	"github.com/kubefence/kubefence/pkg/fence/protocol"
)

// The model's users.
const (
	controllerUser = "system:serviceaccount:kubefence-system:kubefence-controller"
	adminGroup     = "kubefence:lease-admins"
	leaseNamespace = "jobs"
	leaseName      = "l"
)

// errConflict is the API server's answer to a write on an older version.
var errConflict = fmt.Errorf("conflict: the object has been modified")

// writer is who sends a lease write: a client (its index), or the
// controller (-1).
type writer struct {
	client int
	user   authenticationv1.UserInfo
}

func (m *model) clientWriter(i int) writer {
	return writer{client: i, user: authenticationv1.UserInfo{Username: m.cfg.Clients[i].Name}}
}

var controllerWriter = writer{client: -1, user: authenticationv1.UserInfo{Username: controllerUser}}

// admitLease runs the FencedLease webhook on a write of the lease.
func (m *model) admitLease(s *state, w writer, sub string, old, obj *coordv1alpha1.FencedLease) error {
	ctx := admission.NewContextWithRequest(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Update, SubResource: sub, UserInfo: w.user, Namespace: leaseNamespace, Name: leaseName,
	}})
	v := &fencedlease.FencedLeaseValidator{
		ControllerUsers: []string{controllerUser},
		AdminGroups:     []string{adminGroup},
		Clock:           clocktesting.NewFakePassiveClock(s.now(m.cfg, pLeaseWebhook)),
		StampSkew:       m.cfg.Skew,
	}
	_, err := v.ValidateUpdate(ctx, old, obj)
	return err
}

// updateLease is an update of the lease's main resource with obj (status
// is ignored, a changed spec raises the generation), with its
// resourceVersion as precondition when precondition is set.
func (m *model) updateLease(s *state, w writer, obj *coordv1alpha1.FencedLease, precondition bool) error {
	cur := s.lease.obj
	if cur == nil {
		return fmt.Errorf("not found")
	}
	if precondition && obj.ResourceVersion != cur.ResourceVersion {
		return errConflict
	}
	if err := m.admitLease(s, w, "", cur, obj); err != nil {
		return err
	}
	stored := obj.DeepCopy()
	stored.Status = *cur.Status.DeepCopy()
	stored.Generation = cur.Generation
	if !equality.Semantic.DeepEqual(cur.Spec, stored.Spec) {
		stored.Generation++
	}
	m.commitLease(s, w, stored)
	return nil
}

// patchLease applies a JSON patch (its test operations pin what it read)
// to the lease's main resource, with RFC 6902's semantics: the API server's
// part, not a kubefence rule.
func (m *model) patchLease(s *state, w writer, p protocol.Patch) error {
	cur := s.lease.obj
	if cur == nil {
		return fmt.Errorf("not found")
	}
	obj := cur.DeepCopy()
	if err := applyPatch(obj, p); err != nil {
		return fmt.Errorf("the patch does not apply (422): %v", err)
	}
	return m.updateLease(s, w, obj, false)
}

// applyPatch applies p to obj. The protocol's patches (pkg/fence/protocol)
// only test, replace, remove and add whole requests, or test the holder; any
// other patch goes through a JSON patch library on the whole object.
func applyPatch(obj *coordv1alpha1.FencedLease, p protocol.Patch) error {
	reqs := obj.Spec.Requests
	for _, op := range p {
		switch {
		case op.Path == "/status/holderIdentity" && op.Op == "test":
			if v, ok := op.Value.(string); !ok || v != obj.Status.HolderIdentity {
				return fmt.Errorf("test of %s failed", op.Path)
			}
			continue
		case strings.HasPrefix(op.Path, "/spec/requests/"):
			i, err := strconv.Atoi(strings.TrimPrefix(op.Path, "/spec/requests/"))
			if err != nil {
				return applyJSONPatch(obj, p)
			}
			r, isRequest := op.Value.(coordv1alpha1.LeaseRequest)
			switch {
			case op.Op == "remove" && i < len(reqs):
				reqs = append(reqs[:i:i], reqs[i+1:]...)
				continue
			case op.Op == "test" && isRequest:
				if i >= len(reqs) || !sameJSON(reqs[i], r) {
					return fmt.Errorf("test of %s failed", op.Path)
				}
				continue
			case op.Op == "replace" && isRequest && i < len(reqs):
				reqs = append(reqs[:i:i], append([]coordv1alpha1.LeaseRequest{r}, reqs[i+1:]...)...)
				continue
			}
		}
		return applyJSONPatch(obj, p)
	}
	obj.Spec.Requests = reqs
	return nil
}

func sameJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

func applyJSONPatch(obj *coordv1alpha1.FencedLease, p protocol.Patch) error {
	raw, err := p.Data(nil)
	if err != nil {
		return err
	}
	patch, err := jsonpatch.DecodePatch(raw)
	if err != nil {
		return err
	}
	doc, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	out, err := patch.Apply(doc)
	if err != nil {
		return err
	}
	*obj = coordv1alpha1.FencedLease{}
	return json.Unmarshal(out, obj)
}

// updateStatus is the controller's status write, with its resourceVersion
// as precondition.
func (m *model) updateStatus(s *state, obj *coordv1alpha1.FencedLease) error {
	cur := s.lease.obj
	if cur == nil {
		return fmt.Errorf("not found")
	}
	if obj.ResourceVersion != cur.ResourceVersion {
		return errConflict
	}
	if err := m.admitLease(s, controllerWriter, "status", cur, obj); err != nil {
		return err
	}
	stored := cur.DeepCopy()
	stored.Status = *obj.Status.DeepCopy()
	m.commitLease(s, controllerWriter, stored)
	return nil
}

// commitLease stores a new version of the lease and brings the ground truth
// up to it: which request instances exist, and which tenure is live.
func (m *model) commitLease(s *state, w writer, obj *coordv1alpha1.FencedLease) {
	s.rev++
	obj.ResourceVersion = strconv.FormatInt(s.rev, 10)
	s.lease = newVersion(obj, s.rev, s.t)

	// Request instances: removed ones go, new ones belong to the writer.
	kept := s.insts[:0:0]
	for _, in := range s.insts {
		if coordv1alpha1.RequestIndex(obj.Spec.Requests, in.identity) >= 0 {
			kept = append(kept, in)
		}
	}
	for _, r := range obj.Spec.Requests {
		found := false
		for _, in := range kept {
			found = found || in.identity == r.HolderIdentity
		}
		if !found {
			kept = append(kept, instance{identity: r.HolderIdentity, id: s.nextInst, owner: w.client})
			s.nextInst++
		}
	}
	s.insts = kept
	m.judgeTenure(s, w)
}

func (s *state) instanceOf(identity string) (instance, bool) {
	for _, in := range s.insts {
		if in.identity == identity {
			return in, true
		}
	}
	return instance{}, false
}

// judgeTenure ends the live tenure at the commit that ends it (status moved
// on, or the granted request instance is gone) and starts the tenure a
// status write grants. A tenure the controller ends (an expiry) while its
// owner is inside its own deadline breaks live-refused.
func (m *model) judgeTenure(s *state, w writer) {
	obj := s.lease.obj
	if s.live.token != 0 {
		in, ok := s.instanceOf(s.live.identity)
		if obj == nil || !obj.DeletionTimestamp.IsZero() || obj.Status.FencingToken != s.live.token ||
			obj.Status.HolderIdentity != s.live.identity || !ok || in.id != s.live.inst {
			ended := s.live
			s.live = tenure{}
			s.maxEnded = max(s.maxEnded, ended.token)
			if w.client == -1 && ended.owner >= 0 {
				if c := &s.clients[ended.owner]; c.phase == cLeading && c.token == ended.token && s.now(m.cfg, pClient0+ended.owner).Before(c.deadline) {
					m.violate(s, propLiveRefused, fmt.Sprintf("the controller ended %s's tenure of token %d while %s is inside its own deadline %s",
						m.cfg.Clients[ended.owner].Name, ended.token, m.cfg.Clients[ended.owner].Name, m.fmtClock(c.deadline)))
				}
			}
		}
	}
	if obj != nil && s.live.token == 0 && obj.Status.HolderIdentity != "" && obj.Status.FencingToken > s.maxEnded {
		// A grant: every lower token has ended.
		s.maxEnded = max(s.maxEnded, obj.Status.FencingToken-1)
		if in, ok := s.instanceOf(obj.Status.HolderIdentity); ok && obj.DeletionTimestamp.IsZero() {
			s.live = tenure{token: obj.Status.FencingToken, identity: in.identity, inst: in.id, owner: in.owner}
		} else {
			s.maxEnded = max(s.maxEnded, obj.Status.FencingToken)
		}
	}
}
