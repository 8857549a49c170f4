package explorer

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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

// writer is who sends a lease write: a client (its index), the controller
// or an operator (client -1).
type writer struct {
	client     int
	controller bool
	user       authenticationv1.UserInfo
}

func (m *model) clientWriter(i int) writer {
	return writer{client: i, user: authenticationv1.UserInfo{Username: m.cfg.Clients[i].Name}}
}

var (
	controllerWriter = writer{client: -1, controller: true, user: authenticationv1.UserInfo{Username: controllerUser}}
	operatorWriter   = writer{client: -1, user: authenticationv1.UserInfo{Username: "operator", Groups: []string{adminGroup}}}
)

// admitLease runs the FencedLease webhook on a write of the lease.
func (m *model) admitLease(s *state, w writer, sub string, old, obj *coordv1alpha1.FencedLease) error {
	ctx := admission.NewContextWithRequest(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Update, SubResource: sub, UserInfo: w.user, Namespace: leaseNamespace, Name: leaseName,
	}})
	_, err := m.validator(s).ValidateUpdate(ctx, old, obj)
	return err
}

// validator is the FencedLease webhook, on its clock.
func (m *model) validator(s *state) *fencedlease.FencedLeaseValidator {
	return &fencedlease.FencedLeaseValidator{
		ControllerUsers: []string{controllerUser},
		AdminGroups:     []string{adminGroup},
		Clock:           clocktesting.NewFakePassiveClock(s.now(m.cfg, pLeaseWebhook)),
		StampSkew:       m.cfg.Skew,
	}
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
// test, replace, remove and move whole requests, test a request's identity
// or user and the holder, and add an annotation; any other patch goes
// through a JSON patch library on the whole object.
func applyPatch(obj *coordv1alpha1.FencedLease, p protocol.Patch) error {
	reqs := slices.Clone(obj.Spec.Requests)
	ann := maps.Clone(obj.Annotations)
	index := func(path string) (int, string, bool) {
		rest, ok := strings.CutPrefix(path, "/spec/requests/")
		if !ok {
			return 0, "", false
		}
		num, field, _ := strings.Cut(rest, "/")
		i, err := strconv.Atoi(num)
		return i, field, err == nil && i >= 0
	}
	for _, op := range p {
		str, isString := op.Value.(string)
		r, isRequest := op.Value.(coordv1alpha1.LeaseRequest)
		i, field, isIndex := index(op.Path)
		switch {
		case op.Path == "/status/holderIdentity" && op.Op == "test" && isString:
			if str != obj.Status.HolderIdentity {
				return fmt.Errorf("test of %s failed", op.Path)
			}
		case op.Op == "add" && op.Path == "/metadata/annotations" && ann == nil:
			m, ok := op.Value.(map[string]string)
			if !ok {
				return applyJSONPatch(obj, p)
			}
			ann = maps.Clone(m)
		case op.Op == "add" && strings.HasPrefix(op.Path, "/metadata/annotations/") && ann != nil && isString:
			key := strings.NewReplacer("~1", "/", "~0", "~").Replace(strings.TrimPrefix(op.Path, "/metadata/annotations/"))
			ann[key] = str
		case !isIndex:
			return applyJSONPatch(obj, p)
		case i >= len(reqs) && op.Op != "move":
			return fmt.Errorf("%s: no such request", op.Path)
		case op.Op == "test" && field == "holderIdentity" && isString:
			if reqs[i].HolderIdentity != str {
				return fmt.Errorf("test of %s failed", op.Path)
			}
		case op.Op == "test" && field == "user" && isString:
			if reqs[i].User != str {
				return fmt.Errorf("test of %s failed", op.Path)
			}
		case op.Op == "test" && field == "" && isRequest:
			if !sameJSON(reqs[i], r) {
				return fmt.Errorf("test of %s failed", op.Path)
			}
		case op.Op == "replace" && field == "" && isRequest:
			reqs[i] = r
		case op.Op == "remove" && field == "":
			reqs = slices.Delete(reqs, i, i+1)
		case op.Op == "move" && field == "":
			from, ffield, ok := index(op.From)
			if !ok || ffield != "" || from >= len(reqs) || i >= len(reqs) {
				return applyJSONPatch(obj, p)
			}
			moved := reqs[from]
			reqs = slices.Insert(slices.Delete(reqs, from, from+1), i, moved)
		default:
			return applyJSONPatch(obj, p)
		}
	}
	obj.Spec.Requests, obj.Annotations = reqs, ann
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

// deleteLease deletes the lease: its finalizer keeps it, marked as being
// deleted (the generation goes up), until the controller recorded its epoch.
func (m *model) deleteLease(s *state, w writer) error {
	cur := s.lease.obj
	ctx := admission.NewContextWithRequest(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Delete, UserInfo: w.user, Namespace: leaseNamespace, Name: leaseName,
	}})
	if _, err := m.validator(s).ValidateDelete(ctx, cur); err != nil {
		return err
	}
	obj := cur.DeepCopy()
	now := metav1.NewTime(base.Add(time.Duration(s.t) * m.cfg.Tick))
	obj.DeletionTimestamp = &now
	obj.Generation++
	m.commitLease(s, w, obj)
	return nil
}

