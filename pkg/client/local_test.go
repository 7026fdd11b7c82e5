package client

import (
	"strings"
	"testing"
	"time"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestLocalBreaker walks the fallback's state machine on an injected clock.
func TestLocalBreaker(t *testing.T) {
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
	if p.RetryAfter != 30*time.Second || !strings.Contains(p.Reason, "5 consecutive failures on this worker, last: timeout after 30s") {
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

func TestLocalCooldownIsCapped(t *testing.T) {
	l := newLocalBreaker(LocalPolicy{CooldownBase: time.Minute, CooldownCap: 5 * time.Minute}, time.Now)
	var got []time.Duration
	for level := range 5 {
		got = append(got, l.cooldown(level))
	}
	want := []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 5 * time.Minute, 5 * time.Minute}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("cooldowns %v, want %v", got, want)
		}
	}
}

func TestHuman(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 250 * time.Millisecond: "250ms", 1500 * time.Millisecond: "1.5s", 45 * time.Second: "45s",
		59600 * time.Millisecond: "1m", 2 * time.Minute: "2m", 150 * time.Second: "2m30s",
		65 * time.Minute: "1h5m", 2 * time.Hour: "2h",
	} {
		if got := human(d); got != want {
			t.Errorf("human(%s) = %q, want %q", d, got, want)
		}
	}
}
