package store_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// The stall tests: a Redis that hangs instead of refusing (a link that
// forwards nothing, replies slower than the daemon's decision timeout)
// is an outage too. They run with the Redis tiers (testredis.StallTier).

// daemonOptions are the daemon's client options (internal/daemon
// connect): one retry, one dial, go-redis's read timeout, context
// deadlines honoured.
func daemonOptions(o *redis.Options) {
	o.MaxRetries, o.DialerRetries, o.ContextTimeoutEnabled = 1, 1, true
}

// stallCallerDeadline is a worker client's RPC timeout: the caller's
// budget, far above the daemon's own decision timeout.
const stallCallerDeadline = 2 * time.Second

// allowUntilMemory calls Allow on name as worker w, one call at a time,
// each with the caller's deadline, until one is answered from memory,
// and returns how many failed in a row before it (an answer from Redis,
// a reply the fault did not catch, starts the count again). Every call
// must end before its caller's deadline: an error is the daemon's, never
// DeadlineExceeded. A call that failed because this process ran late (a
// busy host) is not counted: it begins no outage.
func allowUntilMemory(t *testing.T, st *store.Store, name, w string, deadline time.Duration) (failed int) {
	t.Helper()
	for i := 0; ; i++ {
		if i == 50 {
			t.Fatalf("no Allow answered from memory in 50 calls through the stall (%d failed)", failed)
		}
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		a, err := st.Allow(ctx, name, w)
		late := ctx.Err()
		cancel()
		if late != nil || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Allow %d in the stall outlived its caller's deadline (%v): %v, %v", i+1, deadline, a, err)
		}
		if err != nil {
			if !store.RanLate(err) {
				failed++
			}
			continue
		}
		if a.Degraded {
			return failed
		}
		failed = 0
	}
}

// stallCase runs fault on a fixture whose breaker pinned is forced open
// and seeded, then checks that the daemon goes to memory after at most
// OutageTimeouts-1 failed calls, every later call is answered from
// memory (the pinned breaker denied), its outage flips once down and,
// after restore, once back.
func stallCase(t *testing.T, b *testredis.Backend, deadline time.Duration, fault func(f *outageFixture), restore func(f *outageFixture)) {
	f := newOutageFixture(t, b, daemonOptions)
	ctx := context.Background()
	pinned, other := b.Breaker("pinned"), b.Breaker("other")
	if _, err := f.st.Force(ctx, pinned, pb.ForceMode_FORCE_MODE_OPEN, "vendor maintenance", 0, "alice"); err != nil {
		t.Fatal(err)
	}
	waitSeen(t, f, pinned)
	fault(f)
	if failed := allowUntilMemory(t, f.st, other, "w1", deadline); failed > store.OutageTimeouts-1 {
		t.Errorf("%d Allows failed before the stall was taken as an outage, want at most %d", failed, store.OutageTimeouts-1)
	}
	if down := <-f.flips; !down {
		t.Fatalf("OnOutage(%v), want true", down)
	}
	for i := range 20 {
		cctx, cancel := context.WithTimeout(ctx, deadline)
		a, err := f.st.Allow(cctx, pinned, "w2")
		cancel()
		if err != nil || !a.Degraded || a.Decision != pb.Decision_DECISION_DENIED_FORCED_OPEN {
			t.Fatalf("Allow(pinned) %d in the outage = %v, %v; want a degraded DENIED_FORCED_OPEN", i, a.GetDecision(), err)
		}
	}
	restore(f)
	if down := <-f.flips; down {
		t.Fatalf("OnOutage(%v) after the stall ended, want false", down)
	}
	if a, err := f.st.Allow(ctx, pinned, "w1"); err != nil || a.Degraded || a.Decision != pb.Decision_DECISION_DENIED_FORCED_OPEN {
		t.Errorf("Allow(pinned) after the stall = %v, %v; want DENIED_FORCED_OPEN from Redis", a.GetDecision(), err)
	}
	select {
	case down := <-f.flips:
		t.Errorf("a second flip (%v): the outage must flip once down and once back", down)
	default:
	}
}

