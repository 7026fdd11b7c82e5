package replay

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestReplayRecoveryCheck: arm 6 (arm 4 with a 30 s recovery check of the
// vendor's status endpoint) after a 30-minute outage: half-open within
// 35 s of the recovery, by a check or its cooldown; the first successful
// probe once a run arrives after that; at most 2 status requests in any
// minute, fleet-wide, as the vendor counted them.
func TestReplayRecoveryCheck(t *testing.T) {
	cfg := Default()
	cfg.Runs, cfg.Outage, cfg.RecoveryCheck = 40, 30*time.Minute, 30*time.Second
	cfg.sweep = true
	rep, err := Replay(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := rep.Print(&out); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out.String())
	for _, w := range rep.Warnings {
		t.Errorf("warning %q", w)
	}
	if err := rep.Err(); err != nil { // breakerd's savings counts among others
		t.Error(err)
	}
	if len(rep.Rows) != 2 || rep.Rows[0].Arm != ArmFleetRemove || rep.Rows[1].Arm != ArmFleetRemoveCheck {
		t.Fatalf("rows %v, want arms 4 and 6", rep.Rows)
	}
	if rep.Rows[0].Recovery.Checked {
		t.Error("arm 4 reports recovery checks")
	}
	rec := rep.Rows[1].Recovery
	if !rec.Checked || !rec.HalfOpened || rec.HalfOpenAfter > HalfOpenTarget {
		t.Errorf("arm 6: half-open %v after %s; want within %s", rec.HalfOpened, rec.HalfOpenAfter, HalfOpenTarget)
	}
	// Checks from the trip to the close: at most one an interval.
	open := cfg.Outage + rec.After - rep.Rows[1].Wire.TripAt
	if rec.CheckRequests == 0 || rec.CheckRequests > int(open/cfg.RecoveryCheck)+1 || rec.MaxPerMinute > MaxChecksPerMinute {
		t.Errorf("arm 6: %d status requests over %s open, at most %d in a minute; want one per %s at most",
			rec.CheckRequests, open, rec.MaxPerMinute, cfg.RecoveryCheck)
	}
	// The probe is the first run's search after the breaker half-opened.
	bound := rec.HalfOpenAfter + cfg.interval() + time.Duration(cfg.SearchStep)*cfg.StepTime + cfg.CallTime
	if !rec.Closed || rec.After > bound {
		t.Errorf("arm 6: first successful probe %s after recovery (closed %v), want within %s", rec.After, rec.Closed, bound)
	}
}

func TestMaxInWindow(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		ts   []time.Duration
		want int
	}{
		{nil, 0},
		{[]time.Duration{0}, 1},
		{[]time.Duration{0, 30 * s, 60 * s, 90 * s}, 2},
		{[]time.Duration{0, 30 * s, 59 * s}, 3},
	} {
		if got := maxInWindow(tc.ts, time.Minute); got != tc.want {
			t.Errorf("maxInWindow(%v) = %d, want %d", tc.ts, got, tc.want)
		}
	}
}
