package store_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// The open-fraction cap (the rule: internal/breaker/cap.go).
// Policy: threshold 2, min_workers 1, jitter 0; one group of the test's
// breakers.

// capFixture returns a fixture whose breakers named f.Breaker(m), for
// each m of members, are the members of one group capped at fraction,
// and the group.
func capFixture(t *testing.T, b *testredis.Backend, fraction float64, members ...string) (*fixture, policy.Group) {
	t.Helper()
	p := policy.Default()
	p.Threshold, p.MinWorkers, p.Jitter = 2, 1, 0
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	g := policy.Group{Name: b.Prefix + "grp", Members: breakers(b, members...), MaxOpenFraction: fraction}
	known, open := store.GroupKeys(g.Name)
	t.Cleanup(func() { _ = b.Client.Del(context.Background(), known, open).Err() })
	return newFixture(t, b, store.Options{Policies: policy.NewSet(p).WithGroups(g)}), g
}

// breakers returns b.Breaker(n) for each n of names.
func breakers(b *testredis.Backend, names ...string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = b.Breaker(n)
	}
	return out
}

// fail records one timeout from worker on name.
func (f *fixture) fail(name, worker string) *pb.RecordResponse {
	f.t.Helper()
	return f.call(name, worker, pb.Outcome_OUTCOME_TIMEOUT)
}

// capEvents returns name's open_fraction_cap events, as reasons.
func (f *fixture) capEvents(name string) []string {
	f.t.Helper()
	var out []string
	for _, e := range f.events(name) {
		if e["kind"] == "open_fraction_cap" {
			out = append(out, e["reason"].(string))
		}
	}
	return out
}

func TestOpenFractionCapBoundary(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f, g := capFixture(t, b, 0.5, "g:0", "g:1", "g:2", "g:3")
		names := make([]string, 4)
		for i := range names {
			names[i] = f.Breaker(fmt.Sprintf("g:%d", i))
			f.fail(names[i], "w1") // one failure each: 4 members known, none open
		}
		if st := f.get(names[0]); st.Group != g.Name || st.MaxOpenFraction != 0.5 || st.GroupKnown != 4 || st.GroupOpen != 0 {
			t.Fatalf("Get = group %q %v, %d known %d open; want %q 0.5, 4 known 0 open", st.Group, st.MaxOpenFraction, st.GroupKnown, st.GroupOpen, g.Name)
		}
		// 1 of 4 open, then 2 of 4: exactly max_open_fraction, not more: both trip.
		for _, n := range names[:2] {
			if r := f.fail(n, "w2"); r.State.State != pb.State_STATE_OPEN || r.State.OpenFractionCapped {
				t.Fatalf("trip of %s: %v capped=%v, want OPEN (at most half the group open)", n, r.State.State, r.State.OpenFractionCapped)
			}
		}
		// 3 of 4 would be more than half: recorded and alerted, not enforced.
		r := f.fail(names[2], "w2")
		if r.State.State != pb.State_STATE_CLOSED || !r.State.OpenFractionCapped || !r.Counted ||
			!strings.Contains(r.Note, "open-fraction cap") {
			t.Fatalf("capped trip = %v capped=%v counted=%v note %q; want CLOSED, capped, counted", r.State.State, r.State.OpenFractionCapped, r.Counted, r.Note)
		}
		if a := f.allow(names[2], "w3"); a.Decision != pb.Decision_DECISION_ALLOWED {
			t.Fatalf("Allow on a capped breaker = %v, want ALLOWED", a.Decision)
		}
		want := fmt.Sprintf("%s: a trip on consecutive failures was stopped by its group's open-fraction cap: 3 of the group's 4 members "+
			"would have been open, more than its max_open_fraction; the breaker stays closed (recorded, not enforced). "+
			"Many breakers tripping at once often means a fault on the callers' side", names[2])
		if got := f.capEvents(names[2]); len(got) != 1 || got[0] != want {
			t.Fatalf("open_fraction_cap events = %q, want one: %q", got, want)
		}
		// Further failures in the same run: still capped, no second alert.
		f.fail(names[2], "w1")
		if got := f.capEvents(names[2]); len(got) != 1 {
			t.Fatalf("after another failure: %d open_fraction_cap events, want still 1", len(got))
		}
		if st := f.get(names[2]); !st.OpenFractionCapped || st.GroupKnown != 4 || st.GroupOpen != 2 {
			t.Fatalf("Get = capped %v, %d known %d open; want capped, 4 known 2 open", st.OpenFractionCapped, st.GroupKnown, st.GroupOpen)
		}
		// One breaker back to closed (an operator's AUTO): 1 of 4 open, so
		// the next failure trips.
		if _, err := f.st.Force(context.Background(), names[0], pb.ForceMode_FORCE_MODE_AUTO, "", 0, "ops"); err != nil {
			t.Fatal(err)
		}
		if r := f.fail(names[2], "w2"); r.State.State != pb.State_STATE_OPEN || r.State.OpenFractionCapped {
			t.Fatalf("after one closed: %v capped=%v, want OPEN", r.State.State, r.State.OpenFractionCapped)
		}
		if st := f.get(names[3]); st.GroupKnown != 4 || st.GroupOpen != 2 {
			t.Fatalf("Get = %d known %d open, want 4 known 2 open", st.GroupKnown, st.GroupOpen)
		}
	})
}

