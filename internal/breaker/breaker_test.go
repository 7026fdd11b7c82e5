package breaker

import (
	"fmt"
	"sync"
	"testing"

	"github.com/breakerd/breakerd/internal/quorum"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

var params = Params{Rule: quorum.Rule{Threshold: 3, MinWorkers: 2, RateLimitTrips: 3},
	CooldownBase: 10000, CooldownCap: 80000, ProbeTimeout: 5000, Retention: 85000}

// machine walks one breaker through Table on a clock the test moves.
type machine struct {
	t   *testing.T
	tb  *Table
	now int64
}

func (m *machine) allow(worker string) (Result, View) {
	m.t.Helper()
	r, v, _ := m.tb.Apply("search", params, Call{Op: OpAllow, Actor: worker, Token: "tok-" + worker}, m.now)
	return r, v
}

func (m *machine) record(worker string, ev quorum.Evidence, retryAfter int64) (Result, View, []Event) {
	m.t.Helper()
	_, v, _ := m.tb.Apply("search", params, Call{Op: OpAllow, Actor: worker, Token: "tok-" + worker}, m.now)
	st, _ := m.tb.State("search", m.now)
	return m.tb.Apply("search", params, Call{Op: OpRecord, Actor: worker, Evidence: ev, RetryAfter: retryAfter,
		Ticket: Ticket{Gen: v.Gen, Lease: st.Lease}, Last: "timeout"}, m.now)
}

// TestLifecycle walks closed -> open -> half-open -> open -> half-open ->
// closed with the exact values the scripts must produce.
func TestLifecycle(t *testing.T) {
	m := &machine{t: t, tb: NewTable(), now: 1_000_000}

	// --- closed: one worker alone past the threshold is a suspect.
	m.record("w1", quorum.Failure, 0)
	m.record("w1", quorum.Failure, 0)
	_, v, ev := m.record("w1", quorum.Failure, 0)
	if v.State != "closed" || v.Suspect != "w1" || len(ev) != 1 || ev[0].Kind != "suspect_worker" {
		t.Fatalf("3 failures from w1: %s suspect %q events %v; want closed, w1 suspected", v.State, v.Suspect, ev)
	}
	if r, _ := m.allow("w1"); r.Decision != pb.Decision_DECISION_DENIED_SUSPECT_WORKER || r.RetryAfter != 10000 {
		t.Errorf("Allow(w1) = %v retry %d, want DENIED_SUSPECT_WORKER 10000", r.Decision, r.RetryAfter)
	}

	// --- closed -> open: another worker confirms.
	_, v, ev = m.record("w2", quorum.Failure, 0)
	if v.State != "open" || v.Gen != 1 || v.ProbeAt != m.now+10000 || v.Workers != 2 || len(ev) != 1 || ev[0].Cause != CauseTrip {
		t.Fatalf("w2 confirms: %+v %v; want open at gen 1 for 10 s", v, ev)
	}

	// --- open -> half-open: one probe; the rest wait for its lease.
	m.now += 10000
	if r, v := m.allow("w1"); r.Decision != pb.Decision_DECISION_PROBE || v.State != "half_open" || v.Gen != 2 {
		t.Fatalf("after the cooldown: %v %s gen %d; want PROBE, half_open gen 2", r.Decision, v.State, v.Gen)
	}
	if r, _ := m.allow("w2"); r.Decision != pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT || r.RetryAfter != 5000 {
		t.Errorf("second caller: %v retry %d; want DENIED_PROBE_IN_FLIGHT 5000", r.Decision, r.RetryAfter)
	}

	// --- half-open -> open: a failed probe doubles the cooldown.
	st, _ := m.tb.State("search", m.now)
	_, v, _ = m.tb.Apply("search", params, Call{Op: OpRecord, Actor: "w1", Evidence: quorum.Failure,
		Ticket: Ticket{Gen: st.Gen, Lease: st.Lease}, Last: "timeout"}, m.now)
	if v.State != "open" || v.Level != 1 || v.Cooldown != 20000 || v.Cause != CauseProbeFailed {
		t.Fatalf("failed probe: %+v; want open, level 1, 20 s", v)
	}

	// --- a probe whose holder never records frees the slot at its expiry.
	m.now += 20000
	m.allow("w1")
	m.now += 5000
	if r, _ := m.allow("w2"); r.Decision != pb.Decision_DECISION_PROBE {
		t.Fatalf("after the lease lapsed: %v, want PROBE", r.Decision)
	}

	// --- half-open -> closed: the probe succeeds; the runs reset, the
	// backoff level is kept for two open periods (20 s each).
	st, _ = m.tb.State("search", m.now)
	_, v, ev = m.tb.Apply("search", params, Call{Op: OpRecord, Actor: "w2", Evidence: quorum.Healthy,
		Ticket: Ticket{Gen: st.Gen, Lease: st.Lease}}, m.now)
	if v.State != "closed" || v.Fails != 0 || v.Workers != 0 || v.Level != 1 || len(ev) != 1 || ev[0].Cause != CauseProbeSucceeded {
		t.Fatalf("probe succeeded: %+v %v; want a closed breaker keeping level 1", v, ev)
	}

	// --- the kept generation and backoff lapse with the retention after the backoff.
	if st, exp := m.tb.State("search", m.now); st.Gen != 5 || st.BackoffUntil != m.now+40000 || exp != m.now+40000+params.Retention {
		t.Errorf("after the recovery: gen %d backoff until %d lapsing at %d; want gen 5, backoff until %d, kept until %d",
			st.Gen, st.BackoffUntil, exp, m.now+40000, m.now+40000+params.Retention)
	}
	m.now += 40000 + params.Retention
	if st, _ := m.tb.State("search", m.now); st.Gen != 0 || m.tb.Len() != 0 {
		t.Errorf("after the retention: gen %d, %d breakers hold state; want nothing", st.Gen, m.tb.Len())
	}
}

// trip opens the breaker with failures from w1 and w2 and returns the
// open view and the events of the trip.
func (m *machine) trip() (View, []Event) {
	m.t.Helper()
	m.record("w1", quorum.Failure, 0)
	m.record("w2", quorum.Failure, 0)
	_, v, ev := m.record("w1", quorum.Failure, 0)
	if v.State != "open" {
		m.t.Fatalf("3 failures from w1, w2: %s, want open", v.State)
	}
	return v, ev
}

// probeOK waits out the cooldown, takes the probe and records a success.
func (m *machine) probeOK() View {
	m.t.Helper()
	st, _ := m.tb.State("search", m.now)
	m.now = st.ProbeAt
	if r, _ := m.allow("w3"); r.Decision != pb.Decision_DECISION_PROBE {
		m.t.Fatalf("after the cooldown: %v, want PROBE", r.Decision)
	}
	st, _ = m.tb.State("search", m.now)
	_, v, _ := m.tb.Apply("search", params, Call{Op: OpRecord, Actor: "w3", Evidence: quorum.Healthy,
		Ticket: Ticket{Gen: st.Gen, Lease: st.Lease}}, m.now)
	if v.State != "closed" {
		m.t.Fatalf("probe success: %s, want closed", v.State)
	}
	return v
}

// TestFlappingBackoff: a vendor that passes each probe and fails again at
// once is kept out longer each time (10 s, 20 s, 40 s, 80 s, the cap),
// each re-trip raising flapping; closed for two open periods without a
// trip, a breaker starts over at the base cooldown, with no alert.
func TestFlappingBackoff(t *testing.T) {
	m := &machine{t: t, tb: NewTable(), now: 1_000_000}
	v, ev := m.trip()
	if v.Cooldown != 10000 || v.Level != 0 || len(ev) != 1 {
		t.Fatalf("first trip: cooldown %d level %d events %v; want 10000, level 0, one event", v.Cooldown, v.Level, ev)
	}
	for i, want := range []int64{20000, 40000, 80000, 80000} {
		m.probeOK()
		m.now += 1000 // the vendor fails again a second later
		v, ev = m.trip()
		if v.Cooldown != want || v.Level != int64(i+1) || v.ProbeAt != m.now+want {
			t.Errorf("re-trip %d: cooldown %d level %d probe at %d; want %d, level %d, probe at %d", i+1, v.Cooldown, v.Level, v.ProbeAt, want, i+1, m.now+want)
		}
		if len(ev) != 2 || ev[0].Cause != CauseTrip || ev[1].Kind != "flapping" || ev[1].Cause != CauseFlapping || ev[1].Cooldown != want {
			t.Fatalf("re-trip %d: events %+v; want the trip, then flapping with cooldown %d", i+1, ev, want)
		}
	}

	// Closed for two open periods (2 × 80 s) but one ms: still kept.
	m.probeOK()
	m.now += 2*80000 - 1
	if v, ev = m.trip(); v.Cooldown != 80000 || len(ev) != 2 {
		t.Errorf("re-trip 1 ms before the backoff lapses: cooldown %d events %v; want 80000 and flapping", v.Cooldown, ev)
	}
	// Closed for two open periods: the base cooldown, no alert.
	m.probeOK()
	m.now += 2 * 80000
	if v, ev = m.trip(); v.Cooldown != 10000 || v.Level != 0 || len(ev) != 1 {
		t.Errorf("trip after two open periods closed: cooldown %d level %d events %v; want 10000, level 0, no flapping", v.Cooldown, v.Level, ev)
	}
	// An operator's AUTO forgets the backoff too.
	m.probeOK()
	m.tb.Apply("search", params, Call{Op: OpForce, Actor: "alice", Mode: "auto"}, m.now)
	m.now += 1000
	if v, ev = m.trip(); v.Cooldown != 10000 || len(ev) != 1 {
		t.Errorf("trip after AUTO: cooldown %d events %v; want 10000 and no flapping", v.Cooldown, ev)
	}
}

// TestAllowSentTwice: an Allow that took the probe lease, sent again
// with its own token (its reply was lost and the command resent), is
// answered PROBE again and writes nothing; any other call, the same
// worker's next Allow included, still finds the probe in flight.
func TestAllowSentTwice(t *testing.T) {
	m := &machine{t: t, tb: NewTable(), now: 1_000_000}
	m.record("w1", quorum.Failure, 0)
	m.record("w2", quorum.Failure, 0)
	m.record("w1", quorum.Failure, 0)
	m.now += 10000
	probe := Call{Op: OpAllow, Actor: "w1", Token: "lost-reply"}
	first, v, _ := m.tb.Apply("search", params, probe, m.now)
	if first.Decision != pb.Decision_DECISION_PROBE || first.Repeat {
		t.Fatalf("Allow after the cooldown = %+v, want a PROBE that is no repeat", first)
	}
	before, _ := m.tb.State("search", m.now)
	m.now += 10
	again, v2, ev := m.tb.Apply("search", params, probe, m.now)
	if again.Decision != pb.Decision_DECISION_PROBE || !again.Repeat || again.Wrote || len(ev) != 0 || v2.Gen != v.Gen {
		t.Errorf("the same Allow sent again = %+v (gen %d, events %v), want PROBE, Repeat, nothing written at gen %d", again, v2.Gen, ev, v.Gen)
	}
	if after, _ := m.tb.State("search", m.now); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("the repeat changed the state: %v, was %v", after, before)
	}
	for _, c := range []Call{
		{Op: OpAllow, Actor: "w1", Token: "next-call"},  // the same worker's next call
		{Op: OpAllow, Actor: "w2", Token: "lost-reply"}, // another worker (tokens are the daemon's)
	} {
		if r, _, _ := m.tb.Apply("search", params, c, m.now); r.Decision != pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT || r.Repeat {
			t.Errorf("Allow(%s, token %s) = %+v, want DENIED_PROBE_IN_FLIGHT", c.Actor, c.Token, r)
		}
	}
}

