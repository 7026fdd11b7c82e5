// Package quorum decides what a tool call's outcome says about its
// dependency's health: whether it counts toward a trip, resets the count,
// or says nothing. The trip rule itself (threshold reached AND at least
// min_workers distinct workers) runs inside the record script, next to the
// write it guards; see internal/store/scripts/record.lua.
package quorum

import (
	"fmt"
	"time"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Evidence is what one outcome says about the dependency. Its value is the
// one-letter code the record script reads.
type Evidence string

// The kinds of evidence.
const (
	// Healthy (SUCCESS) resets the failure run.
	Healthy Evidence = "S"
	// Failure is a counted failure: transport, timeout, 5xx, malformed output.
	Failure Evidence = "F"
	// RateLimited is a 429 whose Retry-After exceeds the caller's deadline:
	// counted, and a run of them opens the circuit for the Retry-After.
	RateLimited Evidence = "R"
	// Throttled is a 429 the caller can wait out within its deadline: not
	// counted, but its Retry-After may push an open circuit's probe later.
	Throttled Evidence = "T"
	// Neutral outcomes are the caller's problem (4xx, 403, 404) or its
	// cancellation: never counted.
	Neutral Evidence = "N"
	// CredentialRejected (401) is never counted; it raises an alert.
	CredentialRejected Evidence = "U"
)

// Classify maps an outcome to its evidence. retryAfter and deadline matter
// only for RATE_LIMITED: the 429 counts when retryAfter > deadline, i.e.
// when the caller cannot wait it out (a zero deadline means no time left).
// It returns an error for OUTCOME_UNSPECIFIED or an unknown value.
func Classify(o pb.Outcome, retryAfter, deadline time.Duration) (Evidence, error) {
	switch o {
	case pb.Outcome_OUTCOME_SUCCESS:
		return Healthy, nil
	case pb.Outcome_OUTCOME_TRANSPORT, pb.Outcome_OUTCOME_TIMEOUT,
		pb.Outcome_OUTCOME_SERVER_ERROR, pb.Outcome_OUTCOME_MALFORMED_OUTPUT:
		return Failure, nil
	case pb.Outcome_OUTCOME_INVALID_ARGUMENT, pb.Outcome_OUTCOME_PERMISSION_DENIED,
		pb.Outcome_OUTCOME_NOT_FOUND, pb.Outcome_OUTCOME_CANCELED:
		return Neutral, nil
	case pb.Outcome_OUTCOME_RATE_LIMITED:
		if retryAfter > deadline {
			return RateLimited, nil
		}
		return Throttled, nil
	case pb.Outcome_OUTCOME_UNAUTHENTICATED:
		return CredentialRejected, nil
	}
	return "", fmt.Errorf("quorum: outcome %v is not one of the defined outcomes", o)
}

// Describe says what failed in plain words, for the reason a denied caller
// (and the model behind it) reads: "timeout after 30s", "server error
// (5xx): HTTP 503". message is the caller's own short description.
func Describe(o pb.Outcome, latency, retryAfter, deadline time.Duration, message string) string {
	var d string
	switch o {
	case pb.Outcome_OUTCOME_TIMEOUT:
		d = "timeout"
		if latency > 0 {
			d += " after " + Human(latency)
		}
	case pb.Outcome_OUTCOME_TRANSPORT:
		d = "transport error"
	case pb.Outcome_OUTCOME_SERVER_ERROR:
		d = "server error (5xx)"
	case pb.Outcome_OUTCOME_MALFORMED_OUTPUT:
		d = "malformed output"
	case pb.Outcome_OUTCOME_RATE_LIMITED:
		d = fmt.Sprintf("rate limited (429), Retry-After %s beyond a %s deadline", Human(retryAfter), Human(deadline))
	default:
		d = o.String()
	}
	if message != "" {
		d += ": " + message
	}
	return d
}

// Human renders a duration the way people say it: 30s, 2m, 1.5s, 250ms.
func Human(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	case d < time.Second:
		return fmt.Sprintf("%dms", d/time.Millisecond)
	}
	return fmt.Sprintf("%.1fs", d.Seconds())
}
