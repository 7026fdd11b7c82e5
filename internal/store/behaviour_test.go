package store_test

// The behaviour suite: every test runs on miniredis and, when
// BREAKERD_TEST_REDIS_ADDR is set, on a real Redis, so that the scripts
// agree on both Lua engines. Time moves with Advance, never by sleeping.

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

func TestClosedBreakerHoldsNoKeys(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		name := f.Breaker("web_search")
		for _, w := range []string{"w1", "w2", "w3"} {
			a := f.allow(name, w)
			if a.Decision != pb.Decision_DECISION_ALLOWED || a.Ticket.Generation != 0 {
				t.Fatalf("Allow(%q) = %v gen %d, want ALLOWED gen 0", name, a.Decision, a.Ticket.Generation)
			}
			f.record(name, w, a.Ticket, pb.Outcome_OUTCOME_SUCCESS)
		}
		f.get(name)
		if k := f.keysOf(name); len(k) != 0 {
			t.Errorf("a closed breaker with no failures holds keys %v, want none", k)
		}
	})
}

func TestQuorumOneWorkerNeverTrips(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		name := f.Breaker("web_search")
		// w1's calls were all admitted before its failures made it a
		// suspect (TestSuspectWorker), as 100 calls in flight at once are.
		ticket := f.allow(name, "w1").Ticket
		for i := range 100 {
			r := f.record(name, "w1", ticket, pb.Outcome_OUTCOME_TIMEOUT)
			if !r.Counted || r.State.State != pb.State_STATE_CLOSED {
				t.Fatalf("failure %d from w1 alone: counted %v, state %v; want counted, CLOSED", i+1, r.Counted, r.State.State)
			}
		}
		if got := f.get(name); got.Failures != 100 || got.DistinctWorkers != 1 {
			t.Fatalf("Get = %d failures from %d workers, want 100 from 1", got.Failures, got.DistinctWorkers)
		}
		r := f.call(name, "w2", pb.Outcome_OUTCOME_TIMEOUT)
		if r.State.State != pb.State_STATE_OPEN {
			t.Fatalf("after a second worker's failure: state %v, want OPEN", r.State.State)
		}
		a := f.allow(name, "w3")
		want := "it is failing: 101 failed calls in a row, last: timeout after 30s"
		if a.Decision != pb.Decision_DECISION_DENIED_OPEN || a.Reason != want {
			t.Errorf("Allow = %v %q, want DENIED_OPEN %q", a.Decision, a.Reason, want)
		}
		if a.RetryAfterMs != cooldown.Milliseconds() {
			t.Errorf("retry_after_ms = %d, want %d", a.RetryAfterMs, cooldown.Milliseconds())
		}
	})
}

func TestThresholdAndReset(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		name := f.Breaker("stripe:acct_42")
		for i := range 4 {
			f.call(name, fmt.Sprintf("w%d", i), pb.Outcome_OUTCOME_SERVER_ERROR)
		}
		if r := f.call(name, "w9", pb.Outcome_OUTCOME_SUCCESS); !r.Counted || r.State.Failures != 0 || r.State.DistinctWorkers != 0 {
			t.Fatalf("success after 4 failures: counted %v, %d failures, %d workers; want counted, 0, 0", r.Counted, r.State.Failures, r.State.DistinctWorkers)
		}
		if k := f.keysOf(name); slices.Contains(k, "workers") {
			t.Errorf("the worker set survived a success")
		}
		for i := range 4 {
			if r := f.call(name, fmt.Sprintf("w%d", i), pb.Outcome_OUTCOME_MALFORMED_OUTPUT); r.State.State != pb.State_STATE_CLOSED {
				t.Fatalf("failure %d after the reset opened the circuit", i+1)
			}
		}
		if r := f.call(name, "w4", pb.Outcome_OUTCOME_TRANSPORT); r.State.State != pb.State_STATE_OPEN {
			t.Fatalf("5th consecutive failure: state %v, want OPEN", r.State.State)
		}
	})
}