// TestApplyNeverModifiesItsInput: Apply is pure.
func TestApplyNeverModifiesItsInput(t *testing.T) {
	s := State{Fails: 1, Workers: []string{"w1"}}
	before := fmt.Sprint(s)
	Apply(params, s, Call{Op: OpRecord, Actor: "w2", Evidence: quorum.Failure}, 1)
	if fmt.Sprint(s) != before {
		t.Errorf("Apply changed its input: %s, was %s", fmt.Sprint(s), before)
	}
}

// TestTableInParallel: 50 callers on one half-open breaker get exactly one
// probe.
func TestTableInParallel(t *testing.T) {
	tb := NewTable()
	tb.Seed("search", State{Phase: Open, Gen: 1, ProbeAt: 100, Cooldown: 100, Workers: []string{"w1", "w2"}, Fails: 3}, 0, params.Retention)
	var wg sync.WaitGroup
	decisions := make(chan pb.Decision, 50)
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, _, _ := tb.Apply("search", params, Call{Op: OpAllow, Actor: fmt.Sprintf("w%d", i), Token: fmt.Sprint(i)}, 100)
			decisions <- r.Decision
		}()
	}
	wg.Wait()
	close(decisions)
	count := map[pb.Decision]int{}
	for d := range decisions {
		count[d]++
	}
	if count[pb.Decision_DECISION_PROBE] != 1 || count[pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT] != 49 {
		t.Errorf("50 parallel Allows: %v, want 1 PROBE and 49 DENIED_PROBE_IN_FLIGHT", count)
	}
}
