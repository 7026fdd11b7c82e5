package breaker

import (
	"testing"

	"github.com/breakerd/breakerd/internal/quorum"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestRecoverHalfOpensAnOpenBreaker: a successful recovery check moves an
// open breaker to half-open at once (one event), the next Allow is the
// probe, and a failed probe backs off from the level the breaker had: the
// check moved nothing in the schedule.
func TestRecoverHalfOpensAnOpenBreaker(t *testing.T) {
	m := &machine{t: t, tb: NewTable(), now: 1_000_000}
	m.record("w1", quorum.Failure, 0)
	m.record("w2", quorum.Failure, 0)
	_, v, _ := m.record("w2", quorum.Failure, 0)
	if v.State != "open" {
		t.Fatalf("setup: %s, want open", v.State)
	}
	gen := v.Gen

	// A check started before the breaker moved is stale: nothing changes.
	r, v, ev := m.tb.Apply("search", params, Call{Op: OpRecover, Actor: "d1", Ticket: Ticket{Gen: gen - 1}}, m.now+1000)
	if r.Note != NoteRecoveryStale || r.Wrote || v.State != "open" || len(ev) != 0 {
		t.Fatalf("stale check: %+v %s %v; want nothing changed", r, v.State, ev)
	}

	m.now += 1000
	r, v, ev = m.tb.Apply("search", params, Call{Op: OpRecover, Actor: "d1", Ticket: Ticket{Gen: gen}}, m.now)
	if r.Note != NoteRecovered || !r.Wrote || v.State != "half_open" || v.Gen != gen+1 || v.Level != 0 {
		t.Fatalf("check succeeded: %+v %+v; want half_open at gen %d, level 0", r, v, gen+1)
	}
	if len(ev) != 1 || ev[0].Kind != "transition" || ev[0].From != "open" || ev[0].To != "half_open" ||
		ev[0].Cause != CauseRecoveryCheck || ev[0].Actor != "d1" || ev[0].At != m.now {
		t.Fatalf("events %+v; want one open -> half_open (recovery_check) by d1", ev)
	}
	// A second success finds it half-open: nothing.
	if r, _, ev := m.tb.Apply("search", params, Call{Op: OpRecover, Actor: "d2", Ticket: Ticket{Gen: gen}}, m.now); r.Wrote || len(ev) != 0 {
		t.Fatalf("second check: %+v %v; want nothing", r, ev)
	}
	if r, _ := m.allow("w1"); r.Decision != pb.Decision_DECISION_PROBE {
		t.Fatalf("next Allow = %v, want PROBE", r.Decision)
	}
	if r, _ := m.allow("w2"); r.Decision != pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT {
		t.Fatalf("the Allow after = %v, want DENIED_PROBE_IN_FLIGHT", r.Decision)
	}
	st, _ := m.tb.State("search", m.now)
	_, v, _ = m.tb.Apply("search", params, Call{Op: OpRecord, Actor: "w1", Evidence: quorum.Failure,
		Ticket: Ticket{Gen: st.Gen, Lease: st.Lease}, Last: "timeout"}, m.now)
	if v.State != "open" || v.Level != 1 || v.Cooldown != 20000 {
		t.Fatalf("failed probe after the check: %+v; want open, level 1, 20 s", v)
	}
}

// TestRecoverLeavesPinsAndPauses: a pinned or paused breaker is never
// moved by a check.
func TestRecoverLeavesPinsAndPauses(t *testing.T) {
	for _, s := range []State{
		{Phase: Open, Gen: 3, Force: "open", ProbeAt: 2_000_000},
		{Phase: Paused, Gen: 3, PauseUntil: 9_000_000},
		{Phase: HalfOpen, Gen: 3},
		{Gen: 3},
	} {
		got, r, ev := Apply(params, s, Call{Op: OpRecover, Actor: "d1", Ticket: Ticket{Gen: 3}}, 1_000_000)
		if r.Wrote || len(ev) != 0 || got.Phase != s.Phase || got.Gen != s.Gen {
			t.Errorf("Recover on %+v: %+v %+v %v; want nothing changed", s, got, r, ev)
		}
	}
}
