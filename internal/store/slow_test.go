package store_test

import (
	"strings"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Slow calls: slow_call 2s, min_workers 2, jitter 0; in
// consecutive mode slow_call_threshold 3 (threshold 5 for failures), in
// window mode window 60s, min_calls 4, slow_call_rate 0.5.

func slowFixture(t *testing.T, b *testredis.Backend, window bool) *fixture {
	t.Helper()
	p := policy.Default()
	p.MinWorkers, p.Jitter, p.SlowCall = 2, 0, 2*time.Second
	if window {
		p.Mode, p.Window, p.FailureRate, p.MinCalls, p.SlowCallRate = policy.ModeWindow, time.Minute, 0.5, 4, 0.5
	} else {
		p.SlowCallThreshold = 3
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	return newFixture(t, b, store.Options{Policies: policy.NewSet(p)})
}

// took sets a Record's latency.
func took(d time.Duration) func(*pb.RecordRequest) {
	return func(r *pb.RecordRequest) { r.LatencyMs = d.Milliseconds() }
}

// A call in a slow-call sequence: a success that took lat, or a failure.
type slowCall struct {
	worker string
	lat    time.Duration // 0: a TIMEOUT (a failure)
}

const (
	atLimit = 2 * time.Second
	over    = 2*time.Second + time.Millisecond
	fast    = 300 * time.Millisecond
	fail    = time.Duration(0)
)

// play runs calls, each worker keeping the ticket of its first Allow (as
// calls in flight at once do: a suspect is denied new calls), and returns
// the last answer.
func (f *fixture) play(name string, calls []slowCall) *pb.RecordResponse {
	f.t.Helper()
	tickets := map[string]*pb.Ticket{}
	var last *pb.RecordResponse
	for _, c := range calls {
		if tickets[c.worker] == nil {
			tickets[c.worker] = f.allow(name, c.worker).Ticket
		}
		if c.lat == fail {
			last = f.record(name, c.worker, tickets[c.worker], pb.Outcome_OUTCOME_TIMEOUT)
		} else {
			last = f.record(name, c.worker, tickets[c.worker], pb.Outcome_OUTCOME_SUCCESS, took(c.lat))
		}
	}
	return last
}

func TestSlowConsecutiveBoundaries(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		calls       []slowCall
		want        pb.State
		slow, fails int64 // Get's slow_calls and failures (closed cases)
	}{
		// A latency exactly at slow_call is not slow.
		{"at the limit is not slow", []slowCall{{"w1", atLimit}, {"w2", atLimit}, {"w1", atLimit}}, pb.State_STATE_CLOSED, 0, 0},
		// slow_call_threshold - 1 slow calls from 2 workers do not trip.
		{"N-1 slow calls", []slowCall{{"w1", over}, {"w2", over}}, pb.State_STATE_CLOSED, 2, 0},
		// N from 2 workers do.
		{"N slow calls from 2 workers", []slowCall{{"w1", over}, {"w2", over}, {"w1", over}}, pb.State_STATE_OPEN, 0, 0},
		// N from one worker: it is a suspect, the breaker stays closed.
		{"N slow calls from 1 worker", []slowCall{{"w1", over}, {"w1", over}, {"w1", over}}, pb.State_STATE_CLOSED, 3, 0},
		// A fast success ends the slow run.
		{"a fast success ends the slow run", []slowCall{{"w1", over}, {"w2", over}, {"w1", fast}, {"w2", over}}, pb.State_STATE_CLOSED, 1, 0},
		// A slow success ends the failure run and extends the slow run.
		{"a slow success ends the failure run", []slowCall{{"w1", fail}, {"w2", fail}, {"w1", fail}, {"w2", fail}, {"w1", over}, {"w2", fail}},
			pb.State_STATE_CLOSED, 1, 1},
		// A failure neither ends nor extends the slow run.
		{"a failure leaves the slow run", []slowCall{{"w1", over}, {"w2", fail}, {"w2", over}, {"w1", fail}, {"w1", over}}, pb.State_STATE_OPEN, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
				f := slowFixture(t, b, false)
				name := f.Breaker("vendor")
				if r := f.play(name, tc.calls); r.State.State != tc.want {
					t.Fatalf("after %v: %v (%s), want %v", tc.calls, r.State.State, r.State.Reason, tc.want)
				}
				if tc.want != pb.State_STATE_CLOSED {
					return
				}
				if g := f.get(name); g.SlowCalls != tc.slow || g.Failures != tc.fails || g.SlowCallMs != 2000 {
					t.Errorf("Get: slow_calls %d, failures %d, slow_call_ms %d; want %d, %d, 2000",
						g.SlowCalls, g.Failures, g.SlowCallMs, tc.slow, tc.fails)
				}
			})
		})
	}
}

