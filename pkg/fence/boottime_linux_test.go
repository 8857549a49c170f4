package fence

import (
	"context"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// On Linux an Elector on the real clock reads CLOCK_BOOTTIME, which counts
// like the monotonic clock while the machine is awake.
func TestBootClockOnTheRealClock(t *testing.T) {
	e, err := New(Config{Client: fake.NewClientBuilder().Build(), Namespace: "jobs", Name: "job", Identity: "a", User: "a",
		Callbacks: Callbacks{OnStartedLeading: func(context.Context, int64) {}}})
	if err != nil {
		t.Fatal(err)
	}
	if e.boot == nil {
		t.Fatal("an Elector on the real clock does not read CLOCK_BOOTTIME")
	}
	b0, m0 := e.boot(), time.Now()
	time.Sleep(20 * time.Millisecond)
	b, m := e.boot()-b0, time.Since(m0)
	if b < 20*time.Millisecond || b > m+10*time.Millisecond {
		t.Fatalf("CLOCK_BOOTTIME advanced %v while the monotonic clock advanced %v", b, m)
	}
}
