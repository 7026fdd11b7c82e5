// Package quorum owns the trip rule: what a tool call's outcome says about
// its dependency (EvidenceOf), and when a run of counted failures is enough
// to open the circuit for the whole fleet (Judge): the threshold reached
// AND the failures came from at least MinWorkers distinct workers, each
// run (all counted failures; 429s beyond the caller's deadline) judged
// over its own workers. A lone worker past the threshold is a suspect,
// not a trip.
//
// The distinct-workers rule is stated once (Rule.Quorate, Rule.Reached)
// and every run is judged by it: the consecutive failure run and its 429s
// (Judge), a window's failures and slow calls, and pause votes, all in
// internal/breaker. The scripts' one copy is quorum() in
// internal/store/scripts/lib.lua.
//
// internal/breaker composes this rule into the state machine; the record
// script (internal/store/scripts/record.lua) executes the same rule on
// Redis and is proven against it by the differential test.
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
	// Failure is a counted failure: transport, timeout, 5xx, malformed
	// output, and an unrecognised error under a policy that counts them.
	Failure Evidence = "F"
	// RateLimited is a 429 whose Retry-After exceeds the caller's deadline:
	// counted, and a run of them opens the circuit for the Retry-After.
	RateLimited Evidence = "R"
	// Throttled is a 429 the caller can wait out within its deadline: not
	// counted, but its Retry-After may push an open circuit's probe later.
	Throttled Evidence = "T"
	// Neutral outcomes are the caller's problem (4xx, 403, 404), its
	// cancellation, or an unrecognised error under a policy that does not
	// count them: never counted.
	Neutral Evidence = "N"
	// CredentialRejected (401) is never counted; it raises an alert.
	CredentialRejected Evidence = "U"
	// QuotaExhausted (402, or a 429 saying the account's quota is used
	// up) is never counted: every worker gets it until a person acts. It
	// raises an alert and votes to pause, as a rejected credential that
	// had worked does.
	QuotaExhausted Evidence = "Q"
)

// Counted reports whether the evidence extends the failure run.
func (e Evidence) Counted() bool { return e == Failure || e == RateLimited }

// EvidenceOf weighs an outcome: what it says about the dependency.
// retryAfter and deadline matter only for RATE_LIMITED: the 429 counts
// when retryAfter > deadline, i.e. when the caller cannot wait it out (a
// zero deadline means no time left). countUnrecognised is the policy's
// count_unrecognised: OUTCOME_UNRECOGNISED is a Failure with it, Neutral
// without. It returns an error for OUTCOME_UNSPECIFIED or an unknown
// value.
func EvidenceOf(o pb.Outcome, retryAfter, deadline time.Duration, countUnrecognised bool) (Evidence, error) {
	switch o {
	case pb.Outcome_OUTCOME_SUCCESS:
		return Healthy, nil
	case pb.Outcome_OUTCOME_TRANSPORT, pb.Outcome_OUTCOME_TIMEOUT,
		pb.Outcome_OUTCOME_SERVER_ERROR, pb.Outcome_OUTCOME_MALFORMED_OUTPUT:
		return Failure, nil
	case pb.Outcome_OUTCOME_INVALID_ARGUMENT, pb.Outcome_OUTCOME_PERMISSION_DENIED,
		pb.Outcome_OUTCOME_NOT_FOUND, pb.Outcome_OUTCOME_CANCELED:
		return Neutral, nil
	case pb.Outcome_OUTCOME_UNRECOGNISED:
		if countUnrecognised {
			return Failure, nil
		}
		return Neutral, nil
	case pb.Outcome_OUTCOME_RATE_LIMITED:
		if retryAfter > deadline {
			return RateLimited, nil
		}
		return Throttled, nil
	case pb.Outcome_OUTCOME_UNAUTHENTICATED:
		return CredentialRejected, nil
	case pb.Outcome_OUTCOME_QUOTA_EXHAUSTED:
		return QuotaExhausted, nil
	}
	return "", fmt.Errorf("quorum: outcome %v is not one of the defined outcomes", o)
}

// Rule is the trip rule's tunables (a policy's threshold, min_workers and
// rate_limit_trips).
type Rule struct {
	// Threshold is how many consecutive counted failures trip.
	Threshold int64
	// MinWorkers is the quorum: distinct workers a run must come from.
	MinWorkers int64
	// RateLimitTrips is how many consecutive counted 429s trip.
	RateLimitTrips int64
}

// Run is a closed breaker's current failure run.
type Run struct {
	// Failures counts consecutive counted failures (429s included).
	Failures int64
	// Workers counts the distinct workers behind Failures.
	Workers int64
	// RateLimited counts the consecutive counted 429s ending the run.
	RateLimited int64
	// RateLimitWorkers counts the distinct workers behind RateLimited.
	RateLimitWorkers int64
}

// Verdict is what Judge decides about a run.
type Verdict int

// The verdicts.
const (
	// Hold: the circuit stays closed.
	Hold Verdict = iota
	// TripRateLimit: RateLimitTrips consecutive counted 429s from
	// MinWorkers workers; the circuit opens for at least the Retry-After.
	TripRateLimit
	// TripCount: Threshold consecutive counted failures from MinWorkers
	// workers.
	TripCount
	// Suspect: the threshold is reached but every failure came from one
	// worker (and the quorum wants more): that worker is isolated, the
	// fleet stays closed.
	Suspect
)

// MaxWorkers is the fewest distinct workers a run keeps before it stops
// adding new ones (Rule.Keep): the bound on a run's worker sets in Redis,
// so that one token acting as many worker ids (a glob) cannot grow a set
// without end, as it could under a pin closed, which counts and never
// trips.
const MaxWorkers = 64

// Keep is how many distinct workers a run keeps: MaxWorkers, or the quorum
// when it is larger. A worker past it still counts its failure (or slow
// call, or vote) but is not added. No verdict changes: a run keeping Keep
// workers is quorate, and one worker is one worker. Only the
// distinct_workers a run reports stops at Keep.
func (r Rule) Keep() int64 { return max(r.MinWorkers, MaxWorkers) }

// Quorate reports whether workers distinct workers make the quorum: at
// least MinWorkers. It is the one distinct-workers rule; every run (a
// failure run, its counted 429s, a window's failures, slow calls, pause
// votes) is judged by it over its own workers.
func (r Rule) Quorate(workers int64) bool { return workers >= r.MinWorkers }

// Reached judges a run that has reached its limit (the threshold, a
// window's failure rate, the slow-call limit) by the distinct workers
// behind it: TripCount from a quorum, Suspect when one worker is behind
// it all (and the quorum wants more), Hold otherwise. The consecutive,
// window and slow-call rules of internal/breaker all ask it.
func (r Rule) Reached(workers int64) Verdict {
	switch {
	case r.Quorate(workers):
		return TripCount
	case workers == 1:
		return Suspect
	}
	return Hold
}

// Judge applies the trip rule to a run. The rate-limit run is judged
// first (its trip honours the vendor's Retry-After), each run over its
// own distinct workers: three 429s from one worker after another worker's
// timeout do not make a rate-limit quorum.
func Judge(r Run, rule Rule) Verdict {
	switch {
	case r.RateLimited >= rule.RateLimitTrips && rule.Quorate(r.RateLimitWorkers):
		return TripRateLimit
	case r.Failures >= rule.Threshold:
		return rule.Reached(r.Workers)
	}
	return Hold
}
