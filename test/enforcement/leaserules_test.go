package enforcement_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/controllers/policy"
	"github.com/kubefence/kubefence/pkg/fence"
)

// The FencedLease rules (I6) on a real API server, one table in both modes:
// the FencedLease webhook judges them in webhook mode, the policy
// kubefence-fencedleases (policy.Settings.LeasePolicy) in policy mode, where
// no FencedLease webhook is installed. Each refusal must come from that
// judge (or from the CRD's own validation, in both modes) and say why.

// leaseRule is one row: a write by one of the table's users on a lease of
// the namespace, and what it must get.
type leaseRule struct {
	name  string
	write func(t *testing.T, r *leaseRules) error
	// refusal is a fragment of the message; empty: accepted.
	refusal string
	// byCRD: the CRD's validation refuses it (422), in both modes.
	byCRD bool
}

// leaseRules is the table's situation: namespace ns, lease "q" held by
// alice (token token) with bob waiting, users by name (alice, bob and
// mallory are clients, ops is in system:masters without being a controller
// user, pod-a and pod-b are alice from pods a and b).
type leaseRules struct {
	h     *harness
	ns    string
	token int64
	users map[string]client.Client
}

func (r *leaseRules) get(t *testing.T, name string) *coordv1alpha1.FencedLease {
	t.Helper()
	var l coordv1alpha1.FencedLease
	must(t, r.h.admin.Get(r.h.ctx, client.ObjectKey{Namespace: r.ns, Name: name}, &l))
	return &l
}

// update reads lease name as the admin, changes it with f and writes it as
// user, again on a conflict (the controller writes the lease too).
func (r *leaseRules) update(t *testing.T, user, name string, f func(*coordv1alpha1.FencedLease)) error {
	for {
		l := r.get(t, name)
		f(l)
		if err := r.users[user].Update(r.h.ctx, l); !apierrors.IsConflict(err) {
			return err
		}
	}
}

func (r *leaseRules) create(user, name string, f func(*coordv1alpha1.FencedLease)) error {
	l := &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: name},
		Spec: coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: 600}}
	f(l)
	return r.users[user].Create(r.h.ctx, l)
}

func request(id, user string) coordv1alpha1.LeaseRequest {
	return coordv1alpha1.LeaseRequest{HolderIdentity: id, User: user}
}

// requestOf is the request of id in l; if an earlier row went wrong and it
// is missing, a detached one, so that the row still reports its outcome.
func requestOf(l *coordv1alpha1.FencedLease, id string) *coordv1alpha1.LeaseRequest {
	i := coordv1alpha1.RequestIndex(l.Spec.Requests, id)
	if i < 0 {
		return &coordv1alpha1.LeaseRequest{HolderIdentity: id}
	}
	return &l.Spec.Requests[i]
}

func stamp(t time.Time) *metav1.MicroTime {
	m := metav1.NewMicroTime(t)
	return &m
}

// renewing is a renewal of id's request: renewSequence + 1, renewTime at(its
// previous one).
func renewing(id string, at func(prev *metav1.MicroTime) *metav1.MicroTime) func(*coordv1alpha1.FencedLease) {
	return func(l *coordv1alpha1.FencedLease) {
		q := requestOf(l, id)
		q.RenewSequence++
		q.RenewTime = at(q.RenewTime)
	}
}

func now(*metav1.MicroTime) *metav1.MicroTime { return stamp(time.Now()) }