// TestStallIsAnOutage: a link that forwards nothing (connections kept
// open), with callers that wait seconds: the daemon's own decision
// timeout takes it as an outage, and the calls go to memory.
func TestStallIsAnOutage(t *testing.T) {
	testredis.StallTier(t)
	eachServer(t, func(t *testing.T, b *testredis.Backend) {
		stallCase(t, b, stallCallerDeadline, func(f *outageFixture) { f.proxy.Stall() }, func(f *outageFixture) { f.proxy.Restore(t) })
	})
}

// TestStallWithCallersShorterThanTheBound: callers that stop waiting
// before the daemon's decision timeout still leave it to judge the
// stall: each script outstanding past it counts, whoever waits.
func TestStallWithCallersShorterThanTheBound(t *testing.T) {
	testredis.StallTier(t)
	eachServer(t, func(t *testing.T, b *testredis.Backend) {
		f := newOutageFixture(t, b, daemonOptions)
		name := b.Breaker("search")
		f.proxy.Stall()
		defer f.proxy.Restore(t) // before the client closes: it drains what it sent
		for i := 0; !f.st.Degraded(); i++ {
			if i == 200 {
				t.Fatalf("200 Allows with a 50 ms deadline into a stalled Redis, and no outage")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			_, _ = f.st.Allow(ctx, name, "w1")
			<-ctx.Done()
			cancel()
		}
		if down := <-f.flips; !down {
			t.Fatalf("OnOutage(%v), want true", down)
		}
		a, err := f.st.Allow(context.Background(), name, "w1")
		if err != nil || !a.Degraded {
			t.Errorf("Allow in the outage = %v, %v; want an answer from memory", a, err)
		}
	})
}

// TestSlowRedisIsAnOutage: replies that come back, but later than the
// daemon's decision timeout (a proxy adding latency), are an outage;
// the recovery poll, on fresh connections, waits until they are fast
// again.
func TestSlowRedisIsAnOutage(t *testing.T) {
	testredis.StallTier(t)
	eachServer(t, func(t *testing.T, b *testredis.Backend) {
		stallCase(t, b, stallCallerDeadline, func(f *outageFixture) { f.proxy.Delay(time.Second) },
			func(f *outageFixture) { f.proxy.Delay(0) })
	})
}

// TestStallWithAProbeDue: a breaker open in Redis, its cooldown passed
// during the stall: the daemon answers from memory at once, one caller
// gets the probe and the others are denied (calls at a breaker known
// open stay at the probe rate). On the real Redis only: the in-memory
// breakers run on the store's clock, which the test pins there (on
// miniredis they run on this host's).
func TestStallWithAProbeDue(t *testing.T) {
	testredis.StallTier(t)
	t.Run("redis", func(t *testing.T) {
		b := testredis.Real(t)
		f := newOutageFixture(t, b, daemonOptions)
		defer f.proxy.Restore(t)
		name, other := b.Breaker("vendor"), b.Breaker("other")
		for _, w := range []string{"w1", "w2", "w1"} {
			f.call(name, w, pb.Outcome_OUTCOME_TIMEOUT)
		}
		if st := f.get(name); st.State != pb.State_STATE_OPEN {
			t.Fatalf("after 3 timeouts from 2 workers: %v, want OPEN", st.State)
		}
		waitSeen(t, f, name)
		f.proxy.Stall()
		allowUntilMemory(t, f.st, other, "w1", stallCallerDeadline)
		b.Advance(f.st.Policy(name).CooldownCap + time.Second)
		probes := 0
		for i := range 20 {
			ctx, cancel := context.WithTimeout(context.Background(), stallCallerDeadline)
			a, err := f.st.Allow(ctx, name, "w"+string(rune('a'+i)))
			cancel()
			if err != nil || !a.Degraded {
				t.Fatalf("Allow %d with the probe due = %v, %v; want an answer from memory", i, a, err)
			}
			if a.Decision == pb.Decision_DECISION_ALLOWED || a.Decision == pb.Decision_DECISION_PROBE {
				probes++
			}
		}
		if probes != 1 {
			t.Errorf("%d of 20 callers let through with the probe due, want 1 (the probe)", probes)
		}
	})
}

// TestAnOutageReleasesTheDecisionsOutstanding: a decision sent just
// before its node is taken as down (here by the health check) is
// answered from memory once the outage begins, not when its own bound
// passes: with a bound far past its caller's deadline, it still gets the
// memory's answer.
func TestAnOutageReleasesTheDecisionsOutstanding(t *testing.T) {
	testredis.StallTier(t)
	eachServer(t, func(t *testing.T, b *testredis.Backend) {
		// Neither go-redis's read timeout nor the daemon's bound ends the
		// call before its caller's deadline does.
		f := newOutageFixture(t, b, func(o *redis.Options) {
			daemonOptions(o)
			o.ReadTimeout, o.WriteTimeout = time.Hour, time.Hour
		}, func(o *store.Options) { o.DecisionTimeout = time.Hour })
		ctx := context.Background()
		pinned := b.Breaker("pinned")
		if _, err := f.st.Force(ctx, pinned, pb.ForceMode_FORCE_MODE_OPEN, "vendor maintenance", 0, "alice"); err != nil {
			t.Fatal(err)
		}
		waitSeen(t, f, pinned)
		f.proxy.Stall()
		defer f.proxy.Restore(t)
		type answer struct {
			a   *pb.AllowResponse
			err error
		}
		got := make(chan answer, 1)
		actx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		go func() {
			a, err := f.st.Allow(actx, pinned, "w1")
			got <- answer{a, err}
		}()
		daemontest.Eventually(t, "the Allow's script outstanding on the stalled link", func() bool { return store.Outstanding(f.st) == 1 })
		cctx, ccancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_, err := f.st.Check(cctx)
		ccancel()
		if err == nil {
			t.Fatal("the health check answered through a stalled link")
		}
		if down := <-f.flips; !down {
			t.Fatalf("OnOutage(%v), want true", down)
		}
		r := <-got
		if r.err != nil || !r.a.Degraded || r.a.Decision != pb.Decision_DECISION_DENIED_FORCED_OPEN {
			t.Fatalf("the Allow outstanding when its node went down = %v, %v; want a degraded DENIED_FORCED_OPEN from memory", r.a.GetDecision(), r.err)
		}
	})
}

// stallBefore is a go-redis hook that stalls proxy just before the first
// command named cmd goes out: a Redis that hangs between two commands of
// one call.
type stallBefore struct {
	cmd   string
	proxy *testredis.Proxy
	once  sync.Once
}

func (h *stallBefore) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *stallBefore) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, c redis.Cmder) error {
		if c.Name() == h.cmd {
			h.once.Do(h.proxy.Stall)
		}
		return next(ctx, c)
	}
}

