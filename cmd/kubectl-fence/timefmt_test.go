package main

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                              "0s",
		4200 * time.Millisecond:        "4.2s",
		4249 * time.Millisecond:        "4.2s",
		30 * time.Second:               "30s",
		-12800 * time.Millisecond:      "12.8s",
		90 * time.Second:               "90s",
		3*time.Minute + 12*time.Second: "3m12s",
		5 * time.Hour:                  "5h",
	} {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestTimeLeft(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	mt := func(d time.Duration) *metav1.MicroTime { m := metav1.NewMicroTime(now.Add(d)); return &m }
	for _, tc := range []struct {
		t    *metav1.MicroTime
		want string
	}{
		{nil, "-"},
		{mt(4200 * time.Millisecond), "4.2s"},
		{mt(0), "expired"},
		{mt(-time.Second), "expired"},
	} {
		if got := timeLeft(tc.t, now); got != tc.want {
			t.Errorf("timeLeft(%v) = %q, want %q", tc.t, got, tc.want)
		}
	}
	if got := formatTime(mt(-90*time.Second), now); got != "2030-01-02T03:02:35.000Z (90s ago)" {
		t.Errorf("formatTime = %q", got)
	}
}