func leaseRuleRows() []leaseRule {
	own := func(l *coordv1alpha1.FencedLease) {
		l.Spec.Requests = append(l.Spec.Requests, request("alice", "alice"))
	}
	return []leaseRule{
		// Create.
		{"a client creates a lease with its own request", func(t *testing.T, r *leaseRules) error { return r.create("alice", "c1", own) }, "", false},
		{"a client creates a lease with another's request", func(t *testing.T, r *leaseRules) error {
			return r.create("mallory", "c2", func(l *coordv1alpha1.FencedLease) { l.Spec.Requests = append(l.Spec.Requests, request("bob", "bob")) })
		}, "a client can request the lease only for itself", false},
		{"a client creates a lease in an excluded namespace", func(t *testing.T, r *leaseRules) error {
			return r.users["alice"].Create(r.h.ctx, &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "c3"},
				Spec: coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: 10}})
		}, "FencedLeases cannot be created in namespace kube-system", false},
		{"a client creates a lease with ownerReferences", func(t *testing.T, r *leaseRules) error {
			return r.create("alice", "c4", func(l *coordv1alpha1.FencedLease) {
				l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: "0d5e1c4e-0000-4000-8000-000000000001"}}
			})
		}, "may set ownerReferences on a FencedLease", false},
		{"a client creates a lease marked expired", func(t *testing.T, r *leaseRules) error {
			return r.create("alice", "c5", func(l *coordv1alpha1.FencedLease) {
				l.Annotations = map[string]string{coordv1alpha1.ExpiredAnnotation: "x/1"}
			})
		}, "annotation " + coordv1alpha1.ExpiredAnnotation + " is written only by the kubefence controller", false},
		{"ServiceAccount binding: a holderIdentity other than the username", func(t *testing.T, r *leaseRules) error {
			return r.create("alice", "c6", func(l *coordv1alpha1.FencedLease) {
				l.Spec.IdentityBinding = coordv1alpha1.IdentityBindingServiceAccount
				l.Spec.Requests = append(l.Spec.Requests, request("someone", "alice"))
			})
		}, "identityBinding ServiceAccount", false},
		{"ServiceAccount binding: holderIdentity is the username", func(t *testing.T, r *leaseRules) error {
			return r.create("alice", "c7", func(l *coordv1alpha1.FencedLease) {
				l.Spec.IdentityBinding = coordv1alpha1.IdentityBindingServiceAccount
				own(l)
			})
		}, "", false},
		{"Pod binding: a requester without a pod-bound token", func(t *testing.T, r *leaseRules) error {
			return r.create("alice", "c8", func(l *coordv1alpha1.FencedLease) {
				l.Spec.IdentityBinding = coordv1alpha1.IdentityBindingPod
				own(l)
			})
		}, "identityBinding Pod", false},
		{"Pod binding: another pod's identity", func(t *testing.T, r *leaseRules) error {
			return r.create("pod-a", "c9", func(l *coordv1alpha1.FencedLease) {
				l.Spec.IdentityBinding = coordv1alpha1.IdentityBindingPod
				l.Spec.Requests = append(l.Spec.Requests, request("b", "alice"))
			})
		}, "identityBinding Pod", false},
		{"Pod binding: its own pod's identity", func(t *testing.T, r *leaseRules) error {
			return r.create("pod-a", "pods", func(l *coordv1alpha1.FencedLease) {
				l.Spec.IdentityBinding = coordv1alpha1.IdentityBindingPod
				l.Spec.Requests = append(l.Spec.Requests, request("a", "alice"))
			})
		}, "", false},
		{"Pod binding: the same user from another pod withdraws pod a's request", func(t *testing.T, r *leaseRules) error {
			return r.update(t, "pod-b", "pods", func(l *coordv1alpha1.FencedLease) { l.Spec.Requests = nil })
		}, "only the requester can withdraw or release it", false},
		{"Pod binding: the same user from another pod renews pod a's request", func(t *testing.T, r *leaseRules) error {
			return r.update(t, "pod-b", "pods", func(l *coordv1alpha1.FencedLease) { requestOf(l, "a").RenewSequence++ })
		}, "only the holder can renew it", false},
		{"Pod binding: pod b queues behind pod a", func(t *testing.T, r *leaseRules) error {
			return r.update(t, "pod-b", "pods", func(l *coordv1alpha1.FencedLease) { l.Spec.Requests = append(l.Spec.Requests, request("b", "alice")) })
		}, "", false},

		// Update: lease q, alice holds, bob waits.
		{"the holder renews (renewSequence + 1, renewTime now)", func(t *testing.T, r *leaseRules) error {
			return r.update(t, "alice", "q", renewing("alice", now))
		}, "", false},
		{"the holder moves its renewTime back", func(t *testing.T, r *leaseRules) error {
			return r.update(t, "alice", "q", renewing("alice", func(prev *metav1.MicroTime) *metav1.MicroTime { return stamp(prev.Add(-time.Second)) }))
		}, "may only move forward", false},
		{"the holder removes its renewTime", func(t *testing.T, r *leaseRules) error {
			return r.update(t, "alice", "q", renewing("alice", func(*metav1.MicroTime) *metav1.MicroTime { return nil }))
		}, "cannot be removed once set", false},
		{"the holder lowers its renewSequence", func(t *testing.T, r *leaseRules) error {
			return r.update(t, "alice", "q", func(l *coordv1alpha1.FencedLease) { requestOf(l, "alice").RenewSequence-- })
		}, "renewSequence may only increase", true},
		{"a waiting client renews the holder's request (a forged renewal)", func(t *testing.T, r *leaseRules) error {
			return r.update(t, "bob", "q", renewing("alice", now))
		}, "only the holder can renew it", false},
		{"a waiting client withdraws the holder's request", func(t *testing.T, r *leaseRules) error {
			return r.update(t, "bob", "q", func(l *coordv1alpha1.FencedLease) { l.Spec.Requests = l.Spec.Requests[1:] })
		}, "only the requester can withdraw or release it", false},
		{"a waiting client moves itself to the front", func(t *testing.T, r *leaseRules) error {
			return r.update(t, "bob", "q", func(l *coordv1alpha1.FencedLease) {
				l.Spec.Requests[0], l.Spec.Requests[1] = l.Spec.Requests[1], l.Spec.Requests[0]
			})
		}, "order of spec.requests", false},
		{"a client queues for another user", func(t *testing.T, r *leaseRules) error {
			return r.update(t, "mallory", "q", func(l *coordv1alpha1.FencedLease) {
				l.Spec.Requests = append(l.Spec.Requests, request("carol", "carol"))
			})
		}, "a client can request the lease only for itself", false},
		{"a client inserts its request before a waiting one", func(t *testing.T, r *leaseRules) error {
			return r.update(t, "mallory", "q", func(l *coordv1alpha1.FencedLease) {
				l.Spec.Requests = []coordv1alpha1.LeaseRequest{l.Spec.Requests[0], request("mallory", "mallory"), l.Spec.Requests[1]}
			})
		}, "new requests are appended at the end of the queue", false},
		{"a client queues at the end", func(t *testing.T, r *leaseRules) error {
			return r.update(t, "mallory", "q", func(l *coordv1alpha1.FencedLease) {
				l.Spec.Requests = append(l.Spec.Requests, request("mallory", "mallory"))
			})
		}, "", false},
		{"a client withdraws its own request", func(t *testing.T, r *leaseRules) error {
			return r.update(t, "mallory", "q", func(l *coordv1alpha1.FencedLease) {
				l.Spec.Requests = l.Spec.Requests[:coordv1alpha1.RequestIndex(l.Spec.Requests, "mallory")]
			})
		}, "", false},
		{"a client shortens the lease", func(t *testing.T, r *leaseRules) error {
			return r.update(t, "bob", "q", func(l *coordv1alpha1.FencedLease) { l.Spec.LeaseDurationSeconds = 1 })
		}, "may change leaseDurationSeconds, lockDelaySeconds or minFencingToken", false},
		{"a client raises minFencingToken", func(t *testing.T, r *leaseRules) error {
			return r.update(t, "bob", "q", func(l *coordv1alpha1.FencedLease) { l.Spec.MinFencingToken = 1 << 40 })
		}, "may change leaseDurationSeconds, lockDelaySeconds or minFencingToken", false},
		{"a client revokes the holder's tenure", func(t *testing.T, r *leaseRules) error {
			return r.update(t, "bob", "q", func(l *coordv1alpha1.FencedLease) {
				l.Annotations = map[string]string{coordv1alpha1.RevokedAnnotation: fmt.Sprintf("alice/%d", r.token)}
			})
		}, "annotation " + coordv1alpha1.RevokedAnnotation + " is written only by operators", false},
		{"a client marks the holder expired", func(t *testing.T, r *leaseRules) error {
			return r.update(t, "bob", "q", func(l *coordv1alpha1.FencedLease) {
				l.Annotations = map[string]string{coordv1alpha1.ExpiredAnnotation: fmt.Sprintf("alice/%d", r.token)}
			})
		}, "annotation " + coordv1alpha1.ExpiredAnnotation + " is written only by the kubefence controller", false},
		{"a client removes the epoch finalizer", func(t *testing.T, r *leaseRules) error {
			return r.update(t, "bob", "q", func(l *coordv1alpha1.FencedLease) { l.Finalizers = nil })
		}, "finalizer " + coordv1alpha1.EpochFinalizer + " is removed only by the kubefence controller", false},
		{"an operator removes the epoch finalizer", func(t *testing.T, r *leaseRules) error {
			return r.update(t, "ops", "q", func(l *coordv1alpha1.FencedLease) { l.Finalizers = nil })
		}, "finalizer " + coordv1alpha1.EpochFinalizer + " is removed only by the kubefence controller", false},
		{"a client adds a finalizer", func(t *testing.T, r *leaseRules) error {
			return r.update(t, "bob", "q", func(l *coordv1alpha1.FencedLease) { l.Finalizers = append(l.Finalizers, "example.com/forever") })
		}, "may change the finalizers of a FencedLease", false},
		{"a client adds an owner", func(t *testing.T, r *leaseRules) error {
			return r.update(t, "bob", "q", func(l *coordv1alpha1.FencedLease) {
				l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: "0d5e1c4e-0000-4000-8000-000000000001"}}
			})
		}, "may change the ownerReferences of a FencedLease", false},
		{"the clean-up controller changes the spec", func(t *testing.T, r *leaseRules) error {
			return r.update(t, "gc", "q", func(l *coordv1alpha1.FencedLease) { l.Spec.Requests = l.Spec.Requests[1:] })
		}, "may change only the ownerReferences and finalizers of a FencedLease", false},
		{"a client grants itself the lease through status (a stolen grant)", func(t *testing.T, r *leaseRules) error {
			l := r.get(t, "q")
			l.Status.HolderIdentity = "bob"
			l.Status.FencingToken = r.token + 1
			return r.users["bob"].Status().Update(r.h.ctx, l)
		}, "status is written only by the kubefence controller", false},
		{"a client deletes the held lease", func(t *testing.T, r *leaseRules) error {
			return r.users["bob"].Delete(r.h.ctx, r.get(t, "q"))
		}, "is held by alice", false},
		{"an operator removes the holder's request without revoking", func(t *testing.T, r *leaseRules) error {
			return r.update(t, "ops", "q", func(l *coordv1alpha1.FencedLease) { l.Spec.Requests = l.Spec.Requests[1:] })
		}, "revokes its tenure", false},
		{"an operator changes the lease duration", func(t *testing.T, r *leaseRules) error {
			return r.update(t, "ops", "q", func(l *coordv1alpha1.FencedLease) { l.Spec.LeaseDurationSeconds = 599 })
		}, "", false},
		{"an operator revokes the holder's tenure", func(t *testing.T, r *leaseRules) error {
			return r.update(t, "ops", "q", func(l *coordv1alpha1.FencedLease) {
				l.Spec.Requests = l.Spec.Requests[1:]
				l.Annotations = map[string]string{coordv1alpha1.RevokedAnnotation: fmt.Sprintf("alice/%d", r.token)}
			})
		}, "", false},
		{"a client deletes a lease nobody holds", func(t *testing.T, r *leaseRules) error {
			must(t, r.create("alice", "free", func(*coordv1alpha1.FencedLease) {}))
			return r.users["alice"].Delete(r.h.ctx, r.get(t, "free"))
		}, "", false},
	}
}

