package policy_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubefence/kubefence/controllers/policy"
	"github.com/kubefence/kubefence/test/testenv"
)

// checks records what an Installer's OnCheck was told.
type checks struct {
	mu       sync.Mutex
	restored map[string]int
}

func (c *checks) on(object string, _, restored bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if restored {
		c.restored[object]++
	}
}

func (c *checks) count(object string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.restored[object]
}

// TestInstallerRestoresWhatDrifted: the installer keeps the policies as
// generated after its start (safety review 2026-12-01, finding 10): the
// guarded binding deleted, set to Warn, or the fencing policy given an extra
// match condition and stripped of its incarnation, is written again as
// generated within seconds (the check interval is an hour: the watch does
// it), and OnCheck reports each as restored. Before, the installer applied
// once at start and returned: the deleted binding stayed deleted, and stale
// writes were accepted until the operator restarted.
func TestInstallerRestoresWhatDrifted(t *testing.T) {
	t.Parallel() // a control plane of its own
	_, c, admin := controlPlane(t, testenv.Input{Root: "../.."})
	ctx, cancel := context.WithCancel(t.Context())
	settings := policy.Settings{ControllerUsers: []string{admin}, ExcludedNamespaces: []string{"kube-system"}}
	seen := &checks{restored: map[string]int{}}
	inst := &policy.Installer{Settings: settings, Client: c, CheckInterval: time.Hour, OnCheck: seen.on}
	done := make(chan struct{})
	go func() { defer close(done); _ = inst.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	guarded := func() (*admissionregistrationv1.ValidatingAdmissionPolicyBinding, error) {
		b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
		return b, c.Get(ctx, client.ObjectKey{Name: policy.GuardedBindingName}, b)
	}
	fencing := func() (*admissionregistrationv1.ValidatingAdmissionPolicy, error) {
		p := &admissionregistrationv1.ValidatingAdmissionPolicy{}
		return p, c.Get(ctx, client.ObjectKey{Name: policy.FencingPolicyName}, p)
	}
	testenv.Within(t, 20*time.Second, "the policies are applied", func() error { _, err := guarded(); return err })
	p, err := fencing()
	if err != nil {
		t.Fatal(err)
	}
	inc := p.Annotations[policy.IncarnationAnnotation]

	// Deleted.
	b, _ := guarded()
	if err := c.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}
	testenv.Within(t, 10*time.Second, "the deleted guarded binding is written again", func() error {
		b, err := guarded()
		if err != nil {
			return err
		}
		if b.UID == "" || b.CreationTimestamp.IsZero() {
			return fmt.Errorf("not created")
		}
		return nil
	})

	// Set to warn instead of deny.
	testenv.Within(t, 5*time.Second, "the guarded binding set to Warn", func() error {
		b, err := guarded()
		if err != nil {
			return err
		}
		b.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn}
		return c.Update(ctx, b, client.FieldOwner("someone-else"))
	})
	testenv.Within(t, 10*time.Second, "the guarded binding denies again", func() error {
		b, err := guarded()
		if err != nil {
			return err
		}
		if !slices.Equal(b.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
			return fmt.Errorf("validationActions %v", b.Spec.ValidationActions)
		}
		return nil
	})

	// An extra match condition (a server-side apply would keep it: another
	// manager owns it) and the incarnation annotation removed.
	testenv.Within(t, 5*time.Second, "the fencing policy edited", func() error {
		p, err := fencing()
		if err != nil {
			return err
		}
		p.Spec.MatchConditions = append(p.Spec.MatchConditions, admissionregistrationv1.MatchCondition{Name: "never", Expression: "false"})
		delete(p.Annotations, policy.IncarnationAnnotation)
		return c.Update(ctx, p, client.FieldOwner("someone-else"))
	})
	testenv.Within(t, 10*time.Second, "the fencing policy is as generated again", func() error {
		p, err := fencing()
		if err != nil {
			return err
		}
		if len(p.Spec.MatchConditions) != 1 {
			return fmt.Errorf("match conditions %v", p.Spec.MatchConditions)
		}
		if got := p.Annotations[policy.IncarnationAnnotation]; got != inc {
			return fmt.Errorf("incarnation %q, want the one applied, %q", got, inc)
		}
		return nil
	})
	if n := seen.count("ValidatingAdmissionPolicyBinding/" + policy.GuardedBindingName); n < 2 {
		t.Errorf("OnCheck reported the guarded binding restored %d times, want at least 2 (deleted, set to Warn)", n)
	}
	if n := seen.count("ValidatingAdmissionPolicy/" + policy.FencingPolicyName); n < 1 {
		t.Errorf("OnCheck reported the fencing policy restored %d times, want at least 1", n)
	}
	// Nothing else was touched: no restore reported for the others.
	for _, o := range settings.Objects() {
		name := o.GetObjectKind().GroupVersionKind().Kind + "/" + o.GetName()
		if o.GetName() == policy.GuardedBindingName || o.GetName() == policy.FencingPolicyName {
			continue
		}
		if n := seen.count(name); n != 0 {
			t.Errorf("OnCheck reported %s restored %d times, want 0 (it was as generated)", name, n)
		}
	}
}
