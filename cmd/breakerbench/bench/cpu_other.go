//go:build !unix

package bench

import (
	"errors"
	"time"
)

// selfCPU is not measured without getrusage: the rows driven by the
// bench's own goroutines show no driver CPU there.
func selfCPU() (time.Duration, error) {
	return 0, errors.New("bench: no getrusage on this system")
}