// impersonating is a client of the admin's config acting as user (in the
// clients' group), with the pod name of a pod-bound token if pod is set.
func (h *harness) impersonating(t *testing.T, user, pod string) client.Client {
	t.Helper()
	c := rest.CopyConfig(h.cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"kubefence:clients", "system:authenticated"}}
	if pod != "" {
		c.Impersonate.Extra = map[string][]string{coordv1alpha1.PodNameExtraKey: {pod}}
	}
	cl, err := client.New(c, client.Options{Scheme: h.scheme})
	must(t, err)
	return cl
}

func runLeaseRules(t *testing.T, h *harness) {
	r := &leaseRules{h: h, ns: h.namespace(t, nil), users: map[string]client.Client{}}
	for _, u := range []string{"alice", "bob", "mallory"} {
		r.users[u] = h.users[u]
	}
	ops, err := h.env.AddUser(envtest.User{Name: "ops", Groups: []string{"system:masters"}}, nil)
	must(t, err)
	r.users["ops"], err = client.New(ops.Config(), client.Options{Scheme: h.scheme})
	must(t, err)
	r.users["gc"] = h.impersonating(t, "system:serviceaccount:kube-system:generic-garbage-collector", "")
	r.users["pod-a"] = h.impersonating(t, "alice", "a")
	r.users["pod-b"] = h.impersonating(t, "alice", "b")
	// RBAC lets the clients (and the clean-up user) write status and
	// everything else, so that only admission refuses.
	must(t, h.admin.Create(h.ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "lease-rules"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{coordv1alpha1.GroupVersion.Group}, Resources: []string{"fencedleases", "fencedleases/status"}, Verbs: []string{"*"}}}}))
	must(t, h.admin.Create(h.ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "lease-rules"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "lease-rules"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, Name: "kubefence:clients"},
			{Kind: rbacv1.UserKind, Name: "system:serviceaccount:kube-system:generic-garbage-collector"}}}))

	must(t, r.create("alice", "q", func(l *coordv1alpha1.FencedLease) {
		l.Spec.Requests = append(l.Spec.Requests, request("alice", "alice"))
	}))
	must(t, r.update(t, "bob", "q", func(l *coordv1alpha1.FencedLease) { l.Spec.Requests = append(l.Spec.Requests, request("bob", "bob")) }))
	h.eventually(t, 10*time.Second, "alice holds q, with the epoch finalizer", func() error {
		l := r.get(t, "q")
		if l.Status.HolderIdentity != "alice" || len(l.Finalizers) == 0 {
			return errors.New("not yet")
		}
		r.token = l.Status.FencingToken
		return nil
	})
	h.eventually(t, 10*time.Second, "RBAC lets the clients write status", func() error {
		err := r.users["bob"].Status().Update(h.ctx, r.get(t, "q"))
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "cannot update resource") {
			return err
		}
		return nil
	})
	for _, row := range leaseRuleRows() {
		checkLease(t, h, row.name, row.write(t, r), row.refusal, row.byCRD)
	}
}