// The first trip in a group is never capped, whatever the fraction.
func TestOpenFractionCapFirstTrip(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f, _ := capFixture(t, b, 0.01, "g:a", "g:c")
		a, c := f.Breaker("g:a"), f.Breaker("g:c")
		f.fail(a, "w1")
		if r := f.fail(a, "w2"); r.State.State != pb.State_STATE_OPEN {
			t.Fatalf("first trip: %v, want OPEN", r.State.State)
		}
		f.fail(c, "w1")
		if r := f.fail(c, "w2"); r.State.State != pb.State_STATE_CLOSED || !r.State.OpenFractionCapped {
			t.Fatalf("second trip at 0.01: %v capped=%v, want CLOSED and capped", r.State.State, r.State.OpenFractionCapped)
		}
		// A breaker outside the group is never capped.
		out := f.Breaker("other")
		f.fail(out, "w1")
		if r := f.fail(out, "w2"); r.State.State != pb.State_STATE_OPEN || r.State.Group != "" {
			t.Fatalf("breaker in no group: %v group %q, want OPEN and no group", r.State.State, r.State.Group)
		}
	})
}

// In shadow mode the cap runs as enforced mode would: a shadow-open
// breaker counts as open, and the capped trip's event is marked shadow.
func TestOpenFractionCapInShadowMode(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		p := policy.Default()
		p.Threshold, p.MinWorkers, p.Jitter, p.Shadow = 1, 1, 0, true
		g := policy.Group{Name: b.Prefix + "grp", Members: breakers(b, "g:a", "g:c"), MaxOpenFraction: 0.5}
		known, open := store.GroupKeys(g.Name)
		t.Cleanup(func() { _ = b.Client.Del(context.Background(), known, open).Err() })
		f := newFixture(t, b, store.Options{Policies: policy.NewSet(p).WithGroups(g)})
		a, c := f.Breaker("g:a"), f.Breaker("g:c")
		if r := f.fail(a, "w1"); r.State.ShadowState != pb.State_STATE_OPEN || r.State.State != pb.State_STATE_CLOSED {
			t.Fatalf("shadow trip: %v (shadow %v), want closed enforced, open in shadow", r.State.State, r.State.ShadowState)
		}
		r := f.fail(c, "w1")
		if r.State.ShadowState != pb.State_STATE_CLOSED || !r.State.OpenFractionCapped {
			t.Fatalf("second trip: shadow state %v capped=%v, want closed and capped (1 of 2 open already)", r.State.ShadowState, r.State.OpenFractionCapped)
		}
		var marked int
		for _, e := range f.events(c) {
			if e["kind"] == "open_fraction_cap" && e["shadow"] == "1" {
				marked++
			}
		}
		if marked != 1 {
			t.Fatalf("events of %s = %v, want one open_fraction_cap marked shadow", c, f.events(c))
		}
	})
}

