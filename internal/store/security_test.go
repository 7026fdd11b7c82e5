package store_test

// The bounds on what one worker token can make Redis hold (the threat
// model, docs/security.md "Keys a worker can grow"): each test floods a
// breaker, scaled down, and counts what Redis holds on the wire.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/quorum"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// floodWorkers is how many worker ids one glob token acts as in a flood:
// past quorum.MaxWorkers, by enough to see every set stop at it.
const floodWorkers = quorum.MaxWorkers + 16

// TestSecurityRunSetsBoundedUnderAPin (L5): one token acting as many worker
// ids fails on a breaker an operator pinned closed (it counts and never
// trips). Each run's worker set (failures, counted 429s), the slow run's
// workers and a window's workers stop at quorum.MaxWorkers; the keys keep
// no TTL only because the pin keeps them.
func TestSecurityRunSetsBoundedUnderAPin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	consecutive := policy.Default()
	consecutive.SlowCall = 10 * time.Second
	consecutive.SlowCallThreshold = 3
	window := policy.Default()
	window.Mode, window.Window, window.MinCalls = policy.ModeWindow, time.Minute, 10
	window.SlowCall, window.SlowCallRate = 10*time.Second, 0.5
	limit := float64(quorum.MaxWorkers)
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		for _, tc := range []struct {
			name string
			p    policy.Policy
		}{{"consecutive", consecutive}, {"window", window}} {
			f := newFixture(t, b, store.Options{Policies: policy.NewSet(tc.p)})
			name := f.Breaker("pinned-" + tc.name)
			if _, err := f.st.Force(ctx, name, pb.ForceMode_FORCE_MODE_CLOSED, "maintenance", 0, "ops"); err != nil {
				t.Fatalf("Force: %v", err)
			}
			k := store.KeysOf(name)
			for i := range floodWorkers {
				w := fmt.Sprintf("glob-%03d", i)
				f.call(name, w, pb.Outcome_OUTCOME_TIMEOUT)
				f.call(name, w, pb.Outcome_OUTCOME_RATE_LIMITED, rateLimited(time.Minute, 0))
				f.call(name, w, pb.Outcome_OUTCOME_SUCCESS) // slow: 30s > 10s
			}
			// One more failure run, after the slow calls ended the last.
			for i := range floodWorkers {
				f.call(name, fmt.Sprintf("glob-%03d", i), pb.Outcome_OUTCOME_RATE_LIMITED, rateLimited(time.Minute, 0))
			}
			st := f.get(name)
			if st.State != pb.State_STATE_FORCED_CLOSED {
				t.Fatalf("%s: Get(%q).State = %v, want FORCED_CLOSED", tc.name, name, st.State)
			}
			if tc.p.Mode == policy.ModeWindow {
				fields, err := f.Client.HKeys(ctx, k.Window).Result()
				if err != nil {
					t.Fatal(err)
				}
				var fw, sw float64
				for _, fl := range fields {
					switch {
					case strings.HasPrefix(fl, "w:"):
						fw++
					case strings.HasPrefix(fl, "v:"):
						sw++
					}
				}
				if fw != limit || sw != limit {
					t.Errorf("%s: the window holds %v failing and %v slow workers, want %v each", tc.name, fw, sw, limit)
				}
				continue
			}
			for _, key := range []string{k.Workers, k.RL} {
				n, err := f.Client.SCard(ctx, key).Result()
				if err != nil {
					t.Fatal(err)
				}
				if float64(n) != limit {
					t.Errorf("%s: SCARD %s = %d after %d workers failed, want %v", tc.name, key, n, floodWorkers, limit)
				}
				if ttl := f.Client.PTTL(ctx, key).Val(); ttl != -1 {
					t.Errorf("%s: PTTL %s = %v, want none (the pin keeps it)", tc.name, key, ttl)
				}
			}
			if st.DistinctWorkers != int64(limit) || st.Failures != floodWorkers {
				t.Errorf("%s: distinct_workers %d, failures %d, want %v and %d", tc.name, st.DistinctWorkers, st.Failures, limit, floodWorkers)
			}
		}
	})
}

