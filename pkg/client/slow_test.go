package client

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// slowEachWay is the latency a delaying proxy adds each way in these
// tests: a round trip 150ms slower than the Allow budget (50ms).
const slowEachWay = 100 * time.Millisecond

// TestSlowDaemonStillGetsEveryRecord: with a daemon whose answers come
// 150ms after the Allow budget, every strict Allow falls to the fallback
// (the calls go out), and every outcome still reaches the daemon, in the
// background once its late answer has come (counted at the daemon).
func TestSlowDaemonStillGetsEveryRecord(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := start(t, b, store.Options{})
		px := testredis.NewDelay(t, d.Addr, 0)
		// The RPC and Record timeouts wide: on a busy host a late answer
		// or its Record may take longer than their defaults, and this is
		// about what is sent, not how fast.
		c := dial(t, px.Addr(), "slow", WithAllowBudget(DefaultAllowBudget), WithRPCTimeout(time.Minute), WithRecordTimeout(time.Minute))
		ctx := context.Background()
		if err := c.Check(ctx); err != nil {
			t.Fatal(err)
		}
		px.SetLatency(slowEachWay)
		v := newVendor(t, 200)
		name := b.Breaker("search")
		const calls = 12
		for range calls {
			if err := c.Call(ctx, name, v.call); err != nil {
				t.Fatal(err)
			}
		}
		st := c.Stats()
		if st.BudgetMisses != calls {
			t.Fatalf("%d of %d Allows missed the budget, want all: the proxy is not slow enough to test anything", st.BudgetMisses, calls)
		}
		eventually(t, "every late answer", func() bool { return c.Stats().LateAnswers == calls })
		_ = c.Close() // waits for the outcomes sent in the background
		if got := d.Calls.Get("Record"); got != calls || v.hits.Load() != calls {
			t.Errorf("%d calls reached the vendor, %d Records the daemon; want %d of each", v.hits.Load(), got, calls)
		}
	})
}

// TestHalfOpenHerdAtASlowDaemon: 10 concurrent callers of one client
// that has heard the trip, at a daemon 150ms slower than the Allow
// budget, once the probe is due: they wait for the daemon, which grants
// one probe; exactly 1 call reaches the vendor (counted there), in
// strict, fast and open-cache modes. The wait is the RPC timeout, made
// wide: a busy host may hold the daemon's answer past the default 2s,
// and the caller then gets the fallback's denial, no probe at all.
func TestHalfOpenHerdAtASlowDaemon(t *testing.T) {
	wait := WithRPCTimeout(time.Minute)
	modes := map[string]func(t *testing.T, addr string, clk *fakeClock) *Client{
		"strict": func(t *testing.T, addr string, clk *fakeClock) *Client {
			return dial(t, addr, "herd", WithClock(clk), WithAllowBudget(DefaultAllowBudget), wait)
		},
		"fast": func(t *testing.T, addr string, clk *fakeClock) *Client {
			return fastDial(t, addr, "herd", clk, WithAllowBudget(DefaultAllowBudget), wait)
		},
		"cached": func(t *testing.T, addr string, clk *fakeClock) *Client {
			c := dial(t, addr, "herd", WithClock(clk), WithOpenCache(), WithAllowBudget(DefaultAllowBudget), wait)
			eventually(t, "the open cache is live", func() bool { live, _, _ := c.cache.status(); return live })
			// An answer from breakerd first, as the other modes get: the
			// Allow after the trip is the cache's, and a client never
			// answered waits the first-contact budget, not the Allow budget.
			if _, err := c.Allow(context.Background(), "warm-up"); err != nil {
				t.Fatal(err)
			}
			return c
		},
	}
	for mode, dialMode := range modes {
		t.Run(mode, func(t *testing.T) {
			b := testredis.Mini(t)
			d := start(t, b, store.Options{})
			px := testredis.NewDelay(t, d.Addr, 0)
			clk := newFakeClock()
			c := dialMode(t, px.Addr(), clk)
			ctx := context.Background()
			name := b.Breaker("vendor")
			trip(t, dial(t, d.Addr, "tripper-1"), dial(t, d.Addr, "tripper-2"), name)
			// The client hears the trip from breakerd (on a busy host an
			// Allow may miss its budget and be the fallback's, degraded).
			eventually(t, "breakerd's DENIED_OPEN after the trip", func() bool {
				p, err := c.Allow(ctx, name)
				return err == nil && p.Decision == pb.Decision_DECISION_DENIED_OPEN && !p.Degraded
			})
			px.SetLatency(slowEachWay)
			st := state(t, d, name)
			wait := time.Duration(st.GetNextProbeAtMs()-st.GetAsOfMs()+1) * time.Millisecond
			b.Advance(wait)
			clk.Advance(wait)

			v := newVendor(t, 503)
			herd(t, c, name, v, 10)
			if n := v.hits.Load(); n != 1 {
				t.Errorf("%d calls of 10 reached the vendor at the due probe, want 1 (the daemon's probe)", n)
			}
		})
	}
}

