package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// The window mode's behaviour, with exact cases: mode window,
// window 60s, failure_rate 0.5, min_calls 4, min_workers 2, jitter 0.

func windowFixture(t *testing.T, b *testredis.Backend) *fixture {
	t.Helper()
	p := policy.Default()
	p.Mode, p.Window, p.FailureRate, p.MinCalls, p.MinWorkers, p.Jitter = policy.ModeWindow, time.Minute, 0.5, 4, 2, 0
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	return newFixture(t, b, store.Options{Policies: policy.NewSet(p)})
}

// wantWindow fails t unless Get shows state and the window's calls and
// failures.
func (f *fixture) wantWindow(name string, state pb.State, calls, fails int64) {
	f.t.Helper()
	g := f.get(name)
	if g.State != state || g.WindowCalls != calls || g.WindowFailures != fails {
		f.t.Fatalf("Get(%q) = %v, window %d calls %d failures; want %v, %d calls %d failures",
			name, g.State, g.WindowCalls, g.WindowFailures, state, calls, fails)
	}
}

func TestWindowTripsOnRateFromAQuorum(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := windowFixture(t, b)
		name := f.Breaker("vendor")
		const fail, ok = pb.Outcome_OUTCOME_SERVER_ERROR, pb.Outcome_OUTCOME_SUCCESS
		for _, c := range []struct {
			worker  string
			outcome pb.Outcome
		}{{"w1", fail}, {"w2", ok}, {"w1", fail}} {
			if r := f.call(name, c.worker, c.outcome); r.State.State != pb.State_STATE_CLOSED {
				t.Fatalf("Record(%s %v) = %v, want CLOSED (under min_calls)", c.worker, c.outcome, r.State.State)
			}
		}
		f.wantWindow(name, pb.State_STATE_CLOSED, 3, 2)
		r := f.call(name, "w2", fail)
		if r.State.State != pb.State_STATE_OPEN {
			t.Fatalf("after 3 failures in 4 calls from 2 workers: %v, want OPEN", r.State.State)
		}
		want := "it is failing: too many of its recent calls failed, last: server error (5xx)"
		if a := f.allow(name, "w3"); a.Decision != pb.Decision_DECISION_DENIED_OPEN || a.Reason != want {
			t.Errorf("Allow = %v %q, want DENIED_OPEN %q", a.Decision, a.Reason, want)
		}
		// The window starts empty after the transition.
		f.wantWindow(name, pb.State_STATE_OPEN, 0, 0)
		// Calls admitted before the trip count for nothing.
		stale := &pb.Ticket{Generation: r.State.Generation - 1}
		if r := f.record(name, "w1", stale, fail); r.Counted {
			t.Errorf("a failure admitted before the trip was counted: %v", r.Note)
		}
		f.wantWindow(name, pb.State_STATE_OPEN, 0, 0)
	})
}

func TestWindowBoundaries(t *testing.T) {
	t.Parallel()
	const fail, ok = pb.Outcome_OUTCOME_TIMEOUT, pb.Outcome_OUTCOME_SUCCESS
	type call struct {
		worker  string
		outcome pb.Outcome
	}
	for _, tc := range []struct {
		name  string
		calls []call
		want  pb.State
	}{
		// Exactly at the rate (2 of 4 = 0.5) trips.
		{"rate at the limit", []call{{"w1", ok}, {"w2", ok}, {"w1", fail}, {"w2", fail}}, pb.State_STATE_OPEN},
		// Just under it (2 of 5 = 0.4) does not.
		{"rate under the limit", []call{{"w1", ok}, {"w2", ok}, {"w3", ok}, {"w1", fail}, {"w2", fail}}, pb.State_STATE_CLOSED},
		// One call below min_calls, every one failed, 2 workers: closed.
		{"one call below min_calls", []call{{"w1", fail}, {"w2", fail}, {"w1", fail}}, pb.State_STATE_CLOSED},
		// 4 failures, all from w1: closed, w1 a suspect.
		{"one worker alone", []call{{"w1", fail}, {"w1", fail}, {"w1", fail}, {"w1", fail}}, pb.State_STATE_CLOSED},
		// Outcomes that never count are neither calls nor failures.
		{"neutral outcomes", []call{{"w1", fail}, {"w2", fail}, {"w1", pb.Outcome_OUTCOME_INVALID_ARGUMENT}, {"w2", pb.Outcome_OUTCOME_NOT_FOUND}}, pb.State_STATE_CLOSED},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
				f := windowFixture(t, b)
				name := f.Breaker("vendor")
				// w1 keeps one ticket, as calls in flight at once do: a
				// suspect is denied new calls.
				tickets := map[string]*pb.Ticket{}
				var last *pb.RecordResponse
				for _, c := range tc.calls {
					if tickets[c.worker] == nil {
						tickets[c.worker] = f.allow(name, c.worker).Ticket
					}
					last = f.record(name, c.worker, tickets[c.worker], c.outcome)
				}
				if last.State.State != tc.want {
					t.Fatalf("after %v: %v, want %v", tc.calls, last.State.State, tc.want)
				}
			})
		})
	}
}