// TestSecuritySlowRunBoundedUnderAPin (L5): the slow run's workers (stored in
// the state hash) stop at quorum.MaxWorkers too.
func TestSecuritySlowRunBoundedUnderAPin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := policy.Default()
	p.SlowCall, p.SlowCallThreshold = 10*time.Second, 3
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newFixture(t, b, store.Options{Policies: policy.NewSet(p)})
		name := f.Breaker("pinned-slow")
		if _, err := f.st.Force(ctx, name, pb.ForceMode_FORCE_MODE_CLOSED, "maintenance", 0, "ops"); err != nil {
			t.Fatalf("Force: %v", err)
		}
		for i := range floodWorkers {
			f.call(name, fmt.Sprintf("glob-%03d", i), pb.Outcome_OUTCOME_SUCCESS) // slow: 30s > 10s
		}
		by, err := f.Client.HGet(ctx, store.KeysOf(name).State, "slow_by").Result()
		if err != nil {
			t.Fatal(err)
		}
		if n := len(strings.Split(by, "\n")); n != quorum.MaxWorkers {
			t.Errorf("the slow run keeps %d workers after %d slow calls from as many, want %d", n, floodWorkers, quorum.MaxWorkers)
		}
		if st := f.get(name); st.SlowCalls != floodWorkers {
			t.Errorf("slow_calls = %d, want %d (every slow call counts)", st.SlowCalls, floodWorkers)
		}
	})
}

// TestSecurityGroupIndexHoldsOnlyLiveBreakers (M6): one worker fails once on
// each of many breakers of a group. Once their state has expired, the
// group's index holds none of them: each write drops the expired entries,
// so the index is bounded by the group's members holding state, not by
// every member that ever failed. (A name the group does not list never
// enters it: TestSecurityMadeUpBreakerCannotCapARealTrip.)
func TestSecurityGroupIndexHoldsOnlyLiveBreakers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const flood = 40
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		p := policy.Default()
		members := []string{b.Breaker("made-up-last")}
		for i := range flood {
			members = append(members, b.Breaker(fmt.Sprintf("made-up-%03d", i)))
		}
		g := policy.Group{Name: b.Prefix + "grp", Members: members, MaxOpenFraction: 0.5}
		known, open := store.GroupKeys(g.Name)
		t.Cleanup(func() { b.Client.Del(context.Background(), known, open) })
		f := newFixture(t, b, store.Options{Policies: policy.NewSet(p).WithGroups(g)})
		for i := range flood {
			f.call(f.Breaker(fmt.Sprintf("made-up-%03d", i)), "w1", pb.Outcome_OUTCOME_TIMEOUT)
		}
		if n := f.Client.ZCard(ctx, known).Val(); n != flood {
			t.Fatalf("ZCARD %s = %d after %d breakers failed, want %d", known, n, flood, flood)
		}
		f.Advance(2 * p.Retention())
		f.call(f.Breaker("made-up-last"), "w1", pb.Outcome_OUTCOME_TIMEOUT)
		if n := f.Client.ZCard(ctx, known).Val(); n != 1 {
			t.Errorf("ZCARD %s = %d once the %d breakers' state expired and one more failed, want 1", known, n, flood)
		}
	})
}

// TestSecurityEventLogsCountTowardTheCeiling (M6): one token sends a 401 on
// each of many made-up breakers. Each raises credential_revoked, an event
// log kept for the event retention, though the breaker holds no state.
// The ceiling counts each such breaker until its log expires, so past
// --max-breakers no new log is created, however long the flood goes on.
func TestSecurityEventLogsCountTowardTheCeiling(t *testing.T) {
	t.Parallel()
	const ceiling = 4
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		ctx := context.Background()
		var clock atomic.Int64
		clock.Store(time.Now().UnixNano())
		st := ceilingStore(t, b, ceiling, &clock)
		alert := func(name string) error {
			_, err := st.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: "w1", Ticket: &pb.Ticket{},
				Outcome: pb.Outcome_OUTCOME_UNAUTHENTICATED})
			return err
		}
		var names []string
		for round := range 3 {
			for i := range ceiling {
				name := b.Breaker(fmt.Sprintf("made-up-%d-%d", round, i))
				names = append(names, name)
				_ = alert(name) // past the ceiling: refused, and no log made
			}
			// Past the reservation and any state's retention, well within
			// the event retention.
			clock.Add(int64(2*policy.Default().Retention() + 2*time.Minute))
		}
		logs := 0
		for _, name := range names {
			n, err := b.Client.Exists(ctx, store.KeysOf(name).Events).Result()
			if err != nil {
				t.Fatal(err)
			}
			logs += int(n)
		}
		if logs != ceiling {
			t.Errorf("%d event logs after 3 rounds of %d made-up breakers, want %d (the ceiling)", logs, ceiling, ceiling)
		}
		var ce *store.CeilingError
		if err := alert(b.Breaker("one-more")); !errors.As(err, &ce) {
			t.Errorf("a 401 on one more breaker: %v, want a CeilingError", err)
		}
		clock.Add(int64(7 * 24 * time.Hour)) // the event retention: the logs have expired
		if err := alert(b.Breaker("one-more")); err != nil {
			t.Errorf("a 401 on a new breaker once the logs expired: %v", err)
		}
	})
}