func TestSlowTripReasonSaysTheLatency(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := slowFixture(t, b, false)
		name := f.Breaker("vendor")
		r := f.play(name, []slowCall{{"w1", 25 * time.Second}, {"w2", 24 * time.Second}, {"w1", 26 * time.Second}})
		if r.State.State != pb.State_STATE_OPEN {
			t.Fatalf("after 3 slow calls from 2 workers: %v, want OPEN", r.State.State)
		}
		want := name + " slow: 3 consecutive calls took longer than 2s, from 2 workers: p50 25s over the last 3 calls, limit 2s"
		words := "it is too slow: 3 consecutive calls took longer than 2s (p50 25s over the last 3 calls, limit 2s)"
		if a := f.allow(name, "w3"); a.Decision != pb.Decision_DECISION_DENIED_OPEN || a.Reason != words || a.State.Reason != want {
			t.Errorf("Allow = %v %q (state's reason %q), want DENIED_OPEN %q (the operators' %q)", a.Decision, a.Reason, a.State.Reason, words, want)
		}
		g := f.get(name)
		if g.Failures != 3 || g.DistinctWorkers != 2 || g.LastFailure != "p50 25s over the last 3 calls, limit 2s" {
			t.Errorf("Get: failures %d, workers %d, last %q; want 3, 2, the latency", g.Failures, g.DistinctWorkers, g.LastFailure)
		}
		ev := f.events(name)
		if len(ev) != 1 || ev[0]["cause"] != "slow" || ev[0]["reason"] != want {
			t.Errorf("events = %v, want one transition caused by slow calls, reason %q", ev, want)
		}
	})
}

func TestSlowOneWorkerIsASuspect(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := slowFixture(t, b, false)
		name := f.Breaker("vendor")
		f.play(name, []slowCall{{"w1", 5 * time.Second}, {"w1", 5 * time.Second}, {"w1", 5 * time.Second}})
		a := f.allow(name, "w1")
		want := "only this worker's calls to it are slow (3 consecutive calls took longer than 2s: p50 5s over the last 3 calls, limit 2s), " +
			"and no other worker sees it: likely this worker's network or load; it stays up for the rest of the fleet"
		if a.Decision != pb.Decision_DECISION_DENIED_SUSPECT_WORKER || a.Reason != want {
			t.Errorf("Allow(w1) = %v %q, want DENIED_SUSPECT_WORKER %q", a.Decision, a.Reason, want)
		}
		if a := f.allow(name, "w2"); a.Decision != pb.Decision_DECISION_ALLOWED {
			t.Errorf("Allow(w2) = %v, want ALLOWED", a.Decision)
		}
		ev := f.events(name)
		if len(ev) != 1 || ev[0]["kind"] != "suspect_worker" || ev[0]["cause"] != "slow_suspect" {
			t.Fatalf("events = %v, want one suspect_worker (slow_suspect)", ev)
		}
		if r, _ := ev[0]["reason"].(string); !strings.Contains(r, "all from worker w1") {
			t.Errorf("suspect_worker reason = %q, want it to name w1", r)
		}
		// A second worker's slow call makes the quorum: open.
		if r := f.call(name, "w2", pb.Outcome_OUTCOME_SUCCESS, took(5*time.Second)); r.State.State != pb.State_STATE_OPEN {
			t.Errorf("a 4th slow call from w2: %v, want OPEN", r.State.State)
		}
	})
}

// TestSlowFastSuccessWritesNothing: with slow_call set, a healthy
// breaker's fast successes still hold no key and cost one script each.
func TestSlowFastSuccessWritesNothing(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := slowFixture(t, b, false)
		name := f.Breaker("vendor")
		f.call(name, "w1", pb.Outcome_OUTCOME_SUCCESS, took(atLimit))
		if k := f.keysOf(name); len(k) != 0 {
			t.Errorf("a success at the limit left %v, want no keys", k)
		}
		f.call(name, "w1", pb.Outcome_OUTCOME_SUCCESS, took(over))
		if k := f.keysOf(name); len(k) != 1 || k[0] != "state" {
			t.Errorf("a slow success left %v, want the state key (the slow run)", k)
		}
	})
}