// checkLease checks a FencedLease write's outcome, and that a refusal came
// from the mode's judge: the policy kubefence-fencedleases in policy mode
// (no FencedLease webhook is installed there), the FencedLease webhook in
// webhook mode, or the CRD's validation (byCRD).
func checkLease(t *testing.T, h *harness, what string, err error, refusal string, byCRD bool) {
	t.Helper()
	if refusal == "" {
		if err != nil {
			t.Errorf("%s: refused, want accepted: %v", what, err)
		}
		return
	}
	if err == nil {
		t.Errorf("%s: accepted, want refused (%s)", what, refusal)
		return
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		t.Errorf("%s: not an API status: %v", what, err)
		return
	}
	msg := st.Status().Message
	if !strings.Contains(msg, refusal) {
		t.Errorf("%s: message %q does not contain %q", what, msg, refusal)
	}
	via := `admission webhook "vfencedlease-v1alpha1.kb.io"`
	if h.mode == operator.EnforcementPolicy {
		via = "ValidatingAdmissionPolicy '" + policy.LeasePolicyName + "'"
	}
	switch {
	case byCRD && !apierrors.IsInvalid(err):
		t.Errorf("%s: refused with %d, want the CRD's validation (422): %s", what, st.Status().Code, msg)
	case !byCRD && (!apierrors.IsForbidden(err) || !strings.Contains(msg, via)):
		t.Errorf("%s: refused, but not by %s with 403: %d %s", what, via, st.Status().Code, msg)
	}
}