func (h *stallBefore) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestAStallAfterTheScriptKeepsTheBound: the round trips a call waits on
// after its decision script answered (the fleet's clock a suspected loss
// reads, the ceiling's re-scoring) are bounded by the daemon's decision
// bound too: a Redis that stalls just then still leaves the call answered
// long before its caller gives up.
func TestAStallAfterTheScriptKeepsTheBound(t *testing.T) {
	testredis.StallTier(t)
	cases := []struct {
		name string
		cmd  string // stalled just before it goes out
		opts func(o *store.Options, b *testredis.Backend)
		// call prepares its breaker, arms the stall and makes the call.
		call func(t *testing.T, f *outageFixture, arm func(), ctx context.Context)
	}{
		{name: "the clock of a forgotten pin", cmd: "time",
			opts: func(o *store.Options, _ *testredis.Backend) { o.Now = nil }, // the fleet's clock is Redis's
			call: func(t *testing.T, f *outageFixture, arm func(), ctx context.Context) {
				pinned := f.Breaker("pinned")
				if _, err := f.st.Force(context.Background(), pinned, pb.ForceMode_FORCE_MODE_OPEN, "vendor maintenance", 0, "alice"); err != nil {
					t.Fatal(err)
				}
				waitSeen(t, f, pinned)
				f.forget(pinned)
				arm()
				a, err := f.st.Allow(ctx, pinned, "w1")
				if err != nil || a.Decision != pb.Decision_DECISION_DENIED_FORCED_OPEN || !strings.Contains(a.Reason, "lost this breaker's state") {
					t.Errorf("Allow(pinned) after Redis forgot the pin = %v (%q), %v; want DENIED_FORCED_OPEN from what the daemon heard", a.GetDecision(), a.GetReason(), err)
				}
			}},
		{name: "the ceiling's re-scoring", cmd: "zadd",
			opts: func(o *store.Options, b *testredis.Backend) {
				o.MaxBreakers, o.LiveKey = 100, store.LiveKey+":"+b.Prefix
			},
			call: func(t *testing.T, f *outageFixture, arm func(), ctx context.Context) {
				t.Cleanup(func() { _ = f.Client.Del(context.Background(), store.LiveKey+":"+f.Prefix).Err() })
				arm()
				r, err := f.st.Record(ctx, &pb.RecordRequest{Breaker: f.Breaker("search"), WorkerId: "w1", Ticket: &pb.Ticket{},
					Outcome: pb.Outcome_OUTCOME_TIMEOUT, LatencyMs: 1000})
				if err != nil || !r.Counted {
					t.Errorf("Record(timeout) = %v, %v; want it counted", r, err)
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			eachServer(t, func(t *testing.T, b *testredis.Backend) {
				// Only the caller's deadline, far past the bound, would end
				// the round trip otherwise.
				f := newOutageFixture(t, b, func(o *redis.Options) {
					daemonOptions(o)
					o.ReadTimeout, o.WriteTimeout = time.Hour, time.Hour
				}, func(o *store.Options) { c.opts(o, b) })
				defer f.proxy.Restore(t)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				c.call(t, f, func() { f.rdb.AddHook(&stallBefore{cmd: c.cmd, proxy: f.proxy}) }, ctx)
				if ctx.Err() != nil {
					t.Errorf("the call outlived its caller's 30 s: the %s after its script waited on the stall", strings.ToUpper(c.cmd))
				}
			})
		})
	}
}

// TestLateDecisionsOfABusyDaemonAreNoOutage: decisions that outlive the
// bound on the daemon's side (here each waits for the one connection of
// its pool, held by another command) while Redis answers a fresh
// connection are failures, never an outage: the node stays with Redis,
// and once the pool frees, Redis answers again.
func TestLateDecisionsOfABusyDaemonAreNoOutage(t *testing.T) {
	testredis.StallTier(t)
	eachServer(t, func(t *testing.T, b *testredis.Backend) {
		// A bound a busy host's fresh connection answers within half of.
		f := newOutageFixture(t, b, func(o *redis.Options) {
			daemonOptions(o)
			o.PoolSize, o.PoolTimeout = 1, time.Hour
		}, func(o *store.Options) { o.Unpipelined, o.DecisionTimeout = true, time.Second })
		name := b.Breaker("search")
		key := b.Prefix + "held"
		held := make(chan struct{})
		go func() {
			defer close(held)
			_ = f.rdb.BLPop(context.Background(), 0, key).Err() // the pool's one connection, until a push
		}()
		daemontest.Eventually(t, "the pool's one connection held", func() bool {
			st := f.rdb.PoolStats()
			return st.TotalConns == 1 && st.IdleConns == 0
		})
		for i := range store.OutageTimeouts + 1 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			a, err := f.st.Allow(ctx, name, "w1")
			cancel()
			if err == nil {
				t.Fatalf("Allow %d answered (%v, degraded %v) while the pool's connection was held", i+1, a.GetDecision(), a.GetDegraded())
			}
			if !store.IsUnavailable(err) {
				t.Fatalf("Allow %d = %v, want Unavailable at the bound", i+1, err)
			}
		}
		if err := f.Client.LPush(context.Background(), key, "free").Err(); err != nil {
			t.Fatal(err)
		}
		<-held
		select {
		case down := <-f.flips:
			t.Fatalf("OnOutage(%v) while Redis answered a fresh connection", down)
		default:
		}
		if a, err := f.st.Allow(context.Background(), name, "w1"); err != nil || a.Degraded {
			t.Errorf("Allow once the pool freed = %v, %v; want Redis's answer", a, err)
		}
	})
}

