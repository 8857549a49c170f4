package enforcement_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/controllers/policy"
	"github.com/kubefence/kubefence/pkg/fence"
	"github.com/kubefence/kubefence/test/testenv"
)

// fixedToken is a writer that believes it holds token n.
type fixedToken int64

func (f fixedToken) Token() (int64, bool) { return int64(f), true }

// runOperatorDown stops every operator process (reconciler and webhooks):
// in policy mode the holder's guarded writes keep working and stale ones are
// still refused, and so do its renewals (renewalsKeepWorking); in webhook
// mode every guarded write fails closed. Nobody is granted the lease
// meanwhile (I7).
func runOperatorDown(t *testing.T, h *harness) {
	s := h.situation(t, nil)
	// bob's elector keeps running: stopping it would release the lease, and
	// a release the controller ends before it stops leaves no holder. In
	// webhook mode its renewals fail meanwhile (the FencedLease webhook is
	// down); in policy mode they keep working.
	var short *elector
	if h.mode == operator.EnforcementPolicy {
		// A 2 s lease bob keeps renewing while the operator is down.
		h.lease(t, s.ns, "short", 2)
		short, _ = h.lead(t, "bob", s.ns, "short")
	}
	h.stopOperator()
	holder := fence.NewFencedClient(h.users["bob"], "job", fixedToken(s.current))
	stale := fence.NewFencedClient(h.users["alice"], "job", fixedToken(s.stale))
	// The API server's webhook client needs a moment to notice the server
	// is gone; a write then fails closed (webhook mode) or is decided by the
	// policy (policy mode).
	time.Sleep(500 * time.Millisecond)
	err := holder.Create(h.ctx, widget(s.ns, "down", "", "", "bob"))
	if h.mode == operator.EnforcementPolicy {
		check(t, h, "operator down: the holder's create", err, accepted)
		w := s.get(t, "down")
		_ = unstructured.SetNestedField(w.Object, "bob-2", "spec", "writer")
		check(t, h, "operator down: the holder's update", holder.Update(h.ctx, w), accepted)
		check(t, h, "operator down: a stale update", stale.Update(h.ctx, s.get(t, "down")), staleToken(s.stale))
		check(t, h, "operator down: a non-holder's delete", h.users["alice"].Delete(h.ctx, s.get(t, "down")), notHolder(s.ns+"/job"))
	} else if err == nil {
		t.Errorf("operator down in webhook mode: the holder's create was accepted, want refused (the webhook fails closed)")
	}
	if short != nil {
		renewalsKeepWorking(t, h, s.ns, short)
	}
	time.Sleep(2 * time.Second)
	var l coordv1alpha1.FencedLease
	must(t, h.admin.Get(h.ctx, client.ObjectKey{Namespace: s.ns, Name: "job"}, &l))
	if l.Status.HolderIdentity != "bob" || l.Status.FencingToken != s.current {
		t.Errorf("operator down: the lease moved to %s/%d, want bob/%d", l.Status.HolderIdentity, l.Status.FencingToken, s.current)
	}
}

