package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// ceilingStore is a store with a ceiling of max live breakers, counted in
// a live set of the test's own, on a clock the test moves (clock).
func ceilingStore(t *testing.T, b *testredis.Backend, max int64, clock *atomic.Int64) *store.Store {
	t.Helper()
	live := store.LiveKey + ":" + b.Prefix
	t.Cleanup(func() { _ = b.Client.Del(context.Background(), live).Err() })
	st := store.New(b.NewClient(t), store.Options{MaxBreakers: max, LiveKey: live, Channel: b.Prefix + "events",
		Rand: func() float64 { return 0 }, Now: func() time.Time { return time.Unix(0, clock.Load()) }})
	if err := st.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	return st
}

func timeout(st *store.Store, name string) (*pb.RecordResponse, error) {
	return st.Record(context.Background(), &pb.RecordRequest{Breaker: name, WorkerId: "w1", Ticket: &pb.Ticket{},
		Outcome: pb.Outcome_OUTCOME_TIMEOUT, LatencyMs: 1000})
}

// TestMaxBreakersRefusesOnlyNewBreakers: past the ceiling a Record that
// would create a new breaker fails with a CeilingError naming the ceiling
// and writes nothing; breakers holding state keep working, Allow and a
// success are never checked (no extra round trip), Force is never refused,
// and the count follows expiry.
func TestMaxBreakersRefusesOnlyNewBreakers(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		ctx := context.Background()
		var clock atomic.Int64
		clock.Store(time.Now().UnixNano())
		st := ceilingStore(t, b, 3, &clock)
		for i := range 3 {
			if _, err := timeout(st, b.Breaker(fmt.Sprint("old", i))); err != nil {
				t.Fatalf("breaker %d of 3: %v", i, err)
			}
		}
		if n, err := st.LiveBreakers(ctx); err != nil || n != 3 {
			t.Fatalf("LiveBreakers = %d, %v; want 3", n, err)
		}
		fresh := b.Breaker("new")
		_, err := timeout(st, fresh)
		var ce *store.CeilingError
		if !errors.As(err, &ce) || ce.Max != 3 || ce.Live != 3 || !strings.Contains(err.Error(), "--max-breakers") {
			t.Fatalf("a 4th breaker: %v, want a CeilingError naming the ceiling of 3", err)
		}
		if n, _ := b.Client.Exists(ctx, store.KeysOf(fresh).State, store.KeysOf(fresh).Events).Result(); n != 0 {
			t.Errorf("the refused breaker holds %d keys, want none", n)
		}
		// Existing breakers keep working past the ceiling.
		if r, err := timeout(st, b.Breaker("old0")); err != nil || r.GetState().GetFailures() != 2 {
			t.Errorf("a breaker holding state, past the ceiling: %v, %v; want its 2nd failure counted", r, err)
		}
		// Allow and a success create no state: not checked, one round trip each.
		b.ResetCounts()
		if _, err := st.Allow(ctx, fresh, "w1"); err != nil {
			t.Errorf("Allow on a new breaker past the ceiling: %v", err)
		}
		if _, err := st.Record(ctx, &pb.RecordRequest{Breaker: fresh, WorkerId: "w1", Ticket: &pb.Ticket{}, Outcome: pb.Outcome_OUTCOME_SUCCESS}); err != nil {
			t.Errorf("a success on a new breaker past the ceiling: %v", err)
		}
		if n := b.RoundTrips(); n != 2 {
			t.Errorf("Allow and a success took %d round trips, want 2 (the ceiling asks nothing for them)", n)
		}
		// An operator's Force is never refused, and counted.
		if _, err := st.Force(ctx, b.Breaker("pinned"), pb.ForceMode_FORCE_MODE_OPEN, "maintenance", 0, "ops"); err != nil {
			t.Fatalf("Force past the ceiling: %v", err)
		}
		if n, _ := st.LiveBreakers(ctx); n != 4 {
			t.Errorf("LiveBreakers after a Force = %d, want 4", n)
		}
		// Twice the retention later the idle breakers have expired from the
		// count (the pin without an end has not), and a new one is admitted.
		clock.Add(int64(2*policy.Default().Retention() + time.Second))
		if n, _ := st.LiveBreakers(ctx); n != 1 {
			t.Errorf("LiveBreakers twice the retention later = %d, want 1 (the pin)", n)
		}
		if _, err := timeout(st, fresh); err != nil {
			t.Errorf("a new breaker once the others expired: %v", err)
		}
	})
}

