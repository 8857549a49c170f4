package policy

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// fakeProber answers as API servers whose caches show the entry with token
// shown[host] (refusing any other token), after delay[host] probes.
type fakeProber struct {
	mu     sync.Mutex
	shown  map[string]int64
	after  map[string]int
	probes map[string]int
	fail   map[string]error
}

func (p *fakeProber) Probe(_ context.Context, s APIServer, _, _ string, token int64) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.probes[s.Host]++
	if err := p.fail[s.Host]; err != nil {
		return false, err
	}
	if p.probes[s.Host] <= p.after[s.Host] {
		return token == p.shown[s.Host]-1, nil // still the old entry
	}
	return token == p.shown[s.Host], nil
}

func servers(hosts ...string) func(context.Context) ([]APIServer, error) {
	return func(context.Context) ([]APIServer, error) {
		var out []APIServer
		for _, h := range hosts {
			out = append(out, APIServer{Host: h})
		}
		return out, nil
	}
}

func TestBarrierWaitsForEveryServer(t *testing.T) {
	prev := int64(6)
	p := &fakeProber{shown: map[string]int64{"a": 7, "b": 7}, after: map[string]int{"a": 0, "b": 10}, probes: map[string]int{}}
	b := &Barrier{Servers: servers("a", "b"), Prober: p, Interval: time.Millisecond, Timeout: 5 * time.Second}
	if err := b.Wait(context.Background(), "ns", "job", &prev, 7); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if p.probes["b"] <= 10 {
		t.Errorf("returned after %d probes of the lagging server b, before it showed the entry", p.probes["b"])
	}
}

func TestBarrierFailsWhileOneServerLagsOrErrs(t *testing.T) {
	prev := int64(6)
	for name, p := range map[string]*fakeProber{
		"lagging": {shown: map[string]int64{"a": 7, "b": 7}, after: map[string]int{"b": 1 << 30}, probes: map[string]int{}},
		"failing": {shown: map[string]int64{"a": 7, "b": 7}, probes: map[string]int{}, fail: map[string]error{"b": errors.New("connection refused")}},
		// Accepts the new token but also the old one: not yet proven.
		"accepting both": {shown: map[string]int64{"a": 7, "b": 6}, probes: map[string]int{}},
	} {
		t.Run(name, func(t *testing.T) {
			b := &Barrier{Servers: servers("a", "b"), Prober: p, Interval: time.Millisecond, Timeout: 50 * time.Millisecond}
			if err := b.Wait(context.Background(), "ns", "job", &prev, 7); !errors.Is(err, ErrNotPropagated) {
				t.Fatalf("Wait = %v, want ErrNotPropagated", err)
			}
		})
	}
}

func TestBarrierWithoutServersFails(t *testing.T) {
	b := &Barrier{Servers: servers(), Prober: &fakeProber{}}
	if err := b.Wait(context.Background(), "ns", "job", nil, 1); err == nil {
		t.Fatal("Wait passed with no API server to prove anything on")
	}
}

func TestEntryEncoding(t *testing.T) {
	for _, e := range []Entry{
		{Token: 42},
		{Token: 43, Held: true, User: "system:serviceaccount:jobs:worker", Attempt: "1234"},
		{Token: 44, Held: true, User: "a user with spaces", Pod: "worker-0", Attempt: "99"},
	} {
		got, err := decodeEntry(e.encode())
		if err != nil || got != e {
			t.Errorf("decode(encode(%+v)) = %+v, %v", e, got, err)
		}
	}
	for _, bad := range []string{"", "x", "1 2", "1 2 3"} {
		if _, err := decodeEntry(bad); err == nil {
			t.Errorf("decodeEntry(%q) accepted", bad)
		}
	}
}

func TestSettingsValidate(t *testing.T) {
	if err := (Settings{}).Validate(); err == nil {
		t.Error("no controller users accepted")
	}
	if _, err := ParseGroupResource("Widgets.example.io"); err == nil {
		t.Error("a capitalised resource accepted")
	}
	if gr, err := ParseGroupResource("widgets.example.kubefence.io"); err != nil || gr.Group != "example.kubefence.io" || gr.Resource != "widgets" {
		t.Errorf("ParseGroupResource = %v, %v", gr, err)
	}
}

// A server that fails every probe and then leaves Servers' answer (a killed
// server the Tracker has proven gone) stops blocking the Wait under way: it
// does not hold it until Timeout.
func TestBarrierDropsAServerThatLeavesDuringAWait(t *testing.T) {
	prev := int64(6)
	p := &fakeProber{shown: map[string]int64{"a": 7, "b": 7}, probes: map[string]int{}, fail: map[string]error{"b": errors.New("connection refused")}}
	var mu sync.Mutex
	calls := 0
	list := func(context.Context) ([]APIServer, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			return []APIServer{{Host: "a"}, {Host: "b"}}, nil
		}
		return []APIServer{{Host: "a"}}, nil
	}
	b := &Barrier{Servers: list, Prober: p, Interval: time.Millisecond, Timeout: 5 * time.Second}
	start := time.Now()
	if err := b.Wait(context.Background(), "ns", "job", &prev, 7); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if d := time.Since(start); d > relistInterval+time.Second {
		t.Errorf("Wait returned after %v, want within %v of b leaving the list", d, relistInterval+time.Second)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls > 1+int(time.Since(start)/relistInterval)+1 {
		t.Errorf("Servers called %d times in %v: more than once per %v", calls, time.Since(start), relistInterval)
	}
}
