package enforcement_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coordv1alpha1 "github.com/kubefence/kubefence/api/v1alpha1"
	"github.com/kubefence/kubefence/controllers/operator"
	"github.com/kubefence/kubefence/controllers/policy"
	"github.com/kubefence/kubefence/pkg/fence"
	"github.com/kubefence/kubefence/test/testenv"
)

// pauseHold is how long at least the second API server stays paused during
// a hand-over, pauseMax how long at most it waits for the table to name the
// new holder. Past its master lease (15 s after its last renewal, so 5-15 s
// into the pause) the server may leave the endpoints; the barrier still
// waits for it (Tracker: it accepts connections).
const (
	pauseHold = 6 * time.Second
	pauseMax  = 20 * time.Second
)

// maxKilledDelay bounds the time from the second server's death to the next
// grant: its endpoint expires 5-25 s after its death (docs/design.md), then
// the barrier's next look at the servers drops it (1 s), then the grant
// (with the commit lag after a release: none), with a few seconds' margin for
// a loaded machine.
const maxKilledDelay = 30 * time.Second

// TestBarrierTwoAPIServers is policy mode's propagation barrier on two
// kube-apiservers on one etcd (testenv.Input.TwoAPIServers), the operator addressing the
// first: a grant is written only once both servers refuse the previous token
// and accept the new one, a killed server stops blocking grants once it
// leaves the kubernetes Service's endpoints, and after each grant a stale
// write sent to either server directly is refused. About 30-50 s; skipped by
// -short.
func TestBarrierTwoAPIServers(t *testing.T) {
	h := startTwo(t, operator.EnforcementPolicy)
	ns := h.namespace(t, nil)
	h.lease(t, ns, "job", 30)
	alice, aliceToken := h.lead(t, "alice", ns, "job")
	t.Logf("alice leads with token %d", aliceToken)

	t.Run("a hand-over waits for a paused server", func(t *testing.T) {
		must(t, h.two.Second.Pause())
		paused := time.Now()
		alice.stop() // releases the lease
		bob := h.elect(t, "bob", ns, "job")
		// The table comes to name bob while the second server is paused (a
		// reconcile that decided on a cache not yet showing alice's grant
		// may hold the queue for one barrier timeout first); the grant, and
		// so bob's Elector, waits: checked for pauseHold since the pause and
		// 2 s since the table named him.
		var named time.Time
		for named.IsZero() || time.Since(paused) < pauseHold || time.Since(named) < 2*time.Second {
			if time.Since(paused) > pauseMax {
				t.Fatalf("the tenure table does not name bob %v after the pause: %v", pauseMax, tableNames(h, ns, "bob"))
			}
			if tok, ok := bob.el.Token(); ok {
				t.Fatalf("bob leads with token %d %v after the second server was paused, before it resumed", tok, time.Since(paused))
			}
			var l coordv1alpha1.FencedLease
			must(t, h.admin.Get(h.ctx, client.ObjectKey{Namespace: ns, Name: "job"}, &l))
			if l.Status.HolderIdentity == "bob" {
				t.Fatalf("bob was granted the lease (token %d) while the second server was paused", l.Status.FencingToken)
			}
			if named.IsZero() && tableNames(h, ns, "bob") == nil {
				named = time.Now()
				t.Logf("the table names bob %v after the pause", named.Sub(paused).Round(time.Millisecond))
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("the second server stays paused %v", time.Since(paused).Round(time.Millisecond))
		must(t, h.two.Second.Resume())
		resumed := time.Now()
		bobToken := h.leads(t, bob, 30*time.Second, "bob leads after the second server resumed")
		t.Logf("resume -> bob leads: %v", time.Since(resumed).Round(time.Millisecond))
		h.writesOnEach(t, ns, "paused", "alice", aliceToken, "bob", bobToken)

		t.Run("a killed server stops blocking grants once it leaves the endpoints", func(t *testing.T) {
			must(t, h.two.Second.Kill())
			killed := time.Now()
			bob.stop() // releases the lease
			again := h.elect(t, "alice", ns, "job")
			againToken := h.leads(t, again, 90*time.Second, "alice leads again after the second server was killed")
			delay := time.Since(killed)
			t.Logf("kill -> alice leads: %v", delay.Round(time.Millisecond))
			// The killed server leaves the endpoints 5-25 s after its death;
			// the barrier drops it within relistInterval (1 s) of that.
			if delay > maxKilledDelay {
				t.Errorf("the killed server blocked the grant for %v, want at most %v", delay, maxKilledDelay)
			}
			listed, err := h.two.Listed(h.ctx)
			must(t, err)
			if strings.Contains(strings.Join(listed, " "), h.two.Second.Host) {
				t.Errorf("alice was granted the lease while the killed server %s is still listed (%v)", h.two.Second.Host, listed)
			}
			stale := fence.NewFencedClient(h.users["bob"], "job", fixedToken(bobToken))
			check(t, h, "after the kill: bob's stale create", stale.Create(h.ctx, widget(ns, "killed", "", "", "bob")), staleToken(bobToken))

			// A restarted server syncs its caches before it admits anything:
			// it refuses bob's token from its first answer.
			must(t, h.two.Second.Start(h.ctx, h.cfg))
			testenv.Within(t, 30*time.Second, "the restarted server is listed", func() error {
				return h.two.WaitListed(h.ctx, h.two.First.Host, h.two.Second.Host)
			})
			h.writesOnEach(t, ns, "restarted", "bob", bobToken, "alice", againToken)
		})
	})
}

// tableNames tells whether the tenure table of ns names holder for lease job.
func tableNames(h *harness, ns, holder string) error {
	var cm corev1.ConfigMap
	if err := h.admin.Get(h.ctx, client.ObjectKey{Namespace: ns, Name: coordv1alpha1.TenureTableName}, &cm); err != nil {
		return err
	}
	if e := policy.EntryOf(&cm, "job"); !strings.HasSuffix(e, " "+holder) {
		return fmt.Errorf("the table's entry for job is %q", e)
	}
	return nil
}

// writesOnEach sends, to each API server directly, a create of a guarded
// Widget by staleUser with staleToken (refused as stale) and one by holder
// with token (accepted).
func (h *harness) writesOnEach(t *testing.T, ns, prefix, staleUser string, staleTok int64, holder string, token int64) {
	t.Helper()
	servers := map[string]*rest.Config{}
	for _, u := range []string{staleUser, holder} {
		base := rest.CopyConfig(h.userCfgs[u])
		base.Dial = h.cfg.Dial // reaches each advertised address
		ss, err := policy.APIServers(h.ctx, h.admin, base)
		must(t, err)
		if len(ss) != 2 {
			t.Fatalf("%d API servers listed, want 2: %v", len(ss), ss)
		}
		for i, s := range ss {
			servers[fmt.Sprintf("%s/%d", u, i)] = s.Config
		}
	}
	for i := range 2 {
		host := servers[fmt.Sprintf("%s/%d", staleUser, i)].Host
		stale := h.direct(t, servers[fmt.Sprintf("%s/%d", staleUser, i)], staleTok)
		check(t, h, fmt.Sprintf("%s: %s's stale create through %s", prefix, staleUser, host),
			stale.Create(h.ctx, widget(ns, fmt.Sprintf("%s-stale-%d", prefix, i), "", "", staleUser)), staleToken(staleTok))
		cur := h.direct(t, servers[fmt.Sprintf("%s/%d", holder, i)], token)
		check(t, h, fmt.Sprintf("%s: %s's create through %s", prefix, holder, host),
			cur.Create(h.ctx, widget(ns, fmt.Sprintf("%s-holder-%d", prefix, i), "", "", holder)), accepted)
	}
}

// direct is a fenced client for lease job with token through cfg.
func (h *harness) direct(t *testing.T, cfg *rest.Config, token int64) *fence.FencedClient {
	t.Helper()
	c, err := client.New(cfg, client.Options{Scheme: h.scheme})
	must(t, err)
	return fence.NewFencedClient(c, "job", fixedToken(token))
}