// In window mode every call writes the breaker's window, a success too:
// each is checked against the ceiling, and a window breaker admitted is
// counted (a fault this holds: five window breakers past a ceiling of 2,
// none counted, and the 3rd one's own first failure refused).
func TestMaxBreakersCountsWindowModeBreakers(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		ctx := context.Background()
		var clock atomic.Int64
		clock.Store(time.Now().UnixNano())
		win := policy.Default()
		win.Mode, win.Window, win.FailureRate, win.MinCalls = policy.ModeWindow, time.Minute, 0.5, 4
		live := store.LiveKey + ":" + b.Prefix
		t.Cleanup(func() { _ = b.Client.Del(context.Background(), live).Err() })
		st := store.New(b.NewClient(t), store.Options{MaxBreakers: 2, LiveKey: live, Channel: b.Prefix + "events",
			Policies: policy.NewSet(win), Rand: func() float64 { return 0 }, Now: func() time.Time { return time.Unix(0, clock.Load()) }})
		if err := st.Load(ctx); err != nil {
			t.Fatal(err)
		}
		ok := func(name string) error {
			_, err := st.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: "w1", Ticket: &pb.Ticket{}, Outcome: pb.Outcome_OUTCOME_SUCCESS})
			return err
		}
		for i := range 2 {
			if err := ok(b.Breaker(fmt.Sprint("win", i))); err != nil {
				t.Fatalf("window breaker %d of 2: %v", i, err)
			}
		}
		if n, err := st.LiveBreakers(ctx); err != nil || n != 2 {
			t.Fatalf("LiveBreakers after 2 window breakers' successes = %d, %v; want 2", n, err)
		}
		third := b.Breaker("win2")
		var ce *store.CeilingError
		if err := ok(third); !errors.As(err, &ce) {
			t.Fatalf("a success on a 3rd window breaker: %v, want a CeilingError", err)
		}
		if n, _ := b.Client.Exists(ctx, store.KeysOf(third).Window).Result(); n != 0 {
			t.Errorf("the refused window breaker holds its window")
		}
		// A registered one goes on with no check: one round trip a call.
		b.ResetCounts()
		if err := ok(b.Breaker("win0")); err != nil {
			t.Fatal(err)
		}
		if n := b.RoundTrips(); n != 1 {
			t.Errorf("a success on a counted window breaker took %d round trips, want 1", n)
		}
	})
}

// TestMaxBreakersBoundUnderConcurrentCreators: 2 daemons (stores with
// their own connections), 16 goroutines each creating new breakers at
// once, a ceiling of 40. The fleet ends exactly at the ceiling, counted
// both in the live set and as breakers holding state in Redis; every
// refused breaker holds nothing. (Before reserve.lua a pipelined count let
// the daemons overshoot under load: 57 and 58 were seen.)
func TestMaxBreakersBoundUnderConcurrentCreators(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		const ceiling, creators, each = 40, 16, 8
		ctx := context.Background()
		var clock atomic.Int64
		clock.Store(time.Now().UnixNano())
		stores := []*store.Store{ceilingStore(t, b, ceiling, &clock), nil}
		// The second daemon counts in the same live set.
		live := store.LiveKey + ":" + b.Prefix
		stores[1] = store.New(b.NewClient(t), store.Options{MaxBreakers: ceiling, LiveKey: live, Channel: b.Prefix + "events",
			Rand: func() float64 { return 0 }, Now: func() time.Time { return time.Unix(0, clock.Load()) }})
		if err := stores[1].Load(ctx); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var created, refused []string
		var wg sync.WaitGroup
		start := make(chan struct{})
		for d, st := range stores {
			for g := range creators {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for i := range each {
						name := b.Breaker(fmt.Sprintf("d%d-g%02d-%d", d, g, i))
						_, err := timeout(st, name)
						mu.Lock()
						if err == nil {
							created = append(created, name)
						} else if errors.As(err, new(*store.CeilingError)) {
							refused = append(refused, name)
						} else {
							t.Errorf("%s: %v", name, err)
						}
						mu.Unlock()
					}
				}()
			}
		}
		close(start)
		wg.Wait()
		held := 0
		for _, n := range created {
			if ok, err := stores[0].Exists(ctx, n); err != nil {
				t.Fatal(err)
			} else if ok {
				held++
			}
		}
		for _, n := range refused {
			if ok, _ := stores[0].Exists(ctx, n); ok {
				t.Errorf("refused breaker %s holds state", n)
			}
		}
		count, err := stores[0].LiveBreakers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d attempts: %d created (%d hold state), %d refused; the live set counts %d; ceiling %d",
			2*creators*each, len(created), held, len(refused), count, ceiling)
		// Every admitted call creates its breaker, and the count and the
		// reservation are one script: exactly the ceiling's number.
		if held != ceiling || len(created) != ceiling || count != int64(ceiling) {
			t.Errorf("%d admitted, %d hold state, the live set counts %d; want exactly the ceiling, %d, of each", len(created), held, count, ceiling)
		}
		if len(refused) != 2*creators*each-ceiling {
			t.Errorf("%d refused of %d attempts, want %d", len(refused), 2*creators*each, 2*creators*each-ceiling)
		}
	})
}