// TestStallThatHealsIsOneOutage: a link that stalls and then heals
// without closing its connections (what was sent meanwhile never gets a
// reply until go-redis's read timeout): the node is back for the
// decisions only once their pipeline, held by the batch stuck on an old
// connection, answers too, not when a fresh connection does. One flip
// each way, then every call is answered from Redis.
func TestStallThatHealsIsOneOutage(t *testing.T) {
	testredis.StallTier(t)
	eachServer(t, func(t *testing.T, b *testredis.Backend) {
		f := newOutageFixture(t, b, func(o *redis.Options) {
			daemonOptions(o)
			o.ReadTimeout, o.WriteTimeout = 3*time.Second, 3*time.Second
		})
		name := b.Breaker("search")
		f.proxy.Stall()
		defer f.proxy.Restore(t) // before the client closes: it drains what it sent
		allowUntilMemory(t, f.st, name, "w1", stallCallerDeadline)
		if down := <-f.flips; !down {
			t.Fatalf("OnOutage(%v), want true", down)
		}
		f.proxy.Resume()
		if down := <-f.flips; down {
			t.Fatalf("OnOutage(%v) after the link healed, want false", down)
		}
		// A busy host may make a healed Redis's answer late (past the
		// bound, node up): not memory, not a flip; the calls go on until
		// 20 are answered from Redis, and a node that never answers in
		// time fails the test at 20 late ones.
		for answered, late := 0, 0; answered < 20; {
			ctx, cancel := context.WithTimeout(context.Background(), stallCallerDeadline)
			a, err := f.st.Allow(ctx, name, "w1")
			cancel()
			switch {
			case store.IsLate(err) && late < 20:
				late++
			case err != nil || a.Degraded:
				t.Fatalf("Allow after the link healed (%d answered, %d late) = %v, %v; want an answer from Redis", answered, late, a, err)
			default:
				answered++
			}
		}
		select {
		case down := <-f.flips:
			t.Errorf("a second flip (%v): the outage must flip once down and once back", down)
		default:
		}
	})
}