func TestOutcomesThatNeverCount(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		name := f.Breaker("crm")
		for _, o := range []pb.Outcome{pb.Outcome_OUTCOME_INVALID_ARGUMENT, pb.Outcome_OUTCOME_PERMISSION_DENIED, pb.Outcome_OUTCOME_NOT_FOUND, pb.Outcome_OUTCOME_UNAUTHENTICATED} {
			for i := range 10 {
				if r := f.call(name, fmt.Sprintf("w%d", i), o); r.Counted || r.State.Failures != 0 {
					t.Fatalf("%v from w%d: counted %v, failures %d; want not counted", o, i, r.Counted, r.State.Failures)
				}
			}
		}
		if st := f.get(name).State; st != pb.State_STATE_CLOSED {
			t.Fatalf("state %v after 40 uncounted outcomes, want CLOSED", st)
		}
	})
}

func TestUnauthenticatedRaisesCredentialRevoked(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		name := f.Breaker("github:token_7")
		f.call(name, "w1", pb.Outcome_OUTCOME_UNAUTHENTICATED)
		ev := f.events(name)
		if len(ev) != 1 || ev[0]["kind"] != "credential_revoked" || ev[0]["actor"] != "w1" {
			t.Fatalf("events = %v, want one credential_revoked from w1", ev)
		}
		if st := f.get(name); st.State != pb.State_STATE_CLOSED || st.Failures != 0 {
			t.Errorf("a 401 moved the breaker: %v with %d failures", st.State, st.Failures)
		}
	})
}

func TestRateLimited(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		name := f.Breaker("search_api")
		// Within the deadline: the caller can wait; nothing is counted.
		for i := range 5 {
			if r := f.call(name, fmt.Sprintf("w%d", i), pb.Outcome_OUTCOME_RATE_LIMITED, rateLimited(2*time.Second, 10*time.Second)); r.Counted {
				t.Fatalf("429 with Retry-After inside the deadline was counted")
			}
		}
		// Beyond it: counted; the third in a row (two workers) opens the
		// circuit with the last Retry-After as the cooldown.
		f.call(name, "w1", pb.Outcome_OUTCOME_RATE_LIMITED, rateLimited(60*time.Second, 10*time.Second))
		f.call(name, "w1", pb.Outcome_OUTCOME_RATE_LIMITED, rateLimited(90*time.Second, 10*time.Second))
		r := f.call(name, "w2", pb.Outcome_OUTCOME_RATE_LIMITED, rateLimited(120*time.Second, 10*time.Second))
		if !r.Counted || r.State.State != pb.State_STATE_OPEN || r.State.CooldownMs != 120000 {
			t.Fatalf("third over-deadline 429: counted %v, %v, cooldown %dms; want counted, OPEN, 120000ms", r.Counted, r.State.State, r.State.CooldownMs)
		}
		if !strings.Contains(r.State.Reason, "3 consecutive 429s") {
			t.Errorf("reason %q does not say why", r.State.Reason)
		}
		probeAt := r.State.NextProbeAtMs
		// A late 429 can push the probe later, never earlier.
		stale := &pb.Ticket{Generation: 0}
		f.record(name, "w3", stale, pb.Outcome_OUTCOME_RATE_LIMITED, rateLimited(10*time.Second, time.Second))
		if got := f.get(name).NextProbeAtMs; got != probeAt {
			t.Errorf("a shorter Retry-After moved the probe from %d to %d", probeAt, got)
		}
		f.record(name, "w3", stale, pb.Outcome_OUTCOME_RATE_LIMITED, rateLimited(300*time.Second, time.Second))
		if got := f.get(name).NextProbeAtMs; got != probeAt+180000 {
			t.Errorf("a longer Retry-After moved the probe to %d, want %d", got, probeAt+180000)
		}
		// Never past the cooldown cap (15m): no answer pins a breaker for longer.
		f.record(name, "w3", stale, pb.Outcome_OUTCOME_RATE_LIMITED, rateLimited(7*24*time.Hour, time.Second))
		if got := f.get(name).NextProbeAtMs; got != probeAt-120000+15*60000 {
			t.Errorf("a week-long Retry-After moved the probe to %d, want the cap: %d", got, probeAt-120000+15*60000)
		}
	})
}