// herd makes n concurrent Calls of name through c to v and fails the test
// on any error but v's and a denial.
func herd(t *testing.T, c *Client, name string, v *vendor, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.Call(context.Background(), name, v.call)
			if err != nil && !errors.As(err, new(*CircuitOpenError)) && !errors.As(err, new(*ProbeInFlightError)) &&
				!errors.As(err, new(*HTTPError)) {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a call: %v", err)
	}
}

// TestNoDaemonLetsOneCallThroughAKnownOpenBreaker: a client that heard a
// trip, with no daemon answering: the fallback denies until the deny-until
// it heard, and once the probe is due lets one call of 10 concurrent ones
// through until its outcome (counted at the vendor); a failure holds the
// breaker denied again.
func TestNoDaemonLetsOneCallThroughAKnownOpenBreaker(t *testing.T) {
	t.Parallel()
	b := testredis.Mini(t)
	d := start(t, b, store.Options{})
	px := testredis.NewProxy(t, d.Addr)
	clk := newFakeClock()
	c := dial(t, px.Addr(), "alone", WithClock(clk), WithAllowBudget(DefaultAllowBudget))
	ctx := context.Background()
	name := b.Breaker("vendor")
	trip(t, dial(t, d.Addr, "tripper-1"), dial(t, d.Addr, "tripper-2"), name)
	p, err := c.Allow(ctx, name)
	if err != nil || p.Decision != pb.Decision_DECISION_DENIED_OPEN {
		t.Fatalf("Allow(%s) after the trip = %+v, %v; want DENIED_OPEN", name, p, err)
	}
	px.Cut()
	p, err = c.Allow(ctx, name)
	if err != nil || p.Decision != pb.Decision_DECISION_DENIED_OPEN || !p.Degraded {
		t.Fatalf("Allow(%s) with no daemon, before the deny-until = %+v, %v; want a degraded DENIED_OPEN", name, p, err)
	}
	clk.Advance(p.RetryAfter)
	v := newVendor(t, 503)
	herd(t, c, name, v, 10)
	if n := v.hits.Load(); n != 1 {
		t.Fatalf("%d calls of 10 reached the vendor with no daemon at the due probe, want 1", n)
	}
	herd(t, c, name, v, 10)
	if n := v.hits.Load(); n != 1 {
		t.Errorf("%d calls reached the vendor after the one call failed, want still 1", n)
	}
}

