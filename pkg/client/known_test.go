package client

import (
	"testing"
	"time"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// openEvent is a trip's event for name as the hub sends it: the state it
// read at asOf (ms), open since openedAt with its probe due at probeAt.
func openEvent(name string, openedAt, probeAt, asOf int64) *pb.Event {
	return &pb.Event{Kind: pb.EventKind_EVENT_KIND_TRANSITION, Breaker: name, State: &pb.BreakerState{
		Breaker: name, State: pb.State_STATE_OPEN, Generation: 1, OpenedAtMs: openedAt, NextProbeAtMs: probeAt,
		CooldownMs: probeAt - openedAt, AsOfMs: asOf}}
}

// TestKnownHoldsABreakerWhoseProbeIsDue: an event whose state says the
// probe is due (read once the cooldown had passed, as a late event is)
// keeps the breaker known, so the fallback lets one call of the client
// through, not every one: only breakerd grants the fleet's probe, and a
// client that cannot reach it must not open the breaker for all its
// callers.
func TestKnownHoldsABreakerWhoseProbeIsDue(t *testing.T) {
	now := time.UnixMilli(1_800_000_060_000)
	k := newKnown(time.Minute, 30*time.Second)
	k.event(openEvent("due", 1_800_000_000_000, 1_800_000_030_000, 1_800_000_030_001), now)
	if !k.due("due", now) {
		t.Fatal("a breaker whose probe is due is not known as due: the fallback would let every call through")
	}
	_, probe, held := k.fallback("due", now)
	if !probe || !held {
		t.Fatalf("the first call: probe %v, held %v; want the one call through (true, true)", probe, held)
	}
	for i := range 9 {
		p, probe, held := k.fallback("due", now)
		if probe || !held || p.Decision != pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT {
			t.Fatalf("call %d after the one through: %v (probe %v, held %v), want DENIED_PROBE_IN_FLIGHT", i+2, p.Decision, probe, held)
		}
	}
	// The one call failed: every call is denied for the cooldown, as
	// open, not let through as a probe.
	k.settle("due", pb.Outcome_OUTCOME_SERVER_ERROR, now, 30*time.Second)
	for i := range 10 {
		p, probe, held := k.fallback("due", now.Add(time.Duration(i)*time.Second))
		if probe || !held || p.Allowed() || p.Decision != pb.Decision_DECISION_DENIED_OPEN {
			t.Fatalf("a call %ds after the one failed: %v (probe %v, held %v), want DENIED_OPEN", i, p.Decision, probe, held)
		}
	}

	// Not due yet: held denied until the probe is due, on the client's
	// clock from when the event came.
	k.event(openEvent("open", 1_800_000_000_000, 1_800_000_030_000, 1_800_000_010_000), now)
	p, probe, held := k.fallback("open", now)
	if probe || !held || p.Decision != pb.Decision_DECISION_DENIED_OPEN || p.RetryAfter != 20*time.Second {
		t.Fatalf("an open breaker not due: %v retry %v (probe %v, held %v), want DENIED_OPEN for 20s", p.Decision, p.RetryAfter, probe, held)
	}

	// Closed again: forgotten, the local breaker decides.
	k.event(&pb.Event{Kind: pb.EventKind_EVENT_KIND_TRANSITION, Breaker: "open",
		State: &pb.BreakerState{Breaker: "open", State: pb.State_STATE_CLOSED, Generation: 2, AsOfMs: 1_800_000_031_000}}, now)
	if _, _, held := k.fallback("open", now); held {
		t.Error("a closed breaker's event left it held")
	}
}