func TestRateLimitRunBrokenBySuccess(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		name := f.Breaker("search_api")
		over := rateLimited(60*time.Second, time.Second)
		f.call(name, "w1", pb.Outcome_OUTCOME_RATE_LIMITED, over)
		f.call(name, "w2", pb.Outcome_OUTCOME_RATE_LIMITED, over)
		f.call(name, "w1", pb.Outcome_OUTCOME_SUCCESS)
		if r := f.call(name, "w2", pb.Outcome_OUTCOME_RATE_LIMITED, over); r.State.State != pb.State_STATE_CLOSED {
			t.Fatalf("two 429s, a success, one 429 opened the circuit")
		}
	})
}

func TestCooldownGrowsAndResets(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		name := f.Breaker("web_search")
		f.trip(name)
		want := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 15 * time.Minute, 15 * time.Minute}
		for i, cd := range want {
			st := f.get(name)
			if st.State != pb.State_STATE_OPEN || st.CooldownMs != cd.Milliseconds() || st.FailedProbes != int64(i) {
				t.Fatalf("open period %d: %v cooldown %dms after %d failed probes; want OPEN %dms after %d", i, st.State, st.CooldownMs, st.FailedProbes, cd.Milliseconds(), i)
			}
			f.Advance(cd - time.Millisecond)
			if a := f.allow(name, "w1"); a.Decision != pb.Decision_DECISION_DENIED_OPEN || a.RetryAfterMs != 1 {
				t.Fatalf("1ms before the cooldown ends: %v retry %dms, want DENIED_OPEN 1ms", a.Decision, a.RetryAfterMs)
			}
			f.Advance(time.Millisecond)
			a := f.allow(name, "w1")
			if a.Decision != pb.Decision_DECISION_PROBE {
				t.Fatalf("at the cooldown's end: %v, want PROBE", a.Decision)
			}
			if i < len(want)-1 {
				f.record(name, "w1", a.Ticket, pb.Outcome_OUTCOME_TIMEOUT)
				continue
			}
			if r := f.record(name, "w1", a.Ticket, pb.Outcome_OUTCOME_SUCCESS); !r.Counted || r.State.State != pb.State_STATE_CLOSED {
				t.Fatalf("probe success: counted %v, %v; want counted, CLOSED", r.Counted, r.State.State)
			}
		}
		st := f.get(name)
		if st.Failures != 0 || st.FailedProbes != 6 || st.DistinctWorkers != 0 {
			t.Fatalf("after the probe closed it: %+v, want fresh counts, the backoff level (6) kept", st)
		}
		// Closed for two open periods (2 × 15m) without a trip: the backoff
		// starts over (TestFlappingVendorBacksOff has a trip before).
		f.Advance(30 * time.Minute)
		f.trip(name)
		if st := f.get(name); st.CooldownMs != cooldown.Milliseconds() {
			t.Errorf("the next trip's cooldown = %dms, want the base %dms again", st.CooldownMs, cooldown.Milliseconds())
		}
	})
}

func TestJitterLengthensWithinBound(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		for _, u := range []float64{0, 0.5, 0.999} {
			f := newFixture(t, b, store.Options{Rand: func() float64 { return u }})
			name := f.Breaker(fmt.Sprintf("api-%v", u))
			f.trip(name)
			want := int64(30000 * (1 + 0.2*u))
			if got := f.get(name).CooldownMs; got != want {
				t.Errorf("u=%v: cooldown %dms, want %dms", u, got, want)
			}
		}
	})
}

// TestJitterStaggersBreakersOpenedTogether: each trip's open period is
// the cooldown plus floor(cooldown x jitter x draw), one draw per script
// call (each draw injected here, so the spread is exact); the default
// draw is not a constant.
func TestJitterStaggersBreakersOpenedTogether(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		var draw atomic.Uint64
		f := newFixture(t, b, store.Options{Rand: func() float64 { return math.Float64frombits(draw.Load()) }})
		jitter := policy.Default().Jitter
		for i, d := range []float64{0, 0.25, 0.5, 0.75, 0.999} {
			draw.Store(math.Float64bits(d))
			name := f.Breaker(fmt.Sprintf("tool%d", i))
			f.trip(name)
			st := f.get(name)
			want := cooldown.Milliseconds() + int64(math.Floor(float64(cooldown.Milliseconds())*(jitter*d)))
			if got := st.NextProbeAtMs - st.AsOfMs; got != want {
				t.Errorf("tripped with the draw %g: probe due %dms after the trip, want %dms", d, got, want)
			}
		}

		f.st = store.New(f.Client, store.Options{Now: b.Clock(), Channel: b.Prefix + "events"})
		due := map[int64]bool{}
		for i := range 10 {
			name := f.Breaker(fmt.Sprintf("default%d", i))
			f.trip(name)
			due[f.get(name).NextProbeAtMs] = true
		}
		if len(due) < 2 {
			t.Errorf("10 breakers opened together with the default draw all probe at one instant, want them spread")
		}
	})
}

