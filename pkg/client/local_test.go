package client

import (
	"strings"
	"testing"
	"time"

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
	if p.RetryAfter != 30*time.Second || !strings.Contains(p.Reason, "5 consecutive failures from 1 worker, last: timeout after 30s (local breaker: breakerd unreachable)") {
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
	if p := allow(pb.Decision_DECISION_DENIED_OPEN); p.RetryAfter != time.Minute || !strings.Contains(p.Reason, "the probe failed") {
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
	if p := allow(pb.Decision_DECISION_DENIED_OPEN); p.RetryAfter != 5*time.Minute || !strings.Contains(p.Reason, "rate limited: 3 consecutive 429s") {
		t.Errorf("after 3 429s: retry %s, reason %q; want 5m", p.RetryAfter, p.Reason)
	}

	// --- other breakers are separate; reset forgets everything.
	if p := l.allow("search"); p.Decision != pb.Decision_DECISION_ALLOWED {
		t.Errorf("another breaker: %v", p.Decision)
	}
	l.reset()
	allow(pb.Decision_DECISION_ALLOWED)
}
