package client

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/tap"

	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Strict mode only: the open cache is strict mode's (fast mode replaces
// it with its view; TestSlowAnswersAreNotAnOutage and fast_test.go cover that).
func TestOpenCacheAnswersKnownOpenCircuitsWithoutRPCs(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		o := withAlternatives()
		d := start(t, b, o)
		w1, w2 := dial(t, d.Addr, "w1"), dial(t, d.Addr, "w2")
		ctx := context.Background()
		early, late, forced := b.Breaker("early"), b.Breaker("late"), b.Breaker("forced")
		// Open before the client connects: List seeds the cache. The hub must
		// have handed out the opening first, or the cache's own stream could
		// still receive it late (Cluster delivers from another node) and
		// rightly drop the entry List gave it.
		watcher := watchFor(t, w1, early)
		trip(t, w1, w2, early)
		watcher.await(t, pb.State_STATE_OPEN)

		clock := newFakeClock()
		c := dial(t, d.Addr, "agent", WithOpenCache(), WithClock(clock), WithReconnectInterval(20*time.Millisecond))
		eventually(t, "the first resync", func() bool { live, _, _ := c.cache.status(); return live })

		allows := d.Calls.Get("Allow")
		for range 10 {
			p, err := c.Allow(ctx, early)
			if err != nil || p.Decision != pb.Decision_DECISION_DENIED_OPEN || !p.Cached || p.RetryAfter < 29*time.Second {
				t.Fatalf("Allow on a circuit List reported open: %+v, %v; want a cached DENIED_OPEN", p, err)
			}
		}
		ran := false
		if err := c.Call(ctx, early, func(context.Context) error { ran = true; return nil }); ran || !strings.Contains(err.Error(), "it is failing: 5 failed calls in a row") {
			t.Errorf("Call on a cached open circuit: %v (ran %v)", err, ran)
		}
		if n := d.Calls.Get("Allow") - allows; n != 0 {
			t.Errorf("cached denials cost %d Allow RPCs, want 0", n)
		}

		// Opened after connecting: the trip's event carries the state read
		// after it, so the cache denies late with no Allow of its own.
		trip(t, w1, w2, late)
		eventually(t, "the trip's event", func() bool { return c.cache.lookup(late, c.WorkerID(), clock.Now(), fresh) != nil })
		allows = d.Calls.Get("Allow")
		for range 6 {
			if p, err := c.Allow(ctx, late); err != nil || !p.Cached || p.Decision != pb.Decision_DECISION_DENIED_OPEN {
				t.Fatalf("Allow on late: %+v, %v; want a cached DENIED_OPEN", p, err)
			}
		}
		if n := d.Calls.Get("Allow") - allows; n != 0 {
			t.Errorf("6 Allows on late cost %d RPCs, want 0", n)
		}
		// Allowed answers are never cached.
		allows = d.Calls.Get("Allow")
		for range 3 {
			if p, _ := c.Allow(ctx, b.Breaker("healthy")); p.Cached || !p.Allowed() {
				t.Fatalf("healthy: %+v", p)
			}
		}
		if n := d.Calls.Get("Allow") - allows; n != 3 {
			t.Errorf("3 Allows on a closed circuit cost %d RPCs, want 3", n)
		}

		// Any event for the breaker invalidates: an operator closes late.
		if _, err := w1.API().Force(ctx, &pb.ForceRequest{Breaker: late, Mode: pb.ForceMode_FORCE_MODE_AUTO}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the AUTO event", func() bool { return c.cache.lookup(late, c.WorkerID(), clock.Now(), fresh) == nil })
		if p, err := c.Allow(ctx, late); err != nil || p.Decision != pb.Decision_DECISION_ALLOWED {
			t.Errorf("after AUTO: %+v, %v; want ALLOWED from breakerd", p, err)
		}

		// A forced open with no end stays cached across a stream break and
		// is re-read from List when the stream comes back.
		if _, err := w1.API().Force(ctx, &pb.ForceRequest{Breaker: forced, Mode: pb.ForceMode_FORCE_MODE_OPEN, Reason: "vendor maintenance"}); err != nil {
			t.Fatal(err)
		}
		_, syncs, _ := c.cache.status()
		d.Stop()
		d2 := daemontest.StartAt(t, b, o, d.Addr)
		eventually(t, "the resync after the stream broke", func() bool { live, n, _ := c.cache.status(); return live && n > syncs })
		p, err := c.Allow(ctx, forced)
		if err != nil || !p.Cached || p.Decision != pb.Decision_DECISION_DENIED_FORCED_OPEN || !strings.Contains(p.Reason, "vendor maintenance") {
			t.Errorf("forced after the resync: %+v, %v; want a cached DENIED_FORCED_OPEN", p, err)
		}
		if n := d2.Calls.Get("Allow"); n != 0 {
			t.Errorf("the new daemon served %d Allows, want 0", n)
		}

		// The retry_after passes on the client's clock: breakerd decides again.
		clock.Advance(31 * time.Second)
		b.Advance(31 * time.Second)
		if p, err := c.Allow(ctx, early); err != nil || p.Cached || p.Decision != pb.Decision_DECISION_PROBE {
			t.Errorf("early after its retry_after: %+v, %v; want breakerd's PROBE", p, err)
		}
		if n := d2.Calls.Get("Allow"); n != 1 {
			t.Errorf("the new daemon served %d Allows, want 1", n)
		}
	})
}