func TestHalfOpenAdmitsOneProbe(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		name := f.Breaker("web_search")
		f.trip(name)
		f.Advance(cooldown)
		probe := f.allow(name, "w1")
		if probe.Decision != pb.Decision_DECISION_PROBE || probe.Ticket.LeaseToken == "" {
			t.Fatalf("first Allow after the cooldown = %v, want PROBE with a lease", probe.Decision)
		}
		for i := range 5 {
			a := f.allow(name, fmt.Sprintf("w%d", i+2))
			if a.Decision != pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT || a.RetryAfterMs != 30000 ||
				a.GetDenial().GetDenyUntilMs() != a.GetState().GetAsOfMs()+30000 || a.GetDenial().GetMayReturnAtMs() != 0 {
				t.Fatalf("Allow %d during the probe = %v retry %dms, denial %v; want DENIED_PROBE_IN_FLIGHT for the 30000ms lease, "+
					"no wait given to the model", i, a.Decision, a.RetryAfterMs, a.GetDenial())
			}
		}
		// A non-holder's success decides nothing.
		if r := f.record(name, "w2", &pb.Ticket{Generation: probe.Ticket.Generation}, pb.Outcome_OUTCOME_SUCCESS); r.Counted || r.State.State != pb.State_STATE_HALF_OPEN {
			t.Fatalf("non-holder success: counted %v, %v; want not counted, HALF_OPEN", r.Counted, r.State.State)
		}
		// A hung prober: its lease lapses and the next caller probes.
		f.Advance(30 * time.Second)
		next := f.allow(name, "w3")
		if next.Decision != pb.Decision_DECISION_PROBE || next.Ticket.LeaseToken == probe.Ticket.LeaseToken {
			t.Fatalf("after the lease lapsed: %v, want PROBE with a new lease", next.Decision)
		}
		if r := f.record(name, "w1", probe.Ticket, pb.Outcome_OUTCOME_SUCCESS); r.Counted {
			t.Fatalf("the lapsed prober's late success was counted")
		}
		if r := f.record(name, "w3", next.Ticket, pb.Outcome_OUTCOME_SUCCESS); !r.Counted || r.State.State != pb.State_STATE_CLOSED {
			t.Fatalf("the lease holder's success: counted %v, %v; want counted, CLOSED", r.Counted, r.State.State)
		}
	})
}

func TestProbeWithUncountedOutcomeReleasesLease(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		name := f.Breaker("web_search")
		f.trip(name)
		f.Advance(cooldown)
		p := f.allow(name, "w1")
		r := f.record(name, "w1", p.Ticket, pb.Outcome_OUTCOME_INVALID_ARGUMENT)
		if r.Counted || r.State.State != pb.State_STATE_HALF_OPEN || r.State.ProbeInFlight || r.State.FailedProbes != 0 {
			t.Fatalf("probe answered 4xx: counted %v, %v, in flight %v, failed probes %d; want released, still HALF_OPEN, backoff unchanged",
				r.Counted, r.State.State, r.State.ProbeInFlight, r.State.FailedProbes)
		}
		if a := f.allow(name, "w2"); a.Decision != pb.Decision_DECISION_PROBE {
			t.Fatalf("after the release: %v, want PROBE at once", a.Decision)
		}
	})
}