// createLease creates the lease again (a new incarnation, a new UID), with
// the controller's finalizer and no requests.
func (m *model) createLease(s *state) error {
	s.incarnation++
	obj := &coordv1alpha1.FencedLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: leaseNamespace, Name: leaseName, UID: types.UID(fmt.Sprintf("lease-%d", s.incarnation+1)),
			Generation: 1, Finalizers: []string{coordv1alpha1.EpochFinalizer}},
		Spec: coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: m.cfg.LeaseSeconds, LockDelaySeconds: m.cfg.LockDelaySeconds,
			IdentityBinding: coordv1alpha1.IdentityBindingNone},
	}
	ctx := admission.NewContextWithRequest(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, UserInfo: operatorWriter.user, Namespace: leaseNamespace, Name: leaseName,
	}})
	if _, err := m.validator(s).ValidateCreate(ctx, obj); err != nil {
		return err
	}
	m.commitLease(s, operatorWriter, obj)
	return nil
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
	var requests []coordv1alpha1.LeaseRequest
	if obj != nil {
		obj.ResourceVersion = strconv.FormatInt(s.rev, 10)
		requests = obj.Spec.Requests
	}
	s.lease = newVersion(obj, s.rev, s.t)

	// Request instances: removed ones go, new ones belong to the writer.
	kept := s.insts[:0:0]
	for _, in := range s.insts {
		if coordv1alpha1.RequestIndex(requests, in.identity) >= 0 {
			kept = append(kept, in)
		}
	}
	for _, r := range requests {
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
// on, the granted request instance is gone, the lease is being deleted) and
// records the tenure a status write grants, with its owner. A tenure the
// controller ends (an expiry) while its owner is inside its own deadline
// breaks live-refused.
func (m *model) judgeTenure(s *state, w writer) {
	obj := s.lease.obj
	if s.live.token != 0 {
		in, ok := s.instanceOf(s.live.identity)
		if obj == nil || !obj.DeletionTimestamp.IsZero() || obj.Status.FencingToken != s.live.token ||
			obj.Status.HolderIdentity != s.live.identity || !ok || in.id != s.live.inst {
			ended := s.live
			s.live = tenure{}
			if w.controller && ended.owner >= 0 {
				if c := &s.clients[ended.owner]; c.phase == cLeading && c.token == ended.token && s.now(m.cfg, pClient0+ended.owner).Before(c.deadline) {
					m.violate(s, propLiveRefused, fmt.Sprintf("the controller ended %s's tenure of token %d while %s is inside its own deadline %s",
						m.cfg.Clients[ended.owner].Name, ended.token, m.cfg.Clients[ended.owner].Name, m.fmtClock(c.deadline)))
				}
			}
		}
	}
	if obj != nil && obj.Status.HolderIdentity != "" && obj.Status.FencingToken > s.maxGranted {
		s.maxGranted = obj.Status.FencingToken
		in, ok := s.instanceOf(obj.Status.HolderIdentity)
		owner := -1
		if ok {
			owner = in.owner
		}
		s.owners = append(s.owners, tokenOwner{token: obj.Status.FencingToken, owner: owner})
		if ok && obj.DeletionTimestamp.IsZero() {
			s.live = tenure{token: obj.Status.FencingToken, identity: in.identity, inst: in.id, owner: in.owner}
		}
	}
}
