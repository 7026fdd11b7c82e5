package quorum

import (
	"testing"
	"time"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

func TestEvidenceOf(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		o                    pb.Outcome
		retryAfter, deadline time.Duration
		countUnrecognised    bool
		want                 Evidence
	}{
		{pb.Outcome_OUTCOME_SUCCESS, 0, 0, false, Healthy},
		{pb.Outcome_OUTCOME_TRANSPORT, 0, 0, false, Failure},
		{pb.Outcome_OUTCOME_TIMEOUT, 0, 0, false, Failure},
		{pb.Outcome_OUTCOME_SERVER_ERROR, 0, 0, false, Failure},
		{pb.Outcome_OUTCOME_MALFORMED_OUTPUT, 0, 0, false, Failure},
		{pb.Outcome_OUTCOME_INVALID_ARGUMENT, 0, 0, false, Neutral},
		{pb.Outcome_OUTCOME_PERMISSION_DENIED, 0, 0, false, Neutral},
		{pb.Outcome_OUTCOME_NOT_FOUND, 0, 0, false, Neutral},
		{pb.Outcome_OUTCOME_CANCELED, 0, 0, false, Neutral},
		{pb.Outcome_OUTCOME_UNAUTHENTICATED, 0, 0, false, CredentialRejected},
		{pb.Outcome_OUTCOME_RATE_LIMITED, 5 * s, 10 * s, false, Throttled},
		{pb.Outcome_OUTCOME_RATE_LIMITED, 10 * s, 10 * s, false, Throttled},
		{pb.Outcome_OUTCOME_RATE_LIMITED, 11 * s, 10 * s, false, RateLimited},
		{pb.Outcome_OUTCOME_RATE_LIMITED, s, 0, false, RateLimited},
		{pb.Outcome_OUTCOME_UNRECOGNISED, 0, 0, false, Neutral},
		{pb.Outcome_OUTCOME_UNRECOGNISED, 0, 0, true, Failure},
		{pb.Outcome_OUTCOME_TRANSPORT, 0, 0, true, Failure},
		{pb.Outcome_OUTCOME_INVALID_ARGUMENT, 0, 0, true, Neutral},
	} {
		got, err := EvidenceOf(tc.o, tc.retryAfter, tc.deadline, tc.countUnrecognised)
		if err != nil || got != tc.want {
			t.Errorf("EvidenceOf(%v, %s, %s, %t) = %q, %v; want %q", tc.o, tc.retryAfter, tc.deadline, tc.countUnrecognised, got, err, tc.want)
		}
	}
	for _, o := range []pb.Outcome{pb.Outcome_OUTCOME_UNSPECIFIED, 42} {
		if _, err := EvidenceOf(o, 0, 0, true); err == nil {
			t.Errorf("EvidenceOf(%v) succeeded, want an error", o)
		}
	}
}

func TestJudge(t *testing.T) {
	rule := Rule{Threshold: 3, MinWorkers: 2, RateLimitTrips: 3}
	for _, tc := range []struct {
		name string
		run  Run
		want Verdict
	}{
		{"under the threshold", Run{Failures: 2, Workers: 2}, Hold},
		{"threshold from two workers", Run{Failures: 3, Workers: 2}, TripCount},
		{"threshold from one worker", Run{Failures: 3, Workers: 1}, Suspect},
		{"three 429s from two workers", Run{Failures: 3, Workers: 2, RateLimited: 3, RateLimitWorkers: 2}, TripRateLimit},
		// A timeout from w2, then three 429s from w1 (threshold 5): the
		// 429 run has one worker, the whole run has two but is short.
		{"429 quorum met only by another kind of failure", Run{Failures: 4, Workers: 2, RateLimited: 3, RateLimitWorkers: 1}, Hold},
		{"429s from one worker past the threshold", Run{Failures: 3, Workers: 2, RateLimited: 3, RateLimitWorkers: 1}, TripCount},
	} {
		r := rule
		if tc.name == "429 quorum met only by another kind of failure" {
			r.Threshold = 5
		}
		if got := Judge(tc.run, r); got != tc.want {
			t.Errorf("%s: Judge(%+v) = %v, want %v", tc.name, tc.run, got, tc.want)
		}
	}
	if got := Judge(Run{Failures: 1, Workers: 1}, Rule{Threshold: 1, MinWorkers: 1, RateLimitTrips: 1}); got != TripCount {
		t.Errorf("min_workers 1: Judge = %v, want TripCount (the quorum disabled)", got)
	}
}

// TestReached: a run at its limit trips from a quorum of distinct
// workers, isolates the one worker behind it all, and holds otherwise.
func TestReached(t *testing.T) {
	for _, tc := range []struct {
		min, workers int64
		want         Verdict
	}{
		{2, 0, Hold}, {2, 1, Suspect}, {2, 2, TripCount}, {2, 5, TripCount},
		{3, 2, Hold}, {1, 1, TripCount},
	} {
		r := Rule{MinWorkers: tc.min}
		if got := r.Reached(tc.workers); got != tc.want {
			t.Errorf("Rule{MinWorkers: %d}.Reached(%d) = %v, want %v", tc.min, tc.workers, got, tc.want)
		}
		if got, want := r.Quorate(tc.workers), tc.want == TripCount; got != want {
			t.Errorf("Rule{MinWorkers: %d}.Quorate(%d) = %v, want %v", tc.min, tc.workers, got, want)
		}
	}
}