// runFutureStamp: alice renews lease ns/stamp (L = 2 s) with a renewTime an
// hour ahead and then goes silent, bob waits. In webhook mode the FencedLease
// webhook refuses the stamp (its clock bound). In policy mode no admission
// check can (CEL has no clock), so the policy accepts it, and the
// controller's clamp (Timing.ClampStamps) keeps it from extending her
// tenure: bob is granted the lease within seconds, not an hour.
func runFutureStamp(t *testing.T, h *harness) {
	r := &leaseRules{h: h, ns: h.namespace(t, nil), users: map[string]client.Client{"alice": h.users["alice"], "bob": h.users["bob"]}}
	must(t, r.create("alice", "stamp", func(l *coordv1alpha1.FencedLease) {
		l.Spec.LeaseDurationSeconds = 2
		l.Spec.Requests = []coordv1alpha1.LeaseRequest{request("alice", "alice")}
	}))
	h.eventually(t, 10*time.Second, "alice holds ns/stamp", func() error {
		if r.get(t, "stamp").Status.HolderIdentity != "alice" {
			return errors.New("not yet")
		}
		return nil
	})
	must(t, r.update(t, "bob", "stamp", func(l *coordv1alpha1.FencedLease) { l.Spec.Requests = append(l.Spec.Requests, request("bob", "bob")) }))
	err := r.update(t, "alice", "stamp", renewing("alice", func(*metav1.MicroTime) *metav1.MicroTime { return stamp(time.Now().Add(time.Hour)) }))
	if h.mode != operator.EnforcementPolicy {
		checkLease(t, h, "a renewal stamped an hour ahead", err, "is later than the webhook's clock", false)
		return
	}
	checkLease(t, h, "a renewal stamped an hour ahead (no clock in CEL: accepted)", err, "", false)
	renewed := time.Now()
	h.eventually(t, 15*time.Second, "bob is granted ns/stamp after alice's expiry, despite her stamp", func() error {
		if l := r.get(t, "stamp"); l.Status.HolderIdentity != "bob" {
			return fmt.Errorf("holder %q", l.Status.HolderIdentity)
		}
		return nil
	})
	if d := time.Since(renewed); d < 2*time.Second {
		t.Errorf("bob was granted %v after alice's last renewal, before L = 2 s", d)
	}
}

