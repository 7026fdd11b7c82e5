package ceiling_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/ceiling"
	"github.com/breakerd/breakerd/internal/policy"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestAdmitAsksOncePerBreakerAndRefusesPastMax: Admit asks Reserve (the
// store's round trip) until the breaker is registered, then never again;
// a refusal names the ceiling and the count; a Redis error and a breaker
// holding state are admitted; a nil Ceiling admits without asking.
func TestAdmitAsksOncePerBreakerAndRefusesPastMax(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	now := time.UnixMilli(1_000_000)
	var asked int
	var held, admitted bool
	var fail error
	c := ceiling.New(ceiling.Options{Max: 2, Key: "live", Client: rdb, Now: func() time.Time { return now },
		EventRetention: time.Hour,
		Reserve: func(_ context.Context, key, _ string, at, max, until int64) (bool, bool, int64, error) {
			asked++
			if key != "live" || at != now.UnixMilli() || max != 2 || until != at+ceiling.ReserveFor.Milliseconds() {
				t.Errorf("Reserve(%q, now %d, max %d, until %d)", key, at, max, until)
			}
			return held, admitted, 2, fail
		}})

	var ce *ceiling.Error
	if err := c.Admit(ctx, "b"); !errors.As(err, &ce) || ce.Live != 2 || ce.Max != 2 || ce.Breaker != "b" {
		t.Fatalf("Admit past the ceiling = %v, want an *Error for b, live 2, max 2", err)
	}
	fail = errors.New("redis down")
	if err := c.Admit(ctx, "b"); err != nil {
		t.Errorf("Admit on a Redis error = %v, want nil (the call meets the same Redis)", err)
	}
	fail, held = nil, true
	if err := c.Admit(ctx, "b"); err != nil {
		t.Errorf("Admit on a breaker holding state = %v, want nil", err)
	}

	c.Register(ctx, "b", policy.Default(), &pb.BreakerState{Failures: 1}, false)
	if n, err := c.Live(ctx); err != nil || n != 1 {
		t.Fatalf("Live after Register = %d, %v; want 1", n, err)
	}
	before := asked
	held = false
	if err := c.Admit(ctx, "b"); err != nil || asked != before {
		t.Errorf("Admit on a registered breaker = %v after %d Reserve calls, want nil after none", err, asked-before)
	}

	var none *ceiling.Ceiling
	if err := none.Admit(ctx, "x"); err != nil {
		t.Errorf("nil Ceiling's Admit = %v, want nil", err)
	}
	if n, err := none.Live(ctx); n != 0 || err != nil {
		t.Errorf("nil Ceiling's Live = %d, %v; want 0, nil", n, err)
	}
}

// TestRegisterSkipsStatelessBreakersAndPinsNeverExpire: a breaker that
// holds nothing is not registered (no ZADD on the wire); a pin without an
// end is scored +inf.
func TestRegisterSkipsStatelessBreakersAndPinsNeverExpire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	c := ceiling.New(ceiling.Options{Max: 10, Key: "live", Client: rdb, Now: time.Now, EventRetention: time.Hour,
		Reserve: func(context.Context, string, string, int64, int64, int64) (bool, bool, int64, error) {
			return false, true, 0, nil
		}})
	cmds := m.CommandCount()
	c.Register(ctx, "idle", policy.Default(), &pb.BreakerState{State: pb.State_STATE_CLOSED}, false)
	if got := m.CommandCount() - cmds; got != 0 {
		t.Errorf("Register of a breaker holding nothing sent %d commands, want 0", got)
	}
	c.Register(ctx, "pinned", policy.Default(), &pb.BreakerState{State: pb.State_STATE_FORCED_OPEN}, true)
	if s, err := m.ZScore("live", "pinned"); err != nil || s < 1e300 {
		t.Errorf("pin's score = %v, %v; want +inf", s, err)
	}
}
