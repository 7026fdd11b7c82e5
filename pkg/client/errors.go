package client

import (
	"fmt"
	"time"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// CircuitOpenError is returned, without calling the dependency, when its
// circuit is open or forced open.
type CircuitOpenError struct {
	Breaker string
	// Forced is true when an operator forced the circuit open.
	Forced bool
	// Reason says why in plain words.
	Reason string
	// RetryAfter is how long until a probe is due (0 when forced with no
	// end).
	RetryAfter time.Duration
	// Alternatives are routes the breaker's policy offers instead.
	Alternatives []string
}

func (e *CircuitOpenError) Error() string {
	return fmt.Sprintf("circuit open for %s: %s (retry after %s)", e.Breaker, e.Reason, e.RetryAfter)
}

// ProbeInFlightError is returned, without calling the dependency, while
// another caller's probe is testing it.
type ProbeInFlightError struct {
	Breaker    string
	Reason     string
	RetryAfter time.Duration
}

func (e *ProbeInFlightError) Error() string {
	return fmt.Sprintf("probe in flight for %s: %s (retry after %s)", e.Breaker, e.Reason, e.RetryAfter)
}

// DeniedError returns the typed error for a denied permit, or nil when p
// allows the call.
func DeniedError(p *Permit) error {
	switch p.Decision {
	case pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT:
		return &ProbeInFlightError{Breaker: p.Breaker, Reason: p.Reason, RetryAfter: p.RetryAfter}
	case pb.Decision_DECISION_DENIED_OPEN, pb.Decision_DECISION_DENIED_FORCED_OPEN:
		return &CircuitOpenError{
			Breaker: p.Breaker, Forced: p.Decision == pb.Decision_DECISION_DENIED_FORCED_OPEN,
			Reason: p.Reason, RetryAfter: p.RetryAfter, Alternatives: p.State.GetAlternatives(),
		}
	}
	return nil
}