func TestReadsNeverTakeOrMoveTheLease(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		name := f.Breaker("web_search")
		f.trip(name)
		f.Advance(cooldown)
		ctx := context.Background()
		for range 3 {
			f.get(name)
			if _, err := f.st.BatchGet(ctx, []string{name, name}); err != nil {
				t.Fatal(err)
			}
			if _, err := f.st.List(ctx); err != nil {
				t.Fatal(err)
			}
		}
		p := f.allow(name, "w1")
		if p.Decision != pb.Decision_DECISION_PROBE {
			t.Fatalf("Allow after reads = %v, want PROBE (reads took the lease)", p.Decision)
		}
		before := f.get(name)
		f.Advance(10 * time.Second)
		f.get(name)
		f.Advance(20*time.Second - time.Millisecond)
		if a := f.allow(name, "w2"); a.Decision != pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT || a.RetryAfterMs != 1 || a.GetDenial().GetDenyUntilMs() != a.GetState().GetAsOfMs()+1 {
			t.Fatalf("a read moved the lease: Allow = %v denial %v, want DENIED_PROBE_IN_FLIGHT for 1ms more", a.Decision, a.GetDenial())
		}
		if before.Generation != f.get(name).Generation {
			t.Errorf("a read changed the generation")
		}
	})
}

func TestGenerationsFenceLateRecords(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		name := f.Breaker("web_search")
		early := f.allow(name, "w5") // a slow call admitted before the trip
		f.trip(name)
		if r := f.record(name, "w5", early.Ticket, pb.Outcome_OUTCOME_SUCCESS); r.Counted || r.State.State != pb.State_STATE_OPEN {
			t.Fatalf("late success from before the trip: counted %v, %v; want not counted, OPEN", r.Counted, r.State.State)
		}
		f.Advance(cooldown)
		p := f.allow(name, "w1")
		f.record(name, "w1", p.Ticket, pb.Outcome_OUTCOME_SUCCESS)
		st := f.get(name)
		if st.State != pb.State_STATE_CLOSED || st.Generation != 3 {
			t.Fatalf("after trip, probe, close: %v gen %d, want CLOSED gen 3", st.State, st.Generation)
		}
		if r := f.record(name, "w5", early.Ticket, pb.Outcome_OUTCOME_TIMEOUT); r.Counted || r.Note != breaker.NoteStale.String() || r.State.Failures != 0 {
			t.Fatalf("late failure against the fresh closed state: counted %v (%q), failures %d; want not counted", r.Counted, r.Note, r.State.Failures)
		}
		fresh := f.allow(name, "w1")
		if fresh.Ticket.Generation != 3 {
			t.Fatalf("ticket generation = %d, want 3", fresh.Ticket.Generation)
		}
		// A ticket from a generation newer than the breaker's (its state
		// was lost or reset after the Allow) is fenced off alike, and the
		// note's words say nothing that only an older one would make true.
		future := &pb.Ticket{Generation: fresh.Ticket.Generation + 5}
		if r := f.record(name, "w1", future, pb.Outcome_OUTCOME_TIMEOUT); r.Counted || r.Note != breaker.NoteStale.String() || r.State.Failures != 0 {
			t.Fatalf("failure with a future generation: counted %v (%q), failures %d; want not counted", r.Counted, r.Note, r.State.Failures)
		}
		if w := breaker.NoteStale.String(); !strings.Contains(w, "another generation") || strings.Contains(w, "stale") || strings.Contains(w, "older") {
			t.Errorf("the note %q does not hold for a ticket newer than the breaker's state", w)
		}
		if r := f.record(name, "w1", fresh.Ticket, pb.Outcome_OUTCOME_TIMEOUT); !r.Counted {
			t.Fatalf("a current failure was not counted")
		}
	})
}

