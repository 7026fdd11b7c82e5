package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

func (f *fixture) readEvents(q store.EventQuery) []*pb.Event {
	f.t.Helper()
	evs, err := f.st.Events(context.Background(), q)
	if err != nil {
		f.t.Fatalf("Events(%+v): %v", q, err)
	}
	return evs
}

// brief is what a test compares of an event.
type brief struct {
	Breaker  string
	Kind     pb.EventKind
	From, To pb.State
	Gen      int64
	Actor    string
}

func briefs(evs []*pb.Event, prefix string) []brief {
	var out []brief
	for _, e := range evs {
		if strings.HasPrefix(e.Breaker, prefix) {
			out = append(out, brief{strings.TrimPrefix(e.Breaker, prefix), e.Kind, e.From, e.To, e.Generation, e.Actor})
		}
	}
	return out
}

const (
	closed   = pb.State_STATE_CLOSED
	open     = pb.State_STATE_OPEN
	halfOpen = pb.State_STATE_HALF_OPEN
	transit  = pb.EventKind_EVENT_KIND_TRANSITION
	forced   = pb.EventKind_EVENT_KIND_FORCED
)

func TestEventsReadsOneBreakersLogOldestFirst(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		name := f.Breaker("web_search")
		if got := f.readEvents(store.EventQuery{Breaker: name}); len(got) != 0 {
			t.Fatalf("Events of a breaker never used = %v, want none", got)
		}
		f.trip(name)
		f.Advance(cooldown)
		p := f.allow(name, "w1")
		f.record(name, "w1", p.Ticket, pb.Outcome_OUTCOME_SUCCESS)
		f.Advance(10 * time.Minute)
		if _, err := f.st.Force(context.Background(), name, pb.ForceMode_FORCE_MODE_OPEN, "vendor maintenance", 0, "ops"); err != nil {
			t.Fatal(err)
		}
		b.ResetCounts()
		all := f.readEvents(store.EventQuery{Breaker: name})
		if n := b.RoundTrips(); n != 1 {
			t.Errorf("Events of one breaker took %d round trips, want 1", n)
		}
		want := []brief{
			{"web_search", transit, closed, open, 1, "w2"},
			{"web_search", transit, open, halfOpen, 2, "w1"},
			{"web_search", transit, halfOpen, closed, 3, "w1"},
			{"web_search", forced, closed, pb.State_STATE_FORCED_OPEN, 4, "ops"},
		}
		if diff := cmp.Diff(want, briefs(all, b.Prefix)); diff != "" {
			t.Fatalf("Events (-want +got):\n%s", diff)
		}
		first := all[0]
		if first.Id == "" || first.AtMs == 0 || first.Failures != 5 || first.DistinctWorkers != 2 ||
			first.CooldownMs != 30000 || !strings.Contains(first.Reason, "5 consecutive failures") {
			t.Errorf("trip event = %v, want id, at_ms, 5 failures from 2 workers, 30s cooldown and the reason", first)
		}
		if got := briefs(f.readEvents(store.EventQuery{Breaker: name, Limit: 2}), b.Prefix); !cmp.Equal(want[2:], got) {
			t.Errorf("Events(limit 2) = %v, want the 2 most recent, oldest first: %v", got, want[2:])
		}
		if got := briefs(f.readEvents(store.EventQuery{Breaker: name, Since: 5 * time.Minute}), b.Prefix); !cmp.Equal(want[3:], got) {
			t.Errorf("Events(since 5m) = %v, want only the force 10m after the rest: %v", got, want[3:])
		}
	})
}

func TestEventsMergesEveryBreakerByTime(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		a, c := f.Breaker("a"), f.Breaker("c")
		force := func(name string, mode pb.ForceMode) {
			t.Helper()
			f.Advance(time.Second)
			if _, err := f.st.Force(context.Background(), name, mode, "drill", 0, "ops"); err != nil {
				t.Fatal(err)
			}
		}
		force(a, pb.ForceMode_FORCE_MODE_OPEN)
		force(c, pb.ForceMode_FORCE_MODE_OPEN)
		force(a, pb.ForceMode_FORCE_MODE_AUTO)
		force(c, pb.ForceMode_FORCE_MODE_CLOSED)
		// Other tests share a real Redis: read enough to hold theirs too.
		got := briefs(f.readEvents(store.EventQuery{Limit: store.MaxEventsLimit}), b.Prefix)
		want := []brief{
			{"a", forced, closed, pb.State_STATE_FORCED_OPEN, 1, "ops"},
			{"c", forced, closed, pb.State_STATE_FORCED_OPEN, 1, "ops"},
			{"a", forced, pb.State_STATE_FORCED_OPEN, closed, 2, "ops"},
			{"c", forced, pb.State_STATE_FORCED_OPEN, pb.State_STATE_FORCED_CLOSED, 2, "ops"},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Events of every breaker (-want +got):\n%s", diff)
		}
	})
}

func TestEventsDecodesTheLogStrictlyButToleratesNewKinds(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		name := f.Breaker("x")
		key := store.EventsKey(name)
		ctx := context.Background()
		f.Client.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: []any{"breaker", name, "kind", "from_the_future", "gen", "7", "at_ms", "1"}})
		got := f.readEvents(store.EventQuery{Breaker: name})
		if len(got) != 1 || got[0].Kind != pb.EventKind_EVENT_KIND_UNSPECIFIED || got[0].Generation != 7 {
			t.Fatalf("Events = %v, want one entry of unspecified kind at generation 7", got)
		}
		if b.Mini == nil {
			// A malformed entry would break other tests' fleet-wide reads
			// of the shared Redis: miniredis covers it.
			return
		}
		f.Client.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: []any{"breaker", name, "kind", "forced", "gen", "seven"}})
		if _, err := f.st.Events(ctx, store.EventQuery{Breaker: name}); err == nil || !strings.Contains(err.Error(), "gen") {
			t.Errorf("Events over a malformed entry: err = %v, want one naming the field", err)
		}
	})
}

func TestSetPoliciesAppliesToTheNextCall(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{})
		name := f.Breaker("web_search")
		if r := f.call(name, "w1", pb.Outcome_OUTCOME_TIMEOUT); r.State.State != closed {
			t.Fatalf("default policy: one failure gave %v, want CLOSED", r.State.State)
		}
		strict := policy.Default()
		strict.Threshold, strict.MinWorkers = 2, 1
		f.st.SetPolicies(policy.NewSet(strict))
		if r := f.call(name, "w1", pb.Outcome_OUTCOME_TIMEOUT); r.State.State != open {
			t.Fatalf("after SetPolicies(threshold 2, min_workers 1): second failure gave %v, want OPEN", r.State.State)
		}
		f.st.SetPolicies(nil)
		if got := f.st.Policy(name).Threshold; got != 2 {
			t.Errorf("SetPolicies(nil) changed the threshold to %d; want it ignored", got)
		}
	})
}