// A unit test of the open cache (strict mode's), with no client.
func TestOpenCacheSkipsADenialThatRacedAnEvent(t *testing.T) {
	t.Parallel()
	c := newOpenCache()
	c.resync(nil, time.Now())
	deny := &Permit{Breaker: "x", Decision: pb.Decision_DECISION_DENIED_OPEN, RetryAfter: time.Minute,
		Denial: &pb.Denial{Decision: pb.Decision_DECISION_DENIED_OPEN, Status: StatusCircuitOpen, Reason: "it is failing"}}
	epoch := c.begin()
	c.event(&pb.Event{Breaker: "x"}, time.Now()) // the circuit moved while the Allow was in flight
	c.store(deny, "w1", epoch, time.Now())
	if c.lookup("x", "w1", time.Now(), fresh) != nil {
		t.Errorf("a denial older than an event was cached")
	}
	c.store(deny, "w1", c.begin(), time.Now())
	if c.lookup("x", "w2", time.Now(), fresh) == nil {
		t.Errorf("a current denial was not cached for every worker")
	}
	// A suspect denial answers only the worker it was given to (the
	// workers of one connection share the cache: ForWorker).
	c.store(&Permit{Breaker: "s", Decision: pb.Decision_DECISION_DENIED_SUSPECT_WORKER, RetryAfter: time.Minute,
		Denial: &pb.Denial{Decision: pb.Decision_DECISION_DENIED_SUSPECT_WORKER, Status: StatusWorkerIsolated, Reason: "only this worker"}},
		"w1", c.begin(), time.Now())
	if c.lookup("s", "w1", time.Now(), fresh) == nil {
		t.Errorf("w1's suspect denial was not cached for w1")
	}
	if p := c.lookup("s", "w2", time.Now(), fresh); p != nil {
		t.Errorf("w1's suspect denial answered w2: %v", p)
	}
	c.broken()
	c.store(&Permit{Breaker: "y", Decision: pb.Decision_DECISION_DENIED_OPEN, RetryAfter: time.Minute}, "w1", c.begin(), time.Now())
	if c.lookup("y", "w1", time.Now(), fresh) != nil {
		t.Errorf("a denial was cached while the stream was broken")
	}
}

func TestDaemonStoppedMidRunFallsBackToALocalBreaker(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testDaemonStoppedMidRunFallsBackToALocalBreaker(t, m) })
}