func TestSlowProbeIsAFailedProbe(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := slowFixture(t, b, false)
		name := f.Breaker("vendor")
		f.play(name, []slowCall{{"w1", over}, {"w2", over}, {"w1", over}})
		f.Advance(time.Minute) // past the 30s cooldown
		p := f.allow(name, "w3")
		if p.Decision != pb.Decision_DECISION_PROBE {
			t.Fatalf("Allow after the cooldown = %v, want PROBE", p.Decision)
		}
		r := f.record(name, "w3", p.Ticket, pb.Outcome_OUTCOME_SUCCESS, took(25*time.Second))
		if !r.Counted || r.State.State != pb.State_STATE_OPEN || r.State.FailedProbes != 1 {
			t.Fatalf("a probe that took 25s: counted %v, %v, failed probes %d; want counted, OPEN, 1", r.Counted, r.State.State, r.State.FailedProbes)
		}
		if want := name + " still failing: the probe failed (slow success: took 25s, limit 2s); next probe in 1m"; r.State.Reason != want {
			t.Errorf("reason %q, want %q", r.State.Reason, want)
		}
		f.Advance(2 * time.Minute)
		p = f.allow(name, "w3")
		if r := f.record(name, "w3", p.Ticket, pb.Outcome_OUTCOME_SUCCESS, took(atLimit)); r.State.State != pb.State_STATE_CLOSED {
			t.Errorf("a probe that took exactly slow_call: %v, want CLOSED", r.State.State)
		}
	})
}

func TestSlowWindowRate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		calls []slowCall
		want  pb.State
	}{
		// 2 slow of 4 calls from 2 workers: exactly at the rate, trips.
		{"rate at the limit", []slowCall{{"w1", fast}, {"w2", over}, {"w1", fast}, {"w1", over}}, pb.State_STATE_OPEN},
		// 2 of 5: under it.
		{"rate under the limit", []slowCall{{"w1", fast}, {"w2", fast}, {"w1", fast}, {"w2", over}, {"w1", over}}, pb.State_STATE_CLOSED},
		// A latency at slow_call is a call, never a slow one.
		{"at the limit is not slow", []slowCall{{"w1", atLimit}, {"w2", over}, {"w1", atLimit}, {"w1", atLimit}}, pb.State_STATE_CLOSED},
		// Under min_calls, all slow, 2 workers: closed.
		{"one call below min_calls", []slowCall{{"w1", over}, {"w2", over}, {"w1", over}}, pb.State_STATE_CLOSED},
		// Failures and slow calls are separate rates: 1 failure and 1
		// slow call in 4 calls is 0.25 each, under both (counted together
		// they would make 0.5).
		{"failures are not slow calls", []slowCall{{"w1", fail}, {"w2", fast}, {"w1", fast}, {"w2", over}}, pb.State_STATE_CLOSED},
		// 4 slow calls, all from w1: closed, w1 a suspect.
		{"one worker alone", []slowCall{{"w1", over}, {"w1", over}, {"w1", over}, {"w1", over}}, pb.State_STATE_CLOSED},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
				f := slowFixture(t, b, true)
				name := f.Breaker("vendor")
				if r := f.play(name, tc.calls); r.State.State != tc.want {
					t.Fatalf("after %v: %v (%s), want %v", tc.calls, r.State.State, r.State.Reason, tc.want)
				}
			})
		})
	}
}

func TestSlowWindowReasonAndGet(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := slowFixture(t, b, true)
		name := f.Breaker("vendor")
		f.play(name, []slowCall{{"w1", fast}, {"w2", 25 * time.Second}, {"w1", fast}})
		g := f.get(name)
		if g.WindowCalls != 3 || g.WindowFailures != 0 || g.SlowCalls != 1 || !g.WindowMode || g.SlowCallMs != 2000 {
			t.Fatalf("Get: window %d calls, %d failures, %d slow, window_mode %v, slow_call_ms %d; want 3, 0, 1, true, 2000",
				g.WindowCalls, g.WindowFailures, g.SlowCalls, g.WindowMode, g.SlowCallMs)
		}
		r := f.call(name, "w1", pb.Outcome_OUTCOME_SUCCESS, took(27*time.Second))
		want := name + " slow: 2 of 4 calls within the window took longer than 2s (at or above the policy's slow_call_rate), " +
			"from 2 workers: p50 25s over the last 2 calls, limit 2s"
		if r.State.State != pb.State_STATE_OPEN || r.State.Reason != want {
			t.Errorf("Record = %v %q, want OPEN %q", r.State.State, r.State.Reason, want)
		}
		// The window starts empty after the transition.
		if g := f.get(name); g.WindowCalls != 0 || g.SlowCalls != 0 {
			t.Errorf("after the trip: window %d calls, %d slow; want 0, 0", g.WindowCalls, g.SlowCalls)
		}
	})
}
