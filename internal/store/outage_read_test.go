package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestReadsAgreeWithAllowInAnOutage: while Redis is cut off and Allow
// answers from memory, Get, BatchGet and List answer from the same
// memory (a breaker pinned before the cut, one tripped during it), never
// CLOSED for a breaker Allow denies, and send Redis no command.
func TestReadsAgreeWithAllowInAnOutage(t *testing.T) {
	eachServer(t, func(t *testing.T, b *testredis.Backend) {
		f := newOutageFixture(t, b, nil)
		ctx := context.Background()
		forced, search := b.Breaker("forced"), b.Breaker("search")
		if _, err := f.st.Force(ctx, forced, pb.ForceMode_FORCE_MODE_OPEN, "vendor maintenance", 0, "alice"); err != nil {
			t.Fatal(err)
		}
		waitSeen(t, f, forced)
		f.proxy.Cut()
		for _, w := range []string{"w1", "w2", "w1"} { // threshold 3 from 2 workers, in memory
			f.call(search, w, pb.Outcome_OUTCOME_TIMEOUT)
		}
		if a := f.allow(search, "w3"); !a.Degraded || a.Decision != pb.Decision_DECISION_DENIED_OPEN {
			t.Fatalf("Allow(search) = %v degraded %v, want a degraded DENIED_OPEN", a.Decision, a.Degraded)
		}
		if a := f.allow(forced, "w3"); !a.Degraded || a.Decision != pb.Decision_DECISION_DENIED_FORCED_OPEN {
			t.Fatalf("Allow(forced) = %v degraded %v, want a degraded DENIED_FORCED_OPEN", a.Decision, a.Degraded)
		}

		b.ResetCounts()
		want := map[string]pb.State{forced: pb.State_STATE_FORCED_OPEN, search: pb.State_STATE_OPEN}
		memory := "cannot reach its Redis"
		for name, state := range want {
			if st := f.get(name); st.State != state || !strings.Contains(st.Reason, memory) {
				t.Errorf("Get(%q) in the outage = %v (%q), want %v from memory", name, st.State, st.Reason, state)
			}
		}
		all, err := f.st.BatchGet(ctx, []string{search, b.Breaker("never-heard"), forced})
		if err != nil {
			t.Fatalf("BatchGet in the outage: %v", err)
		}
		if all[0].State != pb.State_STATE_OPEN || all[1].State != pb.State_STATE_CLOSED || all[2].State != pb.State_STATE_FORCED_OPEN {
			t.Errorf("BatchGet in the outage = %v, %v, %v; want OPEN, CLOSED, FORCED_OPEN", all[0].State, all[1].State, all[2].State)
		}
		listed, err := f.st.List(ctx, pb.State_STATE_OPEN, pb.State_STATE_FORCED_OPEN)
		if err != nil {
			t.Fatalf("List in the outage: %v", err)
		}
		got := map[string]pb.State{}
		for _, st := range listed {
			got[st.Breaker] = st.State
		}
		for name, state := range want {
			if got[name] != state {
				t.Errorf("List in the outage: %q is %v, want %v (listed %v)", name, got[name], state, got)
			}
		}
		if n := b.Commands(); n != 0 {
			t.Errorf("the reads sent Redis %d commands in the outage, want 0", n)
		}
	})
}

// TestReadsAgreeWithAllowOnALostState: Redis lost a breaker this daemon
// heard open; Allow denies it until its probe time, and Get and BatchGet
// show it open, not a fresh CLOSED breaker.
func TestReadsAgreeWithAllowOnALostState(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		name := b.Breaker("forgotten")
		f.trip(name)
		f.hear(name)
		f.forget(name)
		b.Advance(time.Second)
		if a := f.allow(name, "w3"); a.Decision != pb.Decision_DECISION_DENIED_OPEN {
			t.Fatalf("Allow(%q) after Redis lost it = %v, want DENIED_OPEN", name, a.Decision)
		}
		st := f.get(name)
		if st.State != pb.State_STATE_OPEN || !strings.Contains(st.Reason, "lost this breaker's state") || st.DenyUntilMs <= st.AsOfMs {
			t.Errorf("Get(%q) after Redis lost it = %v (%q, deny until %d at %d), want OPEN, denied ahead", name, st.State, st.Reason, st.DenyUntilMs, st.AsOfMs)
		}
		all, err := f.st.BatchGet(context.Background(), []string{name})
		if err != nil || all[0].State != pb.State_STATE_OPEN {
			t.Errorf("BatchGet(%q) after Redis lost it = %v, %v; want OPEN", name, all, err)
		}
		// Past its probe time Redis decides again, and reads say so.
		b.Advance(f.st.Policy(name).CooldownCap)
		if st := f.get(name); st.State != pb.State_STATE_CLOSED {
			t.Errorf("Get(%q) past the probe time = %v, want CLOSED (Redis's)", name, st.State)
		}
	})
}