func testDaemonStoppedMidRunFallsBackToALocalBreaker(t *testing.T, m *clientMode) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		o := withAlternatives()
		d := start(t, b, o)
		clock := m.clk
		v := newVendor(t, http.StatusServiceUnavailable)
		var hook outages
		c := m.dial(t, d.Addr, "agent", WithClock(clock), WithReconnectInterval(20*time.Millisecond), WithOutageHook(hook.hook))
		ctx := context.Background()
		pay, search := b.Breaker("payments"), b.Breaker("search")
		tools := []Tool{{Name: "refund_charge", Breaker: pay}, {Name: "web_search", Breaker: search}}
		run := NewRun(c)
		if got, err := run.Available(ctx, tools); err != nil || len(got) != 2 {
			t.Fatalf("Available with the daemon up: %s, %v", names(got), err)
		}

		d.Stop() // mid-run
		for i := range 5 {
			var he *HTTPError
			if err := c.Call(ctx, pay, v.call); !errors.As(err, &he) {
				t.Fatalf("call %d with breakerd down: %v, want the vendor's 503 (fail open)", i, err)
			}
		}
		if _, down := c.Unreachable(); !down {
			t.Fatalf("Unreachable() false after the daemon stopped")
		}
		// The local breaker has the same threshold: the sixth call is denied
		// without reaching the vendor, and says so.
		err := c.Call(ctx, pay, v.call)
		var open *CircuitOpenError
		if !errors.As(err, &open) || !open.Degraded || open.Reason != open.Denial.GetReason() || open.Denial.GetStatus() != StatusCircuitOpen {
			t.Fatalf("sixth call: %v, want a degraded *CircuitOpenError", err)
		}
		if den, _ := AsDenial(err, "refund_charge"); !strings.Contains(string(den.JSON()), `"degraded":true`) {
			t.Errorf("denial JSON %s lacks degraded", den.JSON())
		}
		if got := v.hits.Load(); got != 5 {
			t.Errorf("vendor saw %d requests, want 5", got)
		}
		got, err := run.Available(ctx, tools)
		if err != nil || names(got) != "web_search" {
			t.Errorf("Available with breakerd down: %s, %v; want web_search", names(got), err)
		}
		if lost := run.Degraded(); len(lost) != 1 || !lost[0].Degraded || lost[0].Tool != "refund_charge" {
			t.Errorf("Degraded = %+v, want refund_charge judged locally", lost)
		}
		if n := run.Notice(); !strings.Contains(n, "the breaker service is unreachable") {
			t.Errorf("Notice does not say the judgement is local:\n%s", n)
		}

		// Its cooldown runs on the injected clock: one probe, which closes it.
		clock.Advance(31 * time.Second)
		v.status.Store(http.StatusOK)
		if err := c.Call(ctx, pay, v.call); err != nil {
			t.Fatalf("local probe: %v", err)
		}
		if err := c.Call(ctx, pay, v.call); err != nil {
			t.Fatalf("after the local probe succeeded: %v", err)
		}

		// breakerd comes back at the same address: the client returns to it.
		d2 := daemontest.StartAt(t, b, o, d.Addr)
		eventually(t, "the client to reconnect", func() bool { _, down := c.Unreachable(); return !down })
		eventually(t, "the outage hook to hear the return", func() bool { return hook.String() == "[true false]" })
		if n := c.Stats().Outages; n != 1 {
			t.Errorf("Stats().Outages = %d, want 1", n)
		}
		p, err := c.Allow(ctx, pay)
		if err != nil || p.Degraded || d2.Calls.Get("Allow") != 1 {
			t.Errorf("after breakerd returned: %+v, %v (%d Allows served); want breakerd's answer", p, err, d2.Calls.Get("Allow"))
		}
	})
}

func TestFailClosedDeniesWhileTheDaemonIsDown(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testFailClosedDeniesWhileTheDaemonIsDown(t, m) })
}

func testFailClosedDeniesWhileTheDaemonIsDown(t *testing.T, m *clientMode) {
	b := testredis.Mini(t)
	d := start(t, b, withAlternatives())
	c := m.dial(t, d.Addr, "agent", WithFallback(FailClosed))
	v := newVendor(t, http.StatusOK)
	ctx := context.Background()
	name := b.Breaker("payments")
	if err := c.Call(ctx, name, v.call); err != nil {
		t.Fatal(err)
	}
	d.Stop()
	if m.fast {
		// Until the stream's end reaches it, a fast view still answers the
		// closed breaker it knows (fast mode's trade); then breakerd is asked.
		eventually(t, "the view to see the stream end", func() bool { return !c.view.live.Load() })
	}
	err := c.Call(ctx, name, v.call)
	var open *CircuitOpenError
	if !errors.As(err, &open) || !open.Degraded || open.Denial.GetStatus() != StatusCircuitOpen || open.Reason != open.Denial.GetReason() {
		t.Fatalf("fail-closed with breakerd down: %v", err)
	}
	if got := v.hits.Load(); got != 1 {
		t.Errorf("vendor saw %d requests, want 1", got)
	}
	run := NewRun(c)
	got, err := run.Available(ctx, []Tool{{Name: "refund_charge", Breaker: name}})
	if err != nil || len(got) != 0 || len(run.Degraded()) != 1 || !run.Degraded()[0].Degraded {
		t.Errorf("Available fail-closed: %s, %v, %+v; want nothing, degraded", names(got), err, run.Degraded())
	}
	if n := run.Notice(); !strings.Contains(n, "No return time is known. (Judged by this worker alone: the breaker service is unreachable.)") ||
		strings.Contains(n, "operator") {
		t.Errorf("Notice:\n%s", n)
	}
}

// A daemon that accepts connections and never answers: the first RPC
// gives up after the first-contact budget and the fallback answers that
// call; each RPC that then runs out its own timeout is a failure to reach
// breakerd, and after DownAfterFailures of them the fallback answers
// without trying.
func TestFirstContactBudgetBoundsASilentDaemon(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testFirstContactBudgetBoundsASilentDaemon(t, m) })
}

