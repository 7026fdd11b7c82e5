package daemontest

import (
	"testing"
	"time"
)

// Eventually polls cond every 5 ms until it holds. It waits on the
// condition, not on a guess of how fast the machine is: the only bound is
// the test binary's own -timeout, and t fails (naming what) a little before
// it so that the report says what never happened rather than dumping every
// goroutine. Without a deadline it waits as long as it takes.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	var stop <-chan time.Time
	if d, ok := deadline(t); ok {
		// Keep a tenth of what is left (at most 30 s) to report and clean up.
		left := time.Until(d)
		timer := time.NewTimer(left - min(left/10, 30*time.Second))
		defer timer.Stop()
		stop = timer.C
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-stop:
			t.Fatalf("%s never happened before the test's deadline", what)
		case <-tick.C:
		}
	}
}

func deadline(t testing.TB) (time.Time, bool) {
	if dt, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		return dt.Deadline()
	}
	return time.Time{}, false
}

// HealthInterval is the health interval of a daemon a test runs through
// the real assembly when the test is not about health: on a single Redis
// a health check that outlives its interval sends the node to memory at
// once, and on a host busy with -race builds a healthy check can take
// most of a second.
const HealthInterval = 2 * time.Second