// runRequeuedHolder: a released holder's identity, queued again by someone
// else before the controller ended the tenure, does not carry the tenure on
// (docs/design.md, "Which request carries the tenure"). alice leads lease
// ns/held and writes object y, bob waits. The reconciler stops while the
// webhooks keep serving (a leader hand-off: the other replicas still serve
// admission); alice's elector releases. Admission refuses mallory's
// request under the identity alice, which status still names as holder.
// A request that admission did not judge (an earlier release's admitted
// it; here the controller's own user appends it) is not alice's tenure
// either: mallory's DELETE of y is refused before a controller runs again,
// and once one does, bob, queued first, is granted the lease and her
// DELETE is still refused.
func runRequeuedHolder(t *testing.T, h *harness) {
	ns := h.namespace(t, nil)
	h.lease(t, ns, "held", 30)
	alice, _ := h.lead(t, "alice", ns, "held")
	must(t, fence.NewFencedClient(h.users["alice"], "held", alice.el).Create(h.ctx, widget(ns, "y", "", "", "alice")))
	bob := h.elect(t, "bob", ns, "held")
	r := &leaseRules{h: h, ns: ns, users: h.clients()}
	h.eventually(t, 10*time.Second, "bob is queued behind alice", func() error {
		if l := r.get(t, "held"); coordv1alpha1.RequestIndex(l.Spec.Requests, "bob") < 0 {
			return errors.New("not yet")
		}
		return nil
	})

	h.stopOperator()
	webhooksOnly := h.options()
	webhooksOnly.Reconciler = false
	h.runOperator(t, webhooksOnly)
	alice.stop()
	h.eventually(t, 10*time.Second, "alice's elector withdraws her request", func() error {
		if l := r.get(t, "held"); coordv1alpha1.RequestIndex(l.Spec.Requests, "alice") >= 0 || l.Status.HolderIdentity != "alice" {
			return fmt.Errorf("requests %v, holder %q", l.Spec.Requests, l.Status.HolderIdentity)
		}
		return nil
	})
	queue := func(l *coordv1alpha1.FencedLease) {
		l.Spec.Requests = append(l.Spec.Requests, request("alice", "mallory"))
	}
	checkLease(t, h, "mallory queues under the identity alice, which status names as the holder after alice withdrew",
		r.update(t, "mallory", "held", queue), "queues the identity status.holderIdentity still names as the holder", false)
	if l := r.get(t, "held"); coordv1alpha1.RequestIndex(l.Spec.Requests, "alice") < 0 {
		must(t, r.update(t, "admin", "held", queue))
	}

	y := widget(ns, "y", "", "", "")
	must(t, h.admin.Get(h.ctx, client.ObjectKeyFromObject(y), y))
	before := notHolder(ns + "/held") // the table still names alice's user
	if h.mode == operator.EnforcementWebhook {
		before = staleRefusal("lease " + ns + "/held has no holder") // the live read
	}
	check(t, h, "mallory deletes y under alice's tenure, her request made again by mallory", h.users["mallory"].Delete(h.ctx, y.DeepCopy()), before)

	h.stopOperator()
	h.runOperator(t, h.options())
	h.leads(t, bob, 30*time.Second, "bob, queued first, is granted ns/held once a controller runs")
	check(t, h, "mallory deletes y once bob holds the lease", h.users["mallory"].Delete(h.ctx, y.DeepCopy()), notHolder(ns+"/held"))
	if l := r.get(t, "held"); l.Status.HolderUser != "bob" || coordv1alpha1.RequestIndex(l.Spec.Requests, "alice") < 0 {
		t.Errorf("after the grant to bob: status.holderUser %q, requests %v; want bob, and mallory's request waiting", l.Status.HolderUser, l.Spec.Requests)
	}
}

// clients are the harness's users' clients, and the admin's as "admin" (a
// controller user: admission does not judge its writes).
func (h *harness) clients() map[string]client.Client {
	out := map[string]client.Client{"admin": h.admin}
	for name, c := range h.users {
		out[name] = c
	}
	return out
}
