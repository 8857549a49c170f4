package heartbeat_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kubefence/kubefence/hack/devenv"
	"github.com/kubefence/kubefence/pkg/fence"
	"github.com/kubefence/kubefence/test/testenv"
)

// lossLog counts the Electors' own accounts of how their tenures ended
// (their log lines), and for an end the controller decided, whether the
// holder's local deadline had passed.
type lossLog struct {
	mu       sync.Mutex
	counts   map[string]int
	electors map[string]*fence.Elector // by identity
	firstErr string
}

func (l *lossLog) sink() logr.Logger { return logr.New(&lossSink{l: l}) }

// lossSink counts the messages of lossLog's kinds, whatever their level;
// "Lease is no longer ours" (the controller ended the tenure) also as
// "... before the local deadline" if the Elector's deadline had not passed.
type lossSink struct {
	l        *lossLog
	identity string
}

func (s *lossSink) Init(logr.RuntimeInfo) {}
func (s *lossSink) Enabled(int) bool      { return true }
func (s *lossSink) WithValues(kv ...any) logr.LogSink {
	c := *s
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == "identity" {
			c.identity, _ = kv[i+1].(string)
		}
	}
	return &c
}
func (s *lossSink) WithName(string) logr.LogSink        { return s }
func (s *lossSink) Error(_ error, msg string, _ ...any) { s.Info(0, msg) }
func (s *lossSink) Info(_ int, msg string, kv ...any) {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == "error" && s.l.firstErr == "" {
			s.l.firstErr = fmt.Sprint(kv[i+1])
		}
	}
	for _, m := range lossMessages {
		if strings.HasPrefix(msg, m) {
			s.l.counts[m]++
		}
	}
	if e := s.l.electors[s.identity]; strings.HasPrefix(msg, "Lease is no longer ours") && e != nil && time.Now().Before(e.Deadline()) {
		s.l.counts["no longer ours before the local deadline"]++
	}
}

var lossMessages = []string{"Local deadline passed without a successful renewal", "Lease is no longer ours",
	"Renewal failed; retrying", "Renewal refused: lease lost", "Stepping down", "Could not acknowledge grant"}

// Many per-lease heartbeat Electors in one process (60; HEARTBEAT_LOAD_N
// sets another number) through one unthrottled client, as the scale
// benchmark's holder process (and controller-runtime's GetConfig), keep
// their tenures for 4 L, beating every second. A tenure the controller ended
// while its holder's local deadline had not passed would be a liveness gap
// on the controller's side (a beat counted late, missed at the live read
// before the expiry): counted apart, and a failure whatever the load.
func TestManyPerLeaseHeartbeatsInOneProcess(t *testing.T) {
	testenv.SkipIfShort(t)
	n := 60
	if s := os.Getenv("HEARTBEAT_LOAD_N"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			t.Fatalf("HEARTBEAT_LOAD_N=%q: expected a positive number of Electors", s)
		}
	}
	ns, err := cluster.Namespace(suiteCtx, "hb-load")
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(userConfigs["alice"])
	cfg.QPS, cfg.Burst = -1, 0
	cl, err := client.NewWithWatch(cfg, client.Options{Scheme: devenv.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	losses := &lossLog{counts: map[string]int{}, electors: map[string]*fence.Elector{}}
	ctx, cancel := context.WithCancel(logf.IntoContext(suiteCtx, losses.sink()))
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	var mu sync.Mutex
	starts := map[string]int{} // tenures started, by lease
	// restarted is how many tenures started again after each lease's first
	// (mu held).
	restarted := func() int {
		again := 0
		for _, c := range starts {
			again += c - 1
		}
		return again
	}
	for i := range n {
		name := fmt.Sprintf("l%03d", i)
		createLease(t, ns, name)
		e, err := fence.New(fence.Config{Client: cl, Namespace: ns, Name: name, Identity: "worker-" + name, Heartbeat: &fence.Heartbeat{},
			Callbacks: fence.Callbacks{OnStartedLeading: func(ctx context.Context, _ int64) {
				mu.Lock()
				starts[name]++
				mu.Unlock()
				<-ctx.Done()
			}}})
		if err != nil {
			t.Fatal(err)
		}
		losses.mu.Lock()
		losses.electors["worker-"+name] = e
		losses.mu.Unlock()
		wg.Go(func() { _ = e.Run(ctx) })
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		mu.Lock()
		led := len(starts)
		mu.Unlock()
		if led == n {
			break
		}
		if time.Now().After(deadline) {
			losses.mu.Lock()
			defer losses.mu.Unlock()
			t.Fatalf("%d of %d Electors led within 60 s; Electors' accounts %v (first error: %s)", led, n, losses.counts, losses.firstErr)
		}
	}
	time.Sleep(leaseSeconds * time.Second)
	mu.Lock()
	before := fmt.Sprint(starts)
	losses.mu.Lock()
	t.Logf("%d Electors, acquiring and 1 L: Electors' accounts %v; tenures started again %d", n, losses.counts, restarted())
	losses.counts = map[string]int{}
	losses.mu.Unlock()
	mu.Unlock()
	time.Sleep(4 * leaseSeconds * time.Second)
	mu.Lock()
	after, again := fmt.Sprint(starts), restarted()
	mu.Unlock()
	losses.mu.Lock()
	defer losses.mu.Unlock()
	t.Logf("%d Electors, 4 L: Electors' accounts %v; tenures started again in total (since the start) %d", n, losses.counts, again)
	if early := losses.counts["no longer ours before the local deadline"]; early > 0 {
		t.Fatalf("the controller ended %d tenures before their holders' local deadlines", early)
	}
	if after != before {
		t.Fatalf("tenures lost in 4 L with %d per-lease heartbeats in one process", n)
	}
}