func TestForcedOpen(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		ctx := context.Background()
		name := f.Breaker("payments")
		st, err := f.st.Force(ctx, name, pb.ForceMode_FORCE_MODE_OPEN, "vendor maintenance until 14:00", 0, "alice")
		if err != nil || st.State != pb.State_STATE_FORCED_OPEN || st.ForcedBy != "alice" {
			t.Fatalf("Force(OPEN) = %v, %v", st, err)
		}
		a := f.allow(name, "w1")
		if a.Decision != pb.Decision_DECISION_DENIED_FORCED_OPEN || !strings.Contains(a.Reason, "vendor maintenance until 14:00") {
			t.Fatalf("Allow = %v %q, want DENIED_FORCED_OPEN with the operator's reason", a.Decision, a.Reason)
		}
		// Successes and an elapsed day change nothing: automatic
		// transitions never override a pin.
		f.record(name, "w1", a.Ticket, pb.Outcome_OUTCOME_SUCCESS)
		f.Advance(24 * time.Hour)
		if a := f.allow(name, "w1"); a.Decision != pb.Decision_DECISION_DENIED_FORCED_OPEN {
			t.Fatalf("a day later: %v, want still DENIED_FORCED_OPEN", a.Decision)
		}
		if _, err := f.st.Force(ctx, name, pb.ForceMode_FORCE_MODE_AUTO, "", 0, "alice"); err != nil {
			t.Fatal(err)
		}
		if a := f.allow(name, "w1"); a.Decision != pb.Decision_DECISION_ALLOWED {
			t.Fatalf("after AUTO: %v, want ALLOWED", a.Decision)
		}
	})
}

func TestForcedClosedCountsButNeverTrips(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		ctx := context.Background()
		name := f.Breaker("payments")
		f.trip(name)
		if _, err := f.st.Force(ctx, name, pb.ForceMode_FORCE_MODE_CLOSED, "we know; let it through", 0, "bob"); err != nil {
			t.Fatal(err)
		}
		for i := range 20 {
			r := f.call(name, fmt.Sprintf("w%d", i%4), pb.Outcome_OUTCOME_TIMEOUT)
			if !r.Counted || r.State.State != pb.State_STATE_FORCED_CLOSED {
				t.Fatalf("failure %d while forced closed: counted %v, %v; want counted, FORCED_CLOSED", i, r.Counted, r.State.State)
			}
		}
		if st := f.get(name); st.Failures != 25 || st.DistinctWorkers != 4 { // 5 from the trip, 20 since
			t.Errorf("forced closed shows %d failures from %d workers, want 25 from 4", st.Failures, st.DistinctWorkers)
		}
		st, err := f.st.Force(ctx, name, pb.ForceMode_FORCE_MODE_AUTO, "", 0, "bob")
		if err != nil {
			t.Fatal(err)
		}
		if st.State != pb.State_STATE_CLOSED || st.Failures != 0 || st.DistinctWorkers != 0 {
			t.Errorf("AUTO = %v with %d failures from %d workers, want CLOSED with fresh counts", st.State, st.Failures, st.DistinctWorkers)
		}
	})
}

func TestForceTTLEndsByItself(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		name := f.Breaker("payments")
		if _, err := f.st.Force(context.Background(), name, pb.ForceMode_FORCE_MODE_OPEN, "deploy", 10*time.Minute, "carol"); err != nil {
			t.Fatal(err)
		}
		f.Advance(10*time.Minute - time.Second)
		if a := f.allow(name, "w1"); a.Decision != pb.Decision_DECISION_DENIED_FORCED_OPEN || a.RetryAfterMs != 1000 {
			t.Fatalf("before the TTL: %v retry %dms, want DENIED_FORCED_OPEN 1000ms", a.Decision, a.RetryAfterMs)
		}
		f.Advance(time.Second)
		if st := f.get(name); st.State != pb.State_STATE_CLOSED {
			t.Fatalf("Get after the TTL: %v, want CLOSED", st.State)
		}
		if a := f.allow(name, "w1"); a.Decision != pb.Decision_DECISION_ALLOWED {
			t.Fatalf("after the TTL: %v, want ALLOWED", a.Decision)
		}
		ev := f.events(name)
		last := ev[len(ev)-1]
		if last["from"] != "forced_open" || last["to"] != "closed" || last["reason"] != "forced state expired" {
			t.Errorf("last event %v, want forced_open -> closed, forced state expired", last)
		}
	})
}

