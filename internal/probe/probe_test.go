package probe

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestSchedule(t *testing.T) {
	s, m := time.Second, time.Minute
	for _, tc := range []struct {
		base, cap time.Duration
		want      []time.Duration
	}{
		{30 * s, 15 * m, []time.Duration{30 * s, m, 2 * m, 4 * m, 8 * m, 15 * m}},
		{m, m, []time.Duration{m}},
		{10 * s, 25 * s, []time.Duration{10 * s, 20 * s, 25 * s}},
		{s, 4 * s, []time.Duration{s, 2 * s, 4 * s}},
	} {
		if diff := cmp.Diff(tc.want, Schedule(tc.base, tc.cap)); diff != "" {
			t.Errorf("Schedule(%s, %s) (-want +got):\n%s", tc.base, tc.cap, diff)
		}
	}
	if n := len(Schedule(time.Nanosecond, 24*time.Hour)); n > maxLevels {
		t.Errorf("Schedule from 1ns to 24h has %d entries, want at most %d", n, maxLevels)
	}
}

func TestJittered(t *testing.T) {
	d := 30 * time.Second
	for _, tc := range []struct {
		jitter, u float64
		want      time.Duration
	}{
		{0.2, 0, d}, {0.2, 0.5, 33 * time.Second}, {0, 0.9, d}, {1, 0.5, 45 * time.Second},
	} {
		if got := Jittered(d, tc.jitter, tc.u); got != tc.want {
			t.Errorf("Jittered(%s, %v, %v) = %s, want %s", d, tc.jitter, tc.u, got, tc.want)
		}
	}
}

func TestNewTokenIsUnique(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		tok := NewToken()
		if len(tok) != 32 || seen[tok] {
			t.Fatalf("NewToken() = %q: wrong length or repeated", tok)
		}
		seen[tok] = true
	}
}
