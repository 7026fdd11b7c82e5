package main

import (
	"encoding/json"
	"strings"
	"testing"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// The columns follow the breaker's machine: a window breaker tripped in
// shadow mode (enforced closed) shows the failures that tripped it, not
// its emptied window, and no slow run.
func TestCellsFollowTheShadowMachine(t *testing.T) {
	t.Parallel()
	s := &pb.BreakerState{State: pb.State_STATE_CLOSED, Shadow: true, ShadowState: pb.State_STATE_OPEN,
		WindowMode: true, Failures: 5, SlowCallMs: 2000}
	if got := failuresCell(s); got != "5" {
		t.Errorf("failuresCell(shadow-open window breaker) = %q, want the 5 failures that tripped it", got)
	}
	if got := slowCell(s); got != "-" {
		t.Errorf("slowCell(shadow-open) = %q, want -", got)
	}
	s.ShadowState, s.WindowCalls, s.WindowFailures, s.SlowCalls = pb.State_STATE_CLOSED, 9, 2, 1
	if got := failuresCell(s); got != "2/9 in window" {
		t.Errorf("failuresCell(shadow-closed window breaker) = %q, want 2/9 in window", got)
	}
	if got := slowCell(s); got != "1 over 2s" {
		t.Errorf("slowCell(shadow-closed) = %q, want 1 over 2s", got)
	}
}

// --json gives the counting fields for each breaker, zeros included, and
// the group's fields for each breaker in a group.
func TestJSONKeepsZeros(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		st       *pb.BreakerState
		want     []string
		wantNone []string
	}{
		{&pb.BreakerState{Breaker: "a"},
			[]string{`"window_mode":false`, `"window_calls":0`, `"window_failures":0`, `"slow_calls":0`, `"slow_call_ms":0`},
			[]string{`"group"`}},
		{&pb.BreakerState{Breaker: "b", Group: "g", MaxOpenFraction: 0.5, GroupKnown: 3},
			[]string{`"group":"g"`, `"group_known":3`, `"group_open":0`, `"open_fraction_capped":false`}, nil},
	} {
		b, err := json.Marshal(viewState(tc.st))
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range tc.want {
			if !strings.Contains(string(b), w) {
				t.Errorf("%s lacks %s", b, w)
			}
		}
		for _, w := range tc.wantNone {
			if strings.Contains(string(b), w) {
				t.Errorf("%s has %s", b, w)
			}
		}
	}
}

func TestDue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		at, asOf int64
		want     string
	}{
		{0, 5000, "-"},
		{35000, 5000, "in 30s"},
		{5000, 5000, "due"},
		{5000, 5500, "due"},
		{5000, 90000, "due for 1m25s"},
	} {
		if got := due(tc.at, tc.asOf); got != tc.want {
			t.Errorf("due(%d, %d) = %q, want %q", tc.at, tc.asOf, got, tc.want)
		}
	}
}
