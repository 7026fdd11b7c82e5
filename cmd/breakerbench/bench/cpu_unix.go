//go:build unix

package bench

import (
	"syscall"
	"time"
)

// selfCPU is the bench's own user plus system CPU time so far, to the
// microsecond (getrusage): procCPU's clock ticks could read a short timed
// run on a busy host as none.
func selfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