// The index follows every transition: half-open and a failed probe stay
// open, a probe's success closes, a pin open counts, a pin closed does
// not, and a breaker whose state expires leaves it.
func TestOpenFractionCapIndexFollowsTransitions(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f, _ := capFixture(t, b, 1, "g:a", "g:c")
		ctx := context.Background()
		a, c := f.Breaker("g:a"), f.Breaker("g:c")
		counts := func(wantKnown, wantOpen int64, when string) {
			t.Helper()
			if st := f.get(c); st.GroupKnown != wantKnown || st.GroupOpen != wantOpen {
				t.Fatalf("%s: %d known %d open, want %d known %d open", when, st.GroupKnown, st.GroupOpen, wantKnown, wantOpen)
			}
		}
		counts(0, 0, "no state")
		f.fail(a, "w1")
		counts(1, 0, "one failure")
		f.fail(a, "w2")
		counts(1, 1, "tripped")
		b.Advance(cooldown)
		p := f.allow(a, "w1")
		if p.Decision != pb.Decision_DECISION_PROBE {
			t.Fatalf("after the cooldown: %v, want PROBE", p.Decision)
		}
		counts(1, 1, "half-open")
		f.record(a, "w1", p.Ticket, pb.Outcome_OUTCOME_TIMEOUT)
		counts(1, 1, "probe failed")
		b.Advance(2 * cooldown)
		p = f.allow(a, "w1")
		f.record(a, "w1", p.Ticket, pb.Outcome_OUTCOME_SUCCESS)
		counts(1, 0, "probe succeeded")
		if _, err := f.st.Force(ctx, c, pb.ForceMode_FORCE_MODE_OPEN, "maintenance", 0, "ops"); err != nil {
			t.Fatal(err)
		}
		counts(2, 1, "c pinned open")
		if _, err := f.st.Force(ctx, c, pb.ForceMode_FORCE_MODE_CLOSED, "vendor fine", 0, "ops"); err != nil {
			t.Fatal(err)
		}
		counts(2, 0, "c pinned closed")
		// A pin with an end leaves the open count when it lapses, with no
		// call on the breaker.
		if _, err := f.st.Force(ctx, c, pb.ForceMode_FORCE_MODE_OPEN, "maintenance", 10*time.Second, "ops"); err != nil {
			t.Fatal(err)
		}
		counts(2, 1, "c pinned open for 10s")
		b.Advance(10 * time.Second)
		counts(2, 0, "c's pin lapsed")
		if _, err := f.st.Force(ctx, c, pb.ForceMode_FORCE_MODE_AUTO, "", 0, "ops"); err != nil {
			t.Fatal(err)
		}
		// AUTO keeps the generation (late tickets stay fenced) for a
		// retention; a keeps its backoff for two of its last open periods
		// (2 × 2 cooldowns), then a retention.
		counts(2, 0, "c automatic")
		b.Advance(f.st.Policy(a).Retention() + 4*cooldown + time.Millisecond)
		counts(0, 0, "both expired")
	})
}

// TestHealthyPairCostGroups: a healthy pair's Redis commands are the same,
// command by command, for a breaker in no group whether or not the policy
// file has groups, and the same for a breaker in a group (a healthy
// breaker holds no state, so it never enters its group's index): groups
// add nothing to the 4-commands-per-healthy-pair target.
func TestHealthyPairCostGroups(t *testing.T) {
	t.Parallel()
	testredis.Real(t)
	addr := ownRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	perPair := func(set *policy.Set, prefix string) map[string]int {
		st := store.New(rdb, store.Options{Policies: set})
		if err := st.Load(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Allow(ctx, prefix+"warm-up", "w1"); err != nil {
			t.Fatal(err)
		}
		before := commandCalls(t, rdb)
		const pairs = 50
		for i := range pairs {
			name := fmt.Sprintf("%s%d", prefix, i%10)
			a, err := st.Allow(ctx, name, "w1")
			if err != nil || a.Decision != pb.Decision_DECISION_ALLOWED {
				t.Fatalf("Allow = %v, %v", a, err)
			}
			if _, err := st.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: "w1", Ticket: a.Ticket,
				Outcome: pb.Outcome_OUTCOME_SUCCESS}); err != nil {
				t.Fatal(err)
			}
		}
		after := commandCalls(t, rdb)
		out := map[string]int{}
		for cmd, n := range after {
			if d := n - before[cmd]; d > 0 && cmd != "info" {
				out[cmd] = d
			}
		}
		return out
	}
	members := []string{"g:warm-up"}
	for i := range 10 {
		members = append(members, fmt.Sprintf("g:%d", i))
	}
	groups := policy.NewSet(policy.Default()).WithGroups(policy.Group{Name: "g", Members: members, MaxOpenFraction: 0.5})
	base := perPair(policy.NewSet(policy.Default()), "b")
	ungrouped := perPair(groups, "b")
	grouped := perPair(groups, "g:")
	t.Logf("commands per 50 healthy pairs: no groups %v, in no group %v, in a group %v", base, ungrouped, grouped)
	total := 0
	for _, n := range base {
		total += n
	}
	if total > 4*50 {
		t.Errorf("a healthy pair costs %.2f commands, want at most 4", float64(total)/50)
	}
	if fmt.Sprint(ungrouped) != fmt.Sprint(base) || fmt.Sprint(grouped) != fmt.Sprint(base) {
		t.Errorf("groups changed a healthy pair's commands: no groups %v, in no group %v, in a group %v", base, ungrouped, grouped)
	}
	if n, _ := rdb.DBSize(ctx).Result(); n != 0 {
		t.Errorf("healthy breakers left %d keys, want none", n)
	}
}