// TestExistsDuringAStall: the new-breaker quota's read (Exists, which a
// call naming a breaker past its token's quota waits on before its
// Allow) is a call's too: in a stall it ends within the daemon's
// decision bound, never at its caller's deadline, and once the node is
// in an outage it sends Redis nothing, so that the Allow behind it is
// answered from memory.
func TestExistsDuringAStall(t *testing.T) {
	testredis.StallTier(t)
	eachServer(t, func(t *testing.T, b *testredis.Backend) {
		f := newOutageFixture(t, b, daemonOptions)
		name := b.Breaker("search")
		f.proxy.Stall()
		defer f.proxy.Restore(t)
		ctx, cancel := context.WithTimeout(context.Background(), stallCallerDeadline)
		_, err := f.st.Exists(ctx, name)
		late := ctx.Err()
		cancel()
		if err == nil || late != nil {
			t.Fatalf("Exists in a stall: %v, the caller's deadline %v; want an error within the decision bound", err, late)
		}
		allowUntilMemory(t, f.st, name, "w1", stallCallerDeadline)
		b.ResetCounts()
		ok, err := f.st.Exists(context.Background(), name)
		if err != nil || !ok {
			t.Errorf("Exists in the outage: %v, %v; want true (not Redis's to say: its node is out)", ok, err)
		}
		if n := b.Commands(); n != 0 {
			t.Errorf("Exists in the outage sent %d commands, want 0", n)
		}
	})
}

// TestAQuotaReadAndItsDecisionShareOneBound: a call whose decision began
// most of a bound ago (store.DecisionBegun: the new-breaker quota read
// first) gets what is left of the bound, not a fresh one: with Redis
// answering later than that, its script is judged stalled, and the call
// ends within one bound of its start.
func TestAQuotaReadAndItsDecisionShareOneBound(t *testing.T) {
	testredis.StallTier(t)
	eachServer(t, func(t *testing.T, b *testredis.Backend) {
		f := newOutageFixture(t, b, daemonOptions)
		name := b.Breaker("search")
		bound := store.DefaultDecisionTimeout
		f.proxy.Delay(bound / 5) // each way: an answer 2/5 of a bound late
		defer f.proxy.Restore(t)
		ctx := store.DecisionBegun(context.Background(), time.Now().Add(-bound))
		_, err := f.st.Allow(ctx, name, "w1")
		if err == nil || !store.IsUnavailable(err) || !strings.Contains(err.Error(), "decision timeout") {
			t.Fatalf("Allow a bound after its decision began, Redis 2/5 of it late: %v; want it judged stalled on what was left", err)
		}
	})
}
