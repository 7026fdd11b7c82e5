package store_test

import (
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// The rule faults the state machine settles, with the exact
// values, on miniredis and on the real Redis. Policy for all: threshold 3,
// min_workers 2, rate_limit_trips 3, cooldown 10s capped at 80s, no
// jitter, probe timeout 5s; deadline 0 unless said.
func faultPolicy() policy.Policy {
	return policy.Policy{Threshold: 3, MinWorkers: 2, RateLimitTrips: 3, CooldownBase: 10 * time.Second,
		CooldownCap: 80 * time.Second, ProbeTimeout: 5 * time.Second}
}

// A trip caused by a counted 429 keeps its Retry-After: every transition
// into open lasts max(the cooldown, the Retry-After of its outcome).
func TestFaultTripKeepsRetryAfter(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{Policies: policy.NewSet(faultPolicy())})
		name := b.Breaker("search")
		f.call(name, "w1", pb.Outcome_OUTCOME_TIMEOUT)
		f.call(name, "w2", pb.Outcome_OUTCOME_SERVER_ERROR)
		r := f.call(name, "w1", pb.Outcome_OUTCOME_RATE_LIMITED, rateLimited(time.Minute, 0))
		if r.State.State != pb.State_STATE_OPEN {
			t.Fatalf("after TIMEOUT, 5xx, 429: %v, want OPEN", r.State.State)
		}
		if got := r.State.NextProbeAtMs - r.State.OpenedAtMs; got != 60000 {
			t.Errorf("next probe %d ms after the trip, want 60000 (the Retry-After, not the 10 s cooldown)", got)
		}
		f.Advance(59999 * time.Millisecond)
		if a := f.allow(name, "w2"); a.Decision != pb.Decision_DECISION_DENIED_OPEN || a.RetryAfterMs != 1 {
			t.Errorf("Allow at 59.999 s = %v retry %d ms, want DENIED_OPEN retry 1 ms", a.Decision, a.RetryAfterMs)
		}
		f.Advance(time.Millisecond)
		if a := f.allow(name, "w2"); a.Decision != pb.Decision_DECISION_PROBE {
			t.Errorf("Allow at 60 s = %v, want PROBE", a.Decision)
		}
	})
}

// The rate-limit trip meets its own quorum: three 429s from one worker
// after another worker's timeout do not open the circuit.
func TestFaultRateLimitQuorum(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		p := faultPolicy()
		p.Threshold = 5
		f := newFixture(t, b, store.Options{Policies: policy.NewSet(p)})
		name := b.Breaker("search")
		f.call(name, "w2", pb.Outcome_OUTCOME_TIMEOUT)
		var r *pb.RecordResponse
		for range 3 {
			r = f.call(name, "w1", pb.Outcome_OUTCOME_RATE_LIMITED, rateLimited(time.Minute, 0))
		}
		if r.State.State != pb.State_STATE_CLOSED || r.State.Failures != 4 || r.State.DistinctWorkers != 2 {
			t.Errorf("after w2 TIMEOUT and 3×429 from w1: %v, %d failures from %d workers; want CLOSED, 4 from 2",
				r.State.State, r.State.Failures, r.State.DistinctWorkers)
		}
		// A 429 from w2 gives the run of 429s its second worker: four in a
		// row from two workers trip, for the Retry-After.
		if r := f.call(name, "w2", pb.Outcome_OUTCOME_RATE_LIMITED, rateLimited(time.Minute, 0)); r.State.State != pb.State_STATE_OPEN ||
			r.State.NextProbeAtMs-r.State.OpenedAtMs != 60000 || r.State.Reason == "" {
			t.Errorf("after a 429 from w2: %v, next probe in %d ms (%q); want OPEN for 60000 ms",
				r.State.State, r.State.NextProbeAtMs-r.State.OpenedAtMs, r.State.Reason)
		}
	})
}

// A probe answered by a 429 the caller could wait out leaves no verdict:
// still half-open at the same generation and level, the lease released,
// and no probe before the Retry-After.
func TestFaultThrottledProbe(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{Policies: policy.NewSet(faultPolicy())})
		name := b.Breaker("search")
		f.call(name, "w1", pb.Outcome_OUTCOME_TIMEOUT)
		f.call(name, "w2", pb.Outcome_OUTCOME_TIMEOUT)
		f.call(name, "w1", pb.Outcome_OUTCOME_TIMEOUT)
		f.Advance(10 * time.Second)
		probe := f.allow(name, "w1")
		if probe.Decision != pb.Decision_DECISION_PROBE {
			t.Fatalf("Allow after the cooldown = %v, want PROBE", probe.Decision)
		}
		r := f.record(name, "w1", probe.Ticket, pb.Outcome_OUTCOME_RATE_LIMITED, rateLimited(3*time.Second, 10*time.Second))
		if r.Counted || r.State.State != pb.State_STATE_HALF_OPEN || r.State.Generation != probe.Ticket.Generation ||
			r.State.FailedProbes != 0 || r.State.ProbeInFlight {
			t.Fatalf("after a throttled probe: counted %v, %v gen %d level %d in flight %v; want not counted, HALF_OPEN gen %d level 0, lease released",
				r.Counted, r.State.State, r.State.Generation, r.State.FailedProbes, r.State.ProbeInFlight, probe.Ticket.Generation)
		}
		if a := f.allow(name, "w2"); a.Decision != pb.Decision_DECISION_DENIED_OPEN || a.RetryAfterMs != 3000 {
			t.Errorf("Allow right after = %v retry %d ms, want DENIED_OPEN retry 3000 ms", a.Decision, a.RetryAfterMs)
		}
		f.Advance(2999 * time.Millisecond)
		if a := f.allow(name, "w2"); a.Decision != pb.Decision_DECISION_DENIED_OPEN || a.RetryAfterMs != 1 {
			t.Errorf("Allow at 2.999 s = %v retry %d ms, want DENIED_OPEN retry 1 ms", a.Decision, a.RetryAfterMs)
		}
		f.Advance(time.Millisecond)
		if a := f.allow(name, "w2"); a.Decision != pb.Decision_DECISION_PROBE || a.Ticket.Generation != probe.Ticket.Generation {
			t.Errorf("Allow at 3 s = %v gen %d, want PROBE at gen %d", a.Decision, a.Ticket.Generation, probe.Ticket.Generation)
		}
	})
}
