package daemon

import (
	"os"
	"runtime/debug"
	"strconv"
)

// GCPercent is the garbage collector's target the daemon runs with when
// the environment sets no GOGC, Go's own knob, which always wins
// (docs/configuration.md, the Go runtime).
const GCPercent = 400

// tuneGC sets GCPercent unless GOGC is set, and says which holds.
func tuneGC() string {
	if v := os.Getenv("GOGC"); v != "" {
		return v + " (GOGC)"
	}
	debug.SetGCPercent(GCPercent)
	return strconv.Itoa(GCPercent)
}