// TestHungDaemonCostsTheFirstContactBudgetOnce: a daemon that accepts
// connections and never answers costs the first-contact budget once per
// client, never per call (the budgets the client waited, observed where
// it starts their timers); the client says it cannot reach breakerd once
// however many calls follow, and Check fails naming the address.
func TestHungDaemonCostsTheFirstContactBudgetOnce(t *testing.T) {
	t.Parallel()
	b := testredis.Mini(t)
	d := start(t, b, store.Options{})
	px := testredis.NewProxy(t, d.Addr)
	px.Stall()
	var mu sync.Mutex
	var waits []time.Duration
	observe := func(o *options) {
		o.after = func(_ string, d time.Duration) (<-chan time.Time, func() bool) {
			mu.Lock()
			waits = append(waits, d)
			mu.Unlock()
			t := time.NewTimer(d)
			return t.C, t.Stop
		}
	}
	logs := &daemontest.Buffer{}
	const first = 250 * time.Millisecond // shorter than the default's second of waiting
	c := dial(t, px.Addr(), "hung", WithAllowBudget(DefaultAllowBudget), WithRPCTimeout(100*time.Millisecond),
		WithFirstContactBudget(first), WithLogger(slog.New(slog.NewTextHandler(logs, nil))), observe)
	ctx := context.Background()
	name := b.Breaker("search")
	for range 4 {
		if p, err := c.Allow(ctx, name); err != nil || !p.Degraded || !p.Allowed() {
			t.Fatalf("Allow(%s) at a hung daemon = %+v, %v; want the fallback's ALLOWED", name, p, err)
		}
	}
	// The RPCs those Allows left behind time out after them, each a
	// failure: on a busy host the third may come before the last Allow,
	// which then answers from the fallback without waiting.
	mu.Lock()
	if len(waits) < 2 || waits[0] != first || slices.ContainsFunc(waits[1:], func(d time.Duration) bool { return d != DefaultAllowBudget }) {
		t.Errorf("the 4 Allows waited %v; want the first-contact budget (%s) once, then the Allow budget", waits, first)
	}
	mu.Unlock()
	eventually(t, "the client to take breakerd as unreachable", func() bool { _, down := c.Unreachable(); return down })
	eventually(t, "the client to say breakerd is unreachable", func() bool { return strings.Contains(logs.String(), "breakerd unreachable") })
	for range 20 {
		if _, err := c.Allow(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(logs.String(), "breakerd unreachable"); n != 1 {
		t.Errorf("%d log lines say breakerd is unreachable, want 1:\n%s", n, logs)
	}
	err := c.Check(ctx)
	if err == nil || !strings.Contains(err.Error(), px.Addr()) {
		t.Errorf("Check at a hung daemon = %v, want an error naming %s", err, px.Addr())
	}
	if b := newOptions(nil).firstBudget; b != time.Second {
		t.Errorf("a client's default first-contact budget is %s, want 1s (WithFirstContactBudget's doc)", b)
	}
	if newOptions(nil).logger == nil {
		t.Error("a client's default logger is none: a client that cannot reach breakerd would say nothing")
	}
}

// TestCheckAnswersWhenADaemonServes: Check is nil at a serving daemon
// and an error naming the address where nothing listens.
func TestCheckAnswersWhenADaemonServes(t *testing.T) {
	t.Parallel()
	b := testredis.Mini(t)
	d := start(t, b, store.Options{})
	if err := dial(t, d.Addr, "w").Check(context.Background()); err != nil {
		t.Errorf("Check at a serving daemon: %v", err)
	}
	err := dial(t, "127.0.0.1:1", "w").Check(context.Background())
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("Check where nothing listens = %v, want an error naming 127.0.0.1:1", err)
	}
}

// TestHungDaemonIsFailedOver: a client given two daemons, one of which
// hangs (its proxy stalls: connections stay open, nothing is forwarded),
// goes on through the other: after the calls that found the hung daemon
// first (each passed over once its call outlived the slow mark), the
// calls reach the live daemon (counted there).
func TestHungDaemonIsFailedOver(t *testing.T) {
	t.Parallel()
	b := testredis.Mini(t)
	d1, d2 := start(t, b, store.Options{}), start(t, b, store.Options{})
	px := testredis.NewProxy(t, d1.Addr)
	// A budget a busy host's live daemon always meets: with the default
	// 50 ms, a loaded run saw the live daemon miss it too, and both
	// daemons were passed over in turn.
	c := dial(t, px.Addr()+","+d2.Addr, "w", WithAllowBudget(500*time.Millisecond), WithRPCTimeout(time.Second))
	ctx := context.Background()
	name := b.Breaker("search")
	eventually(t, "both daemons to answer", func() bool {
		_, _ = c.Allow(ctx, name)
		return d1.Calls.Get("Allow") > 0 && d2.Calls.Get("Allow") > 0
	})
	px.Stall()
	const calls = 200
	degraded := 0
	before := d2.Calls.Get("Allow")
	for range calls {
		p, err := c.Allow(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if p.Degraded {
			degraded++
		}
	}
	served := d2.Calls.Get("Allow") - before
	// The live daemon's count is the witness: a busy host can make its
	// answers miss the 50 ms budget (degraded), but only the calls that
	// found the hung daemon first never reach it.
	t.Logf("%d of %d Allows degraded; the live daemon served %d", degraded, calls, served)
	if served < calls-10 {
		t.Errorf("the live daemon served %d of %d Allows (%d degraded): want the hung daemon passed over", served, calls, degraded)
	}
}