func TestEventsRecordEveryTransition(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		name := f.Breaker("web_search")
		f.trip(name)
		f.Advance(cooldown)
		p := f.allow(name, "w1")
		f.record(name, "w1", p.Ticket, pb.Outcome_OUTCOME_SUCCESS)
		if _, err := f.st.Force(context.Background(), name, pb.ForceMode_FORCE_MODE_OPEN, "test", 0, "ops"); err != nil {
			t.Fatal(err)
		}
		type ev struct{ Kind, From, To, Gen, Failures, Workers, Cooldown, Actor string }
		var got []ev
		for _, e := range f.events(name) {
			got = append(got, ev{e["kind"].(string), e["from"].(string), e["to"].(string), e["gen"].(string),
				e["failures"].(string), e["workers"].(string), e["cooldown_ms"].(string), e["actor"].(string)})
			if e["breaker"] != name || e["at_ms"] == "" || e["reason"] == "" {
				t.Errorf("event %v lacks breaker, at_ms or reason", e)
			}
		}
		want := []ev{
			{"transition", "closed", "open", "1", "5", "2", "30000", "w2"},
			{"transition", "open", "half_open", "2", "5", "2", "30000", "w1"},
			{"transition", "half_open", "closed", "3", "0", "0", "0", "w1"},
			{"forced", "closed", "forced_open", "4", "0", "0", "0", "ops"},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
	})
}

func TestEventLogIsBounded(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{EventsMaxLen: 10})
		name := f.Breaker("flaky")
		for range 300 {
			f.call(name, "w1", pb.Outcome_OUTCOME_UNAUTHENTICATED)
		}
		// MAXLEN ~ trims whole stream nodes (100 entries by default).
		if n := len(f.events(name)); n > 10+100 {
			t.Errorf("event log holds %d entries, want at most about 10", n)
		}
	})
}

func TestVerdictOutlivesCooldownCapPlusProbeTimeout(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		name := f.Breaker("web_search")
		f.trip(name)
		retention := policy.Default().Retention()
		keys := store.KeysOf(name)
		for _, k := range []string{keys.State, keys.Workers} {
			ttl, err := f.Client.PTTL(context.Background(), k).Result()
			if err != nil {
				t.Fatal(err)
			}
			if ttl < retention || ttl > retention+cooldown+time.Second {
				t.Errorf("%s TTL = %s, want at least the cap plus the probe timeout (%s)", k, ttl, retention)
			}
		}
		if b.Mini == nil {
			return // a real Redis's TTLs run on real time; miniredis covers expiry
		}
		f.Advance(retention + cooldown - time.Second)
		if k := f.keysOf(name); !slices.Contains(k, "state") {
			t.Fatalf("the open verdict expired before its retention")
		}
		f.Advance(2 * time.Second)
		if k := f.keysOf(name); slices.Contains(k, "state") || slices.Contains(k, "workers") {
			t.Errorf("an abandoned verdict still holds %v after its retention", k)
		}
	})
}

func TestPoliciesByGlob(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		set, err := policy.Parse([]byte(fmt.Sprintf(`
breakers:
  - match: "%s*"
    threshold: 2
    min_workers: 1
    cooldown_base: 5s
    alternatives: [issue_refund_manually]
`, b.Prefix+"stripe:")))
		if err != nil {
			t.Fatal(err)
		}
		f := newFixture(t, b, store.Options{Policies: set})
		strict := f.Breaker("stripe:acct_1")
		f.call(strict, "w1", pb.Outcome_OUTCOME_TIMEOUT)
		r := f.call(strict, "w1", pb.Outcome_OUTCOME_TIMEOUT)
		if r.State.State != pb.State_STATE_OPEN || r.State.CooldownMs != 5000 {
			t.Fatalf("matched breaker: %v cooldown %dms, want OPEN 5000ms", r.State.State, r.State.CooldownMs)
		}
		if diff := cmp.Diff([]string{"issue_refund_manually"}, r.State.Alternatives); diff != "" {
			t.Errorf("alternatives (-want +got):\n%s", diff)
		}
		other := f.Breaker("web_search")
		f.call(other, "w1", pb.Outcome_OUTCOME_TIMEOUT)
		if r := f.call(other, "w1", pb.Outcome_OUTCOME_TIMEOUT); r.State.State != pb.State_STATE_CLOSED {
			t.Fatalf("unmatched breaker used the override")
		}
	})
}

