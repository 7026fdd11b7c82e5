package client

import (
	"testing"
	"time"

	"github.com/breakerd/breakerd/conformance"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestLocalBreaker walks the fallback's state machine on an injected clock.
func TestLocalBreaker(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	l := newLocalBreaker(LocalPolicy{}, clock.Now)
	const name = "payments"
	fail := Result{Outcome: pb.Outcome_OUTCOME_TIMEOUT, Latency: 30 * time.Second}
	allow := func(want pb.Decision) *Permit {
		t.Helper()
		p := l.allow(name)
		if p.Decision != want || !p.Degraded {
			t.Fatalf("allow: %v (degraded %v), want %v", p.Decision, p.Degraded, want)
		}
		return p
	}

	// --- closed: neutral outcomes never count; a success resets the run.
	for range 10 {
		l.record(name, allow(pb.Decision_DECISION_ALLOWED).Ticket, Result{Outcome: pb.Outcome_OUTCOME_INVALID_ARGUMENT})
	}
	for range 4 {
		l.record(name, allow(pb.Decision_DECISION_ALLOWED).Ticket, fail)
	}
	l.record(name, allow(pb.Decision_DECISION_ALLOWED).Ticket, Result{Outcome: pb.Outcome_OUTCOME_SUCCESS})
	// A 429 the caller could wait out does not count either.
	l.record(name, allow(pb.Decision_DECISION_ALLOWED).Ticket, Result{Outcome: pb.Outcome_OUTCOME_RATE_LIMITED, RetryAfter: time.Second, Deadline: 10 * time.Second})

	// --- closed -> open: the threshold (5) of consecutive counted failures.
	var stale *pb.Ticket
	for i := range 5 {
		p := allow(pb.Decision_DECISION_ALLOWED)
		if i == 0 {
			stale = p.Ticket
		}
		l.record(name, p.Ticket, fail)
	}
	p := allow(pb.Decision_DECISION_DENIED_OPEN)
	words, err := conformance.Fallback()
	if err != nil {
		t.Fatal(err)
	}
	if p.RetryAfter != 30*time.Second || p.Reason != words.Open.Reason || p.Denial.GetStatus() != words.Open.Status ||
		p.Denial.GetMayReturnAtMs() != clock.Now().Add(30*time.Second).UnixMilli() {
		t.Errorf("open: retry %s, reason %q", p.RetryAfter, p.Reason)
	}

	// --- open -> half-open: after the cooldown, one probe; others wait.
	clock.Advance(30 * time.Second)
	probe := allow(pb.Decision_DECISION_PROBE)
	allow(pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT)
	l.record(name, stale, Result{Outcome: pb.Outcome_OUTCOME_SUCCESS}) // a late report from before the trip
	allow(pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT)

	// --- half-open -> open: a failed probe doubles the cooldown.
	l.record(name, probe.Ticket, fail)
	if p := allow(pb.Decision_DECISION_DENIED_OPEN); p.RetryAfter != time.Minute || p.Reason != words.Open.Reason {
		t.Errorf("after a failed probe: retry %s, reason %q; want 1m", p.RetryAfter, p.Reason)
	}

	// --- a probe that never reports frees the slot after the probe timeout.
	clock.Advance(time.Minute)
	allow(pb.Decision_DECISION_PROBE)
	clock.Advance(30 * time.Second)
	probe = allow(pb.Decision_DECISION_PROBE)

	// --- half-open -> closed: the probe succeeds.
	l.record(name, probe.Ticket, Result{Outcome: pb.Outcome_OUTCOME_SUCCESS})
	allow(pb.Decision_DECISION_ALLOWED)

	// --- rate limits: 3 counted 429s open it for the Retry-After.
	for range 3 {
		l.record(name, allow(pb.Decision_DECISION_ALLOWED).Ticket,
			Result{Outcome: pb.Outcome_OUTCOME_RATE_LIMITED, RetryAfter: 5 * time.Minute, Deadline: 10 * time.Second})
	}
	if p := allow(pb.Decision_DECISION_DENIED_OPEN); p.RetryAfter != 5*time.Minute || p.Reason != words.Open.Reason {
		t.Errorf("after 3 429s: retry %s, reason %q; want 5m", p.RetryAfter, p.Reason)
	}

	// --- other breakers are separate; reset forgets everything.
	if p := l.allow("search"); p.Decision != pb.Decision_DECISION_ALLOWED {
		t.Errorf("another breaker: %v", p.Decision)
	}
	l.reset()
	allow(pb.Decision_DECISION_ALLOWED)
}