func TestWindowOneWorkerIsASuspect(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := windowFixture(t, b)
		name := f.Breaker("vendor")
		ticket := f.allow(name, "w1").Ticket
		for range 4 {
			f.record(name, "w1", ticket, pb.Outcome_OUTCOME_TIMEOUT)
		}
		f.wantWindow(name, pb.State_STATE_CLOSED, 4, 4)
		a := f.allow(name, "w1")
		want := "only this worker's calls to it have failed, and no other worker sees it: " +
			"likely this worker's network or configuration; it stays up for the rest of the fleet"
		if a.Decision != pb.Decision_DECISION_DENIED_SUSPECT_WORKER || a.Reason != want || a.GetDenial().GetStatus() != "worker_isolated" {
			t.Errorf("Allow(w1) = %v %q, want DENIED_SUSPECT_WORKER %q", a.Decision, a.Reason, want)
		}
		if a := f.allow(name, "w2"); a.Decision != pb.Decision_DECISION_ALLOWED {
			t.Errorf("Allow(w2) = %v, want ALLOWED", a.Decision)
		}
		var kinds []string
		for _, e := range f.events(name) {
			kinds = append(kinds, e["kind"].(string))
		}
		if len(kinds) != 1 || kinds[0] != "suspect_worker" {
			t.Errorf("events = %v, want one suspect_worker", kinds)
		}
	})
}

func TestWindowForgetsOldBucketsAndRestartsAfterATransition(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := windowFixture(t, b)
		name := f.Breaker("vendor")
		f.call(name, "w1", pb.Outcome_OUTCOME_TIMEOUT)
		f.call(name, "w2", pb.Outcome_OUTCOME_TIMEOUT)
		f.wantWindow(name, pb.State_STATE_CLOSED, 2, 2)
		// A window later (and a bucket, whatever the alignment), the two
		// failures are out of it: two successes make 2 calls, 0 failures,
		// and two more failures (2 of 4) trip only from then on.
		f.Advance(time.Minute + 10*time.Second)
		f.call(name, "w1", pb.Outcome_OUTCOME_SUCCESS)
		f.call(name, "w2", pb.Outcome_OUTCOME_SUCCESS)
		f.wantWindow(name, pb.State_STATE_CLOSED, 2, 0)
		f.call(name, "w1", pb.Outcome_OUTCOME_TIMEOUT)
		f.wantWindow(name, pb.State_STATE_CLOSED, 3, 1)
		// An operator's AUTO is a transition: the window starts empty, so
		// the failure before it does not count after it.
		if _, err := f.st.Force(context.Background(), name, pb.ForceMode_FORCE_MODE_AUTO, "reset", 0, "ops"); err != nil {
			t.Fatal(err)
		}
		f.wantWindow(name, pb.State_STATE_CLOSED, 0, 0)
		for _, w := range []string{"w1", "w2", "w1"} {
			f.call(name, w, pb.Outcome_OUTCOME_SUCCESS)
		}
		if r := f.call(name, "w2", pb.Outcome_OUTCOME_TIMEOUT); r.State.State != pb.State_STATE_CLOSED {
			t.Errorf("1 failure in 4 calls after AUTO: %v, want CLOSED", r.State.State)
		}
	})
}

// TestWindowModeWritesOnEveryCall: the documented exemption from "a
// healthy breaker holds no keys" — the window is a key of its own.
func TestWindowModeWritesOnEveryCall(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := windowFixture(t, b)
		name := f.Breaker("vendor")
		f.call(name, "w1", pb.Outcome_OUTCOME_SUCCESS)
		n, err := f.Client.Exists(context.Background(), store.KeysOf(name).Window).Result()
		if err != nil || n != 1 {
			t.Fatalf("EXISTS window key = %d, %v; want 1 (window mode writes on every call)", n, err)
		}
		if k := f.keysOf(name); len(k) != 0 {
			t.Errorf("a healthy window-mode breaker holds %v besides its window, want nothing", k)
		}
		f.wantWindow(name, pb.State_STATE_CLOSED, 1, 0)
	})
}

// Record's answer carries the window after the call, as Get shows it: a
// counted call, an outcome that never counts (the window read, not
// written) and a trip (the window starts empty).
func TestWindowRecordAnswersWithTheWindow(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := windowFixture(t, b)
		name := f.Breaker("vendor")
		const fail, ok = pb.Outcome_OUTCOME_SERVER_ERROR, pb.Outcome_OUTCOME_SUCCESS
		for i, c := range []struct {
			worker       string
			outcome      pb.Outcome
			calls, fails int64
		}{
			{"w1", fail, 1, 1},
			{"w2", ok, 2, 1},
			{"w2", pb.Outcome_OUTCOME_INVALID_ARGUMENT, 2, 1}, // never counted: neither a call nor a failure
			{"w1", fail, 3, 2},
			{"w2", fail, 0, 0}, // 3 of 4 from 2 workers: open, the window empty
		} {
			r := f.call(name, c.worker, c.outcome)
			if got := r.State; got.WindowCalls != c.calls || got.WindowFailures != c.fails || !got.WindowMode {
				t.Errorf("Record %d (%s %v): window %d calls %d failures (window_mode %v), want %d and %d",
					i+1, c.worker, c.outcome, got.WindowCalls, got.WindowFailures, got.WindowMode, c.calls, c.fails)
			}
		}
		f.wantWindow(name, pb.State_STATE_OPEN, 0, 0)
	})
}