// TestOpenFractionCapConcurrent: 40 breakers of one group, each one
// failure short of tripping, trip at once from 8 goroutines on two stores
// (daemons), with max_open_fraction 0.25. On a single Redis the count and
// the trip are one atomic step: exactly floor(0.25*40) = 10 open. On a
// Cluster the group's counts are read before each trip, so trips in flight
// at once may overshoot: the bound (store/group.go) is the trips in flight
// at once, less one, so at most 10 + 8 - 1 open; the cap stops the rest.
func TestOpenFractionCapConcurrent(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		const breakers, goroutines, fraction = 40, 8, 0.25
		p := policy.Default()
		p.Threshold, p.MinWorkers, p.Jitter = 2, 1, 0
		names := make([]string, breakers)
		for i := range names {
			names[i] = b.Breaker(fmt.Sprintf("g:%02d", i))
		}
		g := policy.Group{Name: b.Prefix + "grp", Members: names, MaxOpenFraction: fraction}
		known, open := store.GroupKeys(g.Name)
		t.Cleanup(func() { _ = b.Client.Del(context.Background(), known, open).Err() })
		set := policy.NewSet(p).WithGroups(g)
		f1 := newFixture(t, b, store.Options{Policies: set})
		st2 := store.New(b.NewClient(t), store.Options{Policies: set, Now: b.Clock(), Rand: func() float64 { return 0 }})
		if err := st2.Load(context.Background()); err != nil {
			t.Fatal(err)
		}
		stores := []*store.Store{f1.st, st2}
		for _, n := range names {
			f1.fail(n, "w1")
		}
		if k, o, err := f1.st.GroupStatus(context.Background(), g.Name); err != nil || k != breakers || o != 0 {
			t.Fatalf("GroupStatus = %d known %d open %v, want %d known 0 open", k, o, err, breakers)
		}
		work := make(chan string)
		var wg sync.WaitGroup
		var mu sync.Mutex
		opened, capped := 0, 0
		for i := range goroutines {
			wg.Add(1)
			go func(st *store.Store) {
				defer wg.Done()
				for name := range work {
					a, err := st.Allow(context.Background(), name, "w2")
					if err != nil {
						t.Error(err)
						return
					}
					r, err := st.Record(context.Background(), &pb.RecordRequest{Breaker: name, WorkerId: "w2", Ticket: a.Ticket,
						Outcome: pb.Outcome_OUTCOME_TIMEOUT})
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					if r.State.State == pb.State_STATE_OPEN {
						opened++
					} else if r.State.OpenFractionCapped {
						capped++
					}
					mu.Unlock()
				}
			}(stores[i%2])
		}
		for _, n := range names {
			work <- n
		}
		close(work)
		wg.Wait()
		k, o, err := f1.st.GroupStatus(context.Background(), g.Name)
		if err != nil {
			t.Fatal(err)
		}
		limit := int(fraction * breakers)
		if b.Name == "cluster" {
			limit += goroutines - 1
		}
		t.Logf("%s: %d opened, %d capped; the index: %d known, %d open (cap %d, bound %d)", b.Name, opened, capped, k, o,
			int(fraction*breakers), limit)
		if opened+capped != breakers || int(o) != opened || k != breakers {
			t.Errorf("%d opened + %d capped, index %d known %d open; want %d in all, the index agreeing", opened, capped, k, o, breakers)
		}
		if opened > limit {
			t.Errorf("%d breakers opened, past the bound %d (cap %d)", opened, limit, int(fraction*breakers))
		}
		if opened < int(fraction*breakers) {
			t.Errorf("only %d breakers opened, want at least the cap's %d", opened, int(fraction*breakers))
		}
	})
}

// BatchGet reads its breakers and their groups' counts in one round trip
// (a group's counts used to be a read of their own, one per group, after
// the breakers').
func TestBatchGetReadsGroupCountsInOneRoundTrip(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f, g := capFixture(t, b, 0.5, "g:a", "g:c")
		a, c, lone := f.Breaker("g:a"), f.Breaker("g:c"), f.Breaker("lone")
		f.fail(a, "w1")
		f.fail(a, "w1") // threshold 2, min_workers 1: open
		f.fail(c, "w1") // known, closed
		f.ResetCounts()
		sts, err := f.st.BatchGet(context.Background(), []string{a, c, lone})
		if err != nil {
			t.Fatal(err)
		}
		if n := f.RoundTrips(); n != 1 {
			t.Errorf("BatchGet of 3 breakers, 2 in a group: %d round trips, want 1", n)
		}
		for _, st := range sts[:2] {
			if st.Group != g.Name || st.GroupKnown != 2 || st.GroupOpen != 1 {
				t.Errorf("%s: group %q, %d known, %d open; want %q, 2 and 1", st.Breaker, st.Group, st.GroupKnown, st.GroupOpen, g.Name)
			}
		}
		if st := sts[2]; st.Group != "" || st.GroupKnown != 0 {
			t.Errorf("%s, in no group: group %q, %d known", st.Breaker, st.Group, st.GroupKnown)
		}
	})
}
