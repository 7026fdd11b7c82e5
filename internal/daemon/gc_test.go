package daemon

import (
	"runtime/debug"
	"testing"
)

// TestGCPercentUnlessGOGC: the daemon runs the collector at GCPercent,
// unless the environment's GOGC says otherwise, which it leaves alone.
func TestGCPercentUnlessGOGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	t.Setenv("GOGC", "")
	if got := tuneGC(); got != "400" {
		t.Errorf("tuneGC() without GOGC = %q, want 400", got)
	}
	if p := debug.SetGCPercent(100); p != GCPercent {
		t.Errorf("GC percent without GOGC = %d, want %d", p, GCPercent)
	}
	t.Setenv("GOGC", "150")
	if got := tuneGC(); got != "150 (GOGC)" {
		t.Errorf("tuneGC() with GOGC=150 = %q, want the environment's", got)
	}
	if p := debug.SetGCPercent(100); p != 100 {
		t.Errorf("GC percent with GOGC set = %d, want it untouched (100)", p)
	}
}