func testFirstContactBudgetBoundsASilentDaemon(t *testing.T, m *clientMode) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			defer conn.Close() // held open, never read
		}
	}()
	c, err := Dial(lis.Addr().String(), append(m.options(), WithWorkerID("agent"), WithFirstContactBudget(100*time.Millisecond), WithRPCTimeout(100*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := c.Allow(ctx, "payments")
	if err != nil || !p.Degraded || p.Decision != pb.Decision_DECISION_ALLOWED {
		t.Fatalf("Allow against a silent daemon: %+v, %v; want a degraded ALLOWED from the local breaker", p, err)
	}
	if ctx.Err() != nil {
		t.Errorf("Allow waited out the caller's minute instead of its budget")
	}
	eventually(t, "the client to give up on the silent daemon", func() bool {
		if p, err := c.Allow(ctx, "payments"); err != nil || !p.Degraded {
			t.Fatalf("Allow against a silent daemon: %+v, %v; want a degraded answer", p, err)
		}
		_, down := c.Unreachable()
		return down
	})
	if n := c.Stats().Outages; n != 1 {
		t.Errorf("Stats().Outages = %d, want 1", n)
	}
}

// stallingServer answers the first Allow and stalls every later one until
// the caller gives up.
type stallingServer struct {
	pb.UnimplementedBreakerServiceServer
	calls atomic.Int64
}

func (s *stallingServer) Allow(ctx context.Context, req *pb.AllowRequest) (*pb.AllowResponse, error) {
	if s.calls.Add(1) == 1 {
		return &pb.AllowResponse{Decision: pb.Decision_DECISION_ALLOWED, Ticket: &pb.Ticket{}}, nil
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// Once breakerd has answered, Allow waits no longer than its budget
// (50ms by default): the first-contact budget and the caller's deadline
// here are far longer, so only the Allow budget can have ended the wait.
func TestAllowBudgetBoundsAStalledDaemon(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testAllowBudgetBoundsAStalledDaemon(t, m) })
}

func testAllowBudgetBoundsAStalledDaemon(t *testing.T, m *clientMode) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &stallingServer{}
	// The witness counts Allow streams as their headers arrive: a handler
	// may run after the client has given up on it, or not at all when the
	// budget ran out before the request's message was sent.
	var streams atomic.Int64
	g := grpc.NewServer(grpc.InTapHandle(func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if info.FullMethodName == pb.BreakerService_Allow_FullMethodName {
			streams.Add(1)
		}
		return ctx, nil
	}))
	pb.RegisterBreakerServiceServer(g, srv)
	go func() { _ = g.Serve(lis) }()
	defer g.Stop()
	c, err := Dial(lis.Addr().String(), append(m.options(), WithWorkerID("agent"), WithFirstContactBudget(time.Minute))...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if p, err := c.Allow(ctx, "payments"); err != nil || p.Degraded {
		t.Fatalf("first Allow: %+v, %v; want breakerd's answer", p, err)
	}
	p, err := c.Allow(ctx, "payments")
	if err != nil || !p.Degraded || ctx.Err() != nil {
		t.Fatalf("Allow against a stalled daemon: %+v, %v (caller's ctx %v); want a degraded answer within the budget", p, err, ctx.Err())
	}
	eventually(t, "the second Allow to reach the daemon", func() bool { return streams.Load() >= 2 })
	if n := streams.Load(); n != 2 {
		t.Errorf("the daemon saw %d Allows, want 2", n)
	}
}

// An event that carries its breaker's state replaces the cache's entry by
// what that state denies, by the machine's read rule: an open breaker is
// cached until its next probe, on this client's clock, with no read.
func TestOpenCacheTakesTheEventsState(t *testing.T) {
	t.Parallel()
	c := newOpenCache()
	now := time.Unix(1000, 0)
	c.resync(nil, now)
	open := &pb.BreakerState{Breaker: "x", State: pb.State_STATE_OPEN, AsOfMs: 5000, NextProbeAtMs: 35000, Reason: "x failing",
		Denial: &pb.Denial{Decision: pb.Decision_DECISION_DENIED_OPEN, Status: StatusCircuitOpen, Reason: "it is failing",
			DenyUntilMs: 35000, MayReturnAtMs: 35000}}
	c.event(&pb.Event{Breaker: "x", State: open}, now)
	p := c.lookup("x", "w1", now.Add(29*time.Second), fresh)
	if p == nil || p.Decision != pb.Decision_DECISION_DENIED_OPEN || p.RetryAfter != time.Second || p.Reason != "it is failing" ||
		p.Denial.GetMayReturnAtMs() != now.Add(30*time.Second).UnixMilli() {
		t.Fatalf("after the event: %+v, want DENIED_OPEN with 1s left", p)
	}
	if p := c.lookup("x", "w1", now.Add(30*time.Second), fresh); p != nil {
		t.Errorf("at its next probe: %+v, want no entry (the probe is due)", p)
	}
	closed := &pb.BreakerState{Breaker: "x", State: pb.State_STATE_CLOSED, AsOfMs: 6000}
	c.event(&pb.Event{Breaker: "x", State: open}, now)
	c.event(&pb.Event{Breaker: "x", State: closed}, now)
	if p := c.lookup("x", "w1", now, fresh); p != nil {
		t.Errorf("after an event closing it: %+v, want no entry", p)
	}
}