func TestOneRoundTripPerDecision(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		name := f.Breaker("web_search")
		check := func(what string, fn func()) {
			t.Helper()
			f.ResetCounts()
			fn()
			if n := f.RoundTrips(); n != 1 {
				t.Errorf("%s took %d Redis round trips, want 1", what, n)
			}
		}
		var a *pb.AllowResponse
		check("Allow", func() { a = f.allow(name, "w1") })
		check("Record", func() { f.record(name, "w1", a.Ticket, pb.Outcome_OUTCOME_TIMEOUT) })
		check("a tripping Record", func() {
			for range 3 {
				f.record(name, "w1", a.Ticket, pb.Outcome_OUTCOME_TIMEOUT)
			}
			f.ResetCounts()
			f.record(name, "w2", a.Ticket, pb.Outcome_OUTCOME_TIMEOUT)
		})
		check("a denied Allow", func() { f.allow(name, "w1") })
		check("BatchGet of 5", func() {
			if _, err := f.st.BatchGet(context.Background(), []string{name, name + "1", name + "2", name + "3", name + "4"}); err != nil {
				t.Fatal(err)
			}
		})
	})
}

func TestScriptCacheFlushFallsBackToEval(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		name := f.Breaker("web_search")
		ctx := context.Background()
		if err := f.Client.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if a := f.allow(name, "w1"); a.Decision != pb.Decision_DECISION_ALLOWED {
			t.Fatalf("Allow after SCRIPT FLUSH = %v", a.Decision)
		}
		if err := f.Client.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := f.st.BatchGet(ctx, []string{name}); err != nil {
			t.Fatalf("BatchGet after SCRIPT FLUSH: %v", err)
		}
	})
}

// TestCheckLoadsOnlyMissingScripts: the health tick asks SCRIPT EXISTS
// (one command) and sends a script's source only when Redis lacks it. On a
// shared real Redis another test may flush or load the cache at any time,
// so there the count of scripts loaded is checked against the commands
// sent; miniredis, this test's alone, pins both.
func TestCheckLoadsOnlyMissingScripts(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		ctx := context.Background()
		check := func(when string, want int) {
			t.Helper()
			b.ResetCounts()
			n, err := f.st.Check(ctx)
			if err != nil {
				t.Fatalf("Check %s: %v", when, err)
			}
			if c := b.Commands(); c != int64(1+n) {
				t.Errorf("Check %s loaded %d scripts with %d commands, want 1 SCRIPT EXISTS + %d SCRIPT LOAD", when, n, c, n)
			}
			if b.Mini != nil && n != want {
				t.Errorf("Check %s loaded %d scripts, want %d", when, n, want)
			}
		}
		check("with every script loaded", 0)
		if err := f.Client.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		check("after SCRIPT FLUSH", 10) // allow, record, force, read, recover, check_lease, reserve, group, target_lease, lost
		check("again", 0)
	})
}

func TestRedisErrorsAreReturned(t *testing.T) {
	t.Parallel()
	b := testredis.Mini(t)
	b.Client = redis.NewClient(&redis.Options{Addr: b.Addr, MaxRetries: -1})
	// The mode that fails calls instead of answering from memory
	// (outage_test.go covers OutageMemory).
	f := newFixture(t, b, store.Options{Outage: store.OutageUnavailable})
	b.Mini.SetError("LOADING Redis is loading the dataset in memory")
	defer b.Mini.SetError("")
	if _, err := f.st.Allow(context.Background(), "x", "w1"); err == nil || !store.IsUnavailable(err) {
		t.Fatalf("Allow while Redis is loading: %v, want an unavailable error", err)
	}
	b.Mini.SetError("")
	b.Mini.Close()
	if _, err := f.st.Allow(context.Background(), "x", "w1"); err == nil || !store.IsUnavailable(err) {
		t.Fatalf("Allow with Redis down: %v, want an unavailable error", err)
	}
}

func TestUnknownStateReadsAsUnspecified(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		name := f.Breaker("from_the_future")
		if err := f.Client.HSet(context.Background(), store.KeysOf(name).State, "st", "sleeping", "gen", 7).Err(); err != nil {
			t.Fatal(err)
		}
		st, err := f.st.BatchGet(context.Background(), []string{name, f.Breaker("known")})
		if err != nil || st[0].State != pb.State_STATE_UNSPECIFIED || st[0].Generation != 7 || st[1].State != pb.State_STATE_CLOSED {
			t.Fatalf("BatchGet with a state from a newer build = %v, %v; want UNSPECIFIED gen 7, then CLOSED", st, err)
		}
	})
}