// runPolicyOnly are policy mode's own claims.
func runPolicyOnly(t *testing.T, h *harness) {
	s := h.situation(t, nil)

	t.Run("the tenure table is written by the controller only", func(t *testing.T) {
		var cm corev1.ConfigMap
		must(t, h.admin.Get(h.ctx, client.ObjectKey{Namespace: s.ns, Name: coordv1alpha1.TenureTableName}, &cm))
		if got := policy.EntryOf(&cm, "job"); !strings.HasPrefix(got, tok(s.current)+" ") || !strings.HasSuffix(got, " bob") {
			t.Errorf("table entry of job = %q, want bob's tenure with token %d", got, s.current)
		}
		forged := cm.DeepCopy()
		policy.SetEntryOf(forged, "job", tok(s.stale)+" 0 - alice")
		for _, u := range []string{"alice", "bob"} {
			err := h.users[u].Update(h.ctx, forged.DeepCopy())
			if err == nil || !strings.Contains(err.Error(), "is written only by the kubefence controller") {
				t.Errorf("%s rewrote the tenure table: %v", u, err)
			}
			if err := h.users[u].Delete(h.ctx, cm.DeepCopy()); err == nil || !strings.Contains(err.Error(), "is written only by the kubefence controller") {
				t.Errorf("%s deleted the tenure table: %v", u, err)
			}
		}
		other := h.namespace(t, nil)
		err := h.users["alice"].Create(h.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: coordv1alpha1.TenureTableName},
			Data: map[string]string{"job": "1 0 - alice"}})
		if err == nil || !strings.Contains(err.Error(), "is written only by the kubefence controller") {
			t.Errorf("alice created a tenure table: %v", err)
		}
	})

	t.Run("the barrier passes once the API server enforces the entry, and not before", func(t *testing.T) {
		b := &policy.Barrier{Servers: policy.ConfiguredServer(h.cfg), Prober: &policy.DryRunProber{}, Timeout: 2 * time.Second}
		prev := s.stale
		if err := b.Wait(h.ctx, s.ns, "job", &prev, s.current); err != nil {
			t.Errorf("the barrier refused the entry in force: %v", err)
		}
		b.Timeout = 300 * time.Millisecond
		next := s.current + 1
		cur := s.current
		if err := b.Wait(h.ctx, s.ns, "job", &cur, next); !errors.Is(err, policy.ErrNotPropagated) {
			t.Errorf("the barrier passed for token %d, which the table does not hold: %v", next, err)
		}
	})

	t.Run("fence.IsStale recognises a policy refusal without causes", func(t *testing.T) {
		err := fence.NewFencedClient(h.users["alice"], "job", fixedToken(s.stale)).Create(h.ctx, widget(s.ns, "stale", "", "", "alice"))
		check(t, h, "a stale create", err, staleToken(s.stale))
		if err != nil && !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
			t.Errorf("not a policy refusal: %v", err)
		}
	})
}

// runExpiry ends a tenure by expiry: alice asks for the lease and never
// renews; bob is granted it after her expiry (in policy mode no sooner than
// the commit lag after the table names him). Her token is then refused and
// bob's accepted, in both modes.
func runExpiry(t *testing.T, h *harness) {
	ns := h.namespace(t, nil)
	must(t, h.admin.Create(h.ctx, &coordv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "job"},
		Spec: coordv1alpha1.FencedLeaseSpec{LeaseDurationSeconds: 2}}))
	testenv.Within(t, 10*time.Second, "alice asks for the lease", func() error {
		var l coordv1alpha1.FencedLease
		if err := h.users["alice"].Get(h.ctx, client.ObjectKey{Namespace: ns, Name: "job"}, &l); err != nil {
			return err
		}
		l.Spec.Requests = append(l.Spec.Requests, coordv1alpha1.LeaseRequest{HolderIdentity: "alice", User: "alice"})
		return h.users["alice"].Update(h.ctx, &l)
	})
	var stale int64
	testenv.Within(t, 10*time.Second, "alice is granted the lease", func() error {
		var l coordv1alpha1.FencedLease
		must(t, h.admin.Get(h.ctx, client.ObjectKey{Namespace: ns, Name: "job"}, &l))
		if l.Status.HolderIdentity != "alice" {
			return errors.New("not yet")
		}
		stale = l.Status.FencingToken
		return nil
	})
	check(t, h, "expiry: alice's create while she holds", fence.NewFencedClient(h.users["alice"], "job", fixedToken(stale)).
		Create(h.ctx, widget(ns, "x", "", "", "alice")), accepted)
	_, current := h.lead(t, "bob", ns, "job")
	check(t, h, "expiry: alice's write after bob's grant", fence.NewFencedClient(h.users["alice"], "job", fixedToken(stale)).
		Create(h.ctx, widget(ns, "y", "", "", "alice")), staleToken(stale))
	check(t, h, "expiry: alice's tokenless delete after bob's grant", h.users["alice"].Delete(h.ctx, widget(ns, "x", "", "", "")), notHolder(ns+"/job"))
	w := widget(ns, "x", "", "", "")
	must(t, h.admin.Get(h.ctx, client.ObjectKeyFromObject(w), w))
	_ = unstructured.SetNestedField(w.Object, "bob", "spec", "writer")
	check(t, h, "expiry: bob's write", fence.NewFencedClient(h.users["bob"], "job", fixedToken(current)).Update(h.ctx, w), accepted)
}
