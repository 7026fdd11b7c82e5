package client

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/limits"
	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Fast mode, with the wire as witness: the daemon's RPC counter and the
// Redis commands its store sends. These tests are fast mode's alone: they
// count what the view saves (Allow RPCs, successes not sent), which strict
// mode by design does not.

// fastDial dials a fast-mode client on clk (the test moves it with the
// backend's clock: a fast client times an open period on its own clock).
func fastDial(t *testing.T, addr, worker string, clk *fakeClock, opts ...Option) *Client {
	t.Helper()
	c := dial(t, addr, worker, append([]Option{WithFastMode(), WithClock(clk)}, opts...)...)
	eventually(t, worker+"'s fast view is live", func() bool { return c.view.live.Load() })
	return c
}

// known waits until c's view holds name at breakerd's current state and
// generation, with its failure run as breakerd has it. A view that holds
// nothing of name for a second (an event made it forget the breaker, as
// designed, after the Allow that taught it) is made to read it again, as
// its next Allow would, without taking a probe's lease as an Allow might.
func known(t *testing.T, d *daemontest.Daemon, c *Client, name string) {
	t.Helper()
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var last struct {
		e  *entry
		st *pb.BreakerState
	}
	defer func() {
		if t.Failed() {
			if last.e != nil {
				t.Logf("last seen: %s's view %+v (snapshot %v); breakerd %v", c.WorkerID(), *last.e, last.e.st, last.st)
			} else {
				t.Logf("last seen: %s's view holds nothing of %s; breakerd %v", c.WorkerID(), name, last.st)
			}
		}
	}()
	var forgot time.Time
	eventually(t, c.WorkerID()+" sees "+name+" as breakerd has it", func() bool {
		st, err := d.Store.Get(context.Background(), name)
		if err != nil {
			return false
		}
		e := c.view.get(name)
		last.e, last.st = e, st
		switch {
		case e != nil:
			forgot = time.Time{}
		case forgot.IsZero():
			forgot = time.Now()
		case time.Since(forgot) >= time.Second:
			c.goRefresh(name)
			forgot = time.Now()
		}
		return e != nil && agrees(e, st)
	})
}

// agrees reports whether a view entry holds st's state, generation and,
// when closed, its run (failures or slow calls) and its suspect worker.
func agrees(e *entry, st *pb.BreakerState) bool {
	v, _ := breaker.ViewOfProto(st)
	if e.gen != st.GetGeneration() || e.state != st.GetState() || e.v.State != v.State {
		return false
	}
	if v.State != string(breaker.Closed) {
		return true
	}
	return e.run == (st.GetFailures() > 0 || st.GetSuspectWorker() != "" || st.GetSlowCalls() > 0) &&
		e.v.Suspect == st.GetSuspectWorker() && e.v.SuspectUntil == st.GetSuspectUntilMs()
}

func advanceAll(b *testredis.Backend, d time.Duration, clks ...*fakeClock) {
	b.Advance(d)
	for _, c := range clks {
		c.Advance(d)
	}
}

func TestFastClosedAllowMakesNoRPCAndHealthySuccessesAreNotSent(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := start(t, b, withAlternatives())
		clk := newFakeClock()
		w1 := fastDial(t, d.Addr, "w1", clk)
		w2 := dial(t, d.Addr, "w2") // strict: starts a failure run
		name := b.Breaker("search")
		ctx := context.Background()
		ok := func(context.Context) error { return nil }

		// The first Allow asks breakerd (the view does not know it yet).
		if err := w1.Call(ctx, name, ok); err != nil {
			t.Fatal(err)
		}
		if got := d.Calls.Get("Allow"); got != 1 {
			t.Fatalf("first Allow: %d Allow RPCs, want 1", got)
		}
		known(t, d, w1, name)
		allows, batches := d.Calls.Get("Allow"), d.Calls.Get("RecordBatch")
		b.ResetCounts()
		for range 100 {
			if err := w1.Call(ctx, name, ok); err != nil {
				t.Fatal(err)
			}
		}
		if err := w1.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if got := d.Calls.Get("Allow") - allows; got != 0 {
			t.Errorf("100 calls on a closed breaker the view knows: %d Allow RPCs, want 0", got)
		}
		if got := d.Calls.Get("RecordBatch") - batches; got != 0 {
			t.Errorf("100 healthy successes: %d RecordBatch RPCs, want 0 (nothing to change)", got)
		}
		if got := b.Commands(); got != 0 {
			t.Errorf("100 healthy calls: %d Redis commands, want 0", got)
		}
		if got := w1.Stats().SuccessesSkipped; got < 100 {
			t.Errorf("SuccessesSkipped = %d, want >= 100", got)
		}

		// Another worker's failure starts a run: the notice reaches w1's
		// view, and w1's next success goes out and resets the run.
		fail := func(context.Context) error {
			return &OutcomeError{Outcome: pb.Outcome_OUTCOME_SERVER_ERROR, Message: "HTTP 503"}
		}
		_ = w2.Call(ctx, name, fail)
		eventually(t, "the run_started notice reaches w1", func() bool {
			e := w1.view.get(name)
			return e != nil && e.run
		})
		if err := w1.Call(ctx, name, ok); err != nil {
			t.Fatal(err)
		}
		if err := w1.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if got := d.Calls.Get("RecordBatch") - batches; got != 1 {
			t.Errorf("a success during a failure run: %d RecordBatch RPCs, want 1", got)
		}
		if st := state(t, d, name); st.GetFailures() != 0 {
			t.Errorf("after w1's success: %d failures, want the run reset to 0", st.GetFailures())
		}
		eventually(t, "the run ended in w1's view", func() bool {
			e := w1.view.get(name)
			return e != nil && !e.run
		})
		skipped := w1.Stats().SuccessesSkipped
		if err := w1.Call(ctx, name, ok); err != nil {
			t.Fatal(err)
		}
		if got := w1.Stats().SuccessesSkipped - skipped; got != 1 {
			t.Errorf("a success after the run ended: skipped %d, want 1", got)
		}
	})
}

func TestFastTripByOthersReachesTheViewAndDeniesWithoutRPC(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := start(t, b, withAlternatives("alt_search"))
		clk := newFakeClock()
		w3 := fastDial(t, d.Addr, "w3", clk)
		w1, w2 := dial(t, d.Addr, "w1"), dial(t, d.Addr, "w2")
		name := b.Breaker("search")
		ctx := context.Background()
		if _, err := w3.Allow(ctx, name); err != nil {
			t.Fatal(err)
		}
		known(t, d, w3, name)
		trip(t, w1, w2, name)
		eventually(t, "the trip reaches w3's view", func() bool {
			e := w3.view.get(name)
			return e != nil && e.state == pb.State_STATE_OPEN
		})
		allows := d.Calls.Get("Allow")
		p, err := w3.Allow(ctx, name)
		if err != nil || p.Decision != pb.Decision_DECISION_DENIED_OPEN || !p.Cached {
			t.Fatalf("Allow after the trip: %+v, %v; want a DENIED_OPEN from the view", p, err)
		}
		if p.RetryAfter <= 0 || p.RetryAfter > 30*time.Second {
			t.Errorf("RetryAfter %v, want within the 30s cooldown", p.RetryAfter)
		}
		if got := d.Calls.Get("Allow") - allows; got != 0 {
			t.Errorf("a denial from the view: %d Allow RPCs, want 0", got)
		}
		ran := false
		if err := w3.Call(ctx, name, func(context.Context) error { ran = true; return nil }); err == nil || ran {
			t.Errorf("Call on the open circuit: %v (ran %v), want a denial and fn not run", err, ran)
		}
	})
}

func TestFastHalfOpenProbeGoesToBreakerdOneFleetWide(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := start(t, b, withAlternatives())
		clk := newFakeClock()
		name := b.Breaker("search")
		ctx := context.Background()
		var fleet []*Client
		for _, w := range []string{"f1", "f2", "f3", "f4"} {
			c := fastDial(t, d.Addr, w, clk)
			if _, err := c.Allow(ctx, name); err != nil {
				t.Fatal(err)
			}
			fleet = append(fleet, c)
		}
		trip(t, dial(t, d.Addr, "w1"), dial(t, d.Addr, "w2"), name)
		for _, c := range fleet {
			known(t, d, c, name)
		}
		advanceAll(b, 31*time.Second, clk)
		allows := d.Calls.Get("Allow")
		var probes atomic.Int64
		var wg sync.WaitGroup
		permits := make([]*Permit, len(fleet))
		for i, c := range fleet {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p, err := c.Allow(ctx, name)
				if err != nil {
					t.Error(err)
					return
				}
				permits[i] = p
				if p.Decision == pb.Decision_DECISION_PROBE {
					probes.Add(1)
				}
			}()
		}
		wg.Wait()
		if got := probes.Load(); got != 1 {
			t.Fatalf("%d PROBEs across 4 fast clients, want exactly 1", got)
		}
		if got := d.Calls.Get("Allow") - allows; got < 1 {
			t.Errorf("the due probe: %d Allow RPCs, want the lease taken at breakerd", got)
		}
		for i, p := range permits {
			if p.Decision == pb.Decision_DECISION_PROBE {
				if _, err := fleet[i].Record(ctx, p, Result{Outcome: pb.Outcome_OUTCOME_SUCCESS}); err != nil {
					t.Fatal(err)
				}
				if err := fleet[i].Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		if st := state(t, d, name); st.GetState() != pb.State_STATE_CLOSED {
			t.Fatalf("after the probe's success: %v, want CLOSED", st.GetState())
		}
		for _, c := range fleet {
			known(t, d, c, name)
		}
		allows = d.Calls.Get("Allow")
		for _, c := range fleet {
			if p, err := c.Allow(ctx, name); err != nil || p.Decision != pb.Decision_DECISION_ALLOWED {
				t.Errorf("%s after the close: %+v, %v", c.WorkerID(), p, err)
			}
		}
		if got := d.Calls.Get("Allow") - allows; got != 0 {
			t.Errorf("closed again: %d Allow RPCs, want 0", got)
		}
	})
}

// blockingBatches is a fake breakerd whose RecordBatch waits for release
// and counts the outcomes it receives.
type blockingBatches struct {
	pb.UnimplementedBreakerServiceServer
	release             chan struct{}
	successes, failures atomic.Int64
	probes              atomic.Int64
	batches             atomic.Int64 // RecordBatch calls received, counted before they wait
}

func (f *blockingBatches) Watch(_ *pb.WatchRequest, s pb.BreakerService_WatchServer) error {
	<-s.Context().Done()
	return nil
}

func (f *blockingBatches) RecordBatch(ctx context.Context, req *pb.RecordBatchRequest) (*pb.RecordBatchResponse, error) {
	f.batches.Add(1)
	<-f.release
	out := &pb.RecordBatchResponse{}
	for _, r := range req.GetRecords() {
		switch {
		case r.GetTicket().GetLeaseToken() != "":
			f.probes.Add(1)
		case r.GetOutcome() == pb.Outcome_OUTCOME_SUCCESS:
			f.successes.Add(1)
		default:
			f.failures.Add(1)
		}
		out.Results = append(out.Results, &pb.RecordResponse{})
	}
	return out, nil
}

func TestFastQueueOverflowDropsOnlySuccesses(t *testing.T) {
	t.Parallel()
	f := &blockingBatches{release: make(chan struct{})}
	addr := serveFake(t, f)
	// The first batch waits at breakerd until release, however long the
	// queue takes to fill on a busy machine: a send given up on would free
	// its room in the queue.
	c := dial(t, addr, "w1", WithFastMode(), WithRecordTimeout(time.Hour))
	ctx := context.Background()
	extra, failures, probes := 300, 500, 3
	// A breaker the view does not know: every success must be sent. The
	// first batch waits at breakerd, so the queue fills.
	p := &Permit{Breaker: "b", Decision: pb.Decision_DECISION_ALLOWED, Ticket: &pb.Ticket{}}
	for range FastQueueLimit + extra {
		if _, err := c.Record(ctx, p, Result{Outcome: pb.Outcome_OUTCOME_SUCCESS}); err != nil {
			t.Fatal(err)
		}
	}
	// The queue is full: failures still go in (and Record returns at once).
	for range failures {
		if _, err := c.Record(ctx, p, Result{Outcome: pb.Outcome_OUTCOME_TIMEOUT}); err != nil {
			t.Fatal(err)
		}
	}
	for range probes {
		p := &Permit{Breaker: "b", Decision: pb.Decision_DECISION_PROBE, Ticket: &pb.Ticket{Generation: 3, LeaseToken: "lease"}}
		if _, err := c.Record(ctx, p, Result{Outcome: pb.Outcome_OUTCOME_SUCCESS}); err != nil {
			t.Fatal(err)
		}
	}
	close(f.release)
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	st := c.Stats()
	if got := f.successes.Load(); got != FastQueueLimit || st.SuccessesDropped != int64(extra) {
		t.Errorf("breakerd got %d successes and %d were dropped, want %d and %d (the queue's bound)",
			got, st.SuccessesDropped, FastQueueLimit, extra)
	}
	if got := f.failures.Load(); got != int64(failures) {
		t.Errorf("breakerd got %d failures, want all %d: failures are never dropped", got, failures)
	}
	if got := f.probes.Load(); got != int64(probes) {
		t.Errorf("breakerd got %d probe outcomes, want all %d", got, probes)
	}
}

// Closing the client ends its sending: against a daemon that stalls, the
// batch in flight is the last one sent, however long the queue behind it
// (what is left goes nowhere, as Close says).
func TestFastCloseEndsSending(t *testing.T) {
	t.Parallel()
	f := &blockingBatches{release: make(chan struct{})}
	addr := serveFake(t, f)
	c := dial(t, addr, "w1", WithFastMode(), WithRecordTimeout(time.Hour))
	ctx := context.Background()
	p := &Permit{Breaker: "b", Decision: pb.Decision_DECISION_ALLOWED, Ticket: &pb.Ticket{}}
	for range 4 * limits.MaxBatch {
		if _, err := c.Record(ctx, p, Result{Outcome: pb.Outcome_OUTCOME_TIMEOUT}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the first batch to reach breakerd", func() bool { return f.batches.Load() > 0 })
	c.cancel() // as Close does once its Flush has given up
	close(f.release)
	c.wg.Wait()
	if n := f.batches.Load(); n != 1 {
		t.Errorf("breakerd got %d RecordBatch calls, want 1: the one in flight when the client closed", n)
	}
}

// BenchmarkFastAllow is an Allow answered by the fast-mode view: a closed
// breaker the view knows (target: under 1µs, no RPC).
func BenchmarkFastAllow(b *testing.B) {
	be := testredis.Mini(b)
	d := daemontest.Start(b, be, withAlternatives())
	c, err := Dial(d.Addr, WithWorkerID("bench"), WithFastMode(), WithAllowBudget(testBudget))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	name := be.Breaker("search")
	ctx := context.Background()
	for c.view.get(name) == nil || !c.view.live.Load() {
		if _, err := c.Allow(ctx, name); err != nil {
			b.Fatal(err)
		}
		time.Sleep(time.Millisecond) // the first resync
	}
	allows := d.Calls.Get("Allow")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if p, err := c.Allow(ctx, name); err != nil || !p.Allowed() {
				b.Fatalf("%+v, %v", p, err)
			}
		}
	})
	if got := d.Calls.Get("Allow") - allows; got != 0 {
		b.Fatalf("%d Allow RPCs during the benchmark, want 0", got)
	}
}

func TestFastOutcomesPastTheirGenerationAreNotSent(t *testing.T) {
	t.Parallel()
	f := &blockingBatches{release: make(chan struct{})}
	close(f.release)
	c := dial(t, serveFake(t, f), "w1", WithFastMode())
	ctx := context.Background()
	// The view has seen the breaker trip past generation 3 (a storm's
	// queued failures, once the trip is known).
	c.view.set("b", newEntry("b", &pb.BreakerState{Breaker: "b", State: pb.State_STATE_OPEN, Generation: 4}, time.Now()))
	old := &Permit{Breaker: "b", Decision: pb.Decision_DECISION_ALLOWED, Ticket: &pb.Ticket{Generation: 3}}
	for range 10 {
		if _, err := c.Record(ctx, old, Result{Outcome: pb.Outcome_OUTCOME_TIMEOUT}); err != nil {
			t.Fatal(err)
		}
	}
	// A 429 acts whatever the generation (it may push the next probe).
	if _, err := c.Record(ctx, old, Result{Outcome: pb.Outcome_OUTCOME_RATE_LIMITED, RetryAfter: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got, st := f.failures.Load(), c.Stats(); got != 1 || st.StaleNotSent != 10 {
		t.Errorf("breakerd got %d outcomes, %d not sent as stale; want 1 (the 429) and 10", got, st.StaleNotSent)
	}
}

// TestFastWindowModeSendsEverySuccess: in window mode every success moves
// the failure rate, so a fast client skips none (the window's calls at
// breakerd count them), and a failure rate built from failures alone
// cannot trip the breaker behind the fleet's back.
func TestFastWindowModeSendsEverySuccess(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		p := policy.Default()
		p.Jitter, p.Mode, p.Window, p.FailureRate, p.MinCalls = 0, "window", time.Minute, 0.5, 4
		d := start(t, b, store.Options{Policies: policy.NewSet(p)})
		clk := newFakeClock()
		w1 := fastDial(t, d.Addr, "w1", clk)
		name := b.Breaker("search")
		ctx := context.Background()
		ok := func(context.Context) error { return nil }
		if err := w1.Call(ctx, name, ok); err != nil {
			t.Fatal(err)
		}
		known(t, d, w1, name)
		if e := w1.view.get(name); e == nil || !e.window {
			t.Fatalf("the view of a window-mode breaker: %+v, want it marked window", e)
		}
		for range 5 {
			if err := w1.Call(ctx, name, ok); err != nil {
				t.Fatal(err)
			}
		}
		if err := w1.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if got := w1.Stats().SuccessesSkipped; got != 0 {
			t.Errorf("SuccessesSkipped = %d in window mode, want 0", got)
		}
		if st := state(t, d, name); st.GetWindowCalls() != 6 || !st.GetWindowMode() {
			t.Errorf("window at breakerd: %d calls (window mode %v), want all 6 successes counted", st.GetWindowCalls(), st.GetWindowMode())
		}
	})
}

// An answer about a breaker the view does not hold yet, fenced by an event
// about it that the view could not apply (it did not use the breaker when
// the event came), leaves the view knowing nothing: the view reads the
// breaker again instead of waiting for the next Allow. Seen under load: a
// peer's run_started reached w2 while w2's first Allow was in flight, and
// w2's view never learned the trip that followed.
func TestFastFencedFirstAnswerIsReadAgain(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := start(t, b, withAlternatives())
		w := dial(t, d.Addr, "w1")
		c := fastDial(t, d.Addr, "w2", newFakeClock())
		name := b.Breaker("search")
		ctx := context.Background()
		p, err := w.Allow(ctx, name) // breakerd's answer, as w2's first Allow would get it
		if err != nil {
			t.Fatal(err)
		}
		ver, all := c.view.stamp(name)
		c.onEvent(&pb.Event{Breaker: name, Kind: pb.EventKind_EVENT_KIND_RUN_STARTED, Generation: p.State.GetGeneration()})
		if c.view.get(name) != nil {
			t.Fatalf("an event about an unused breaker made an entry")
		}
		gets := d.Calls.Get("BatchGet")
		c.fastLearn(p, ver, all, time.Now())
		eventually(t, "the view reads the fenced breaker again", func() bool { return c.view.get(name) != nil })
		if n := d.Calls.Get("BatchGet") - gets; n != 1 {
			t.Errorf("the fenced answer cost %d BatchGet RPCs, want 1", n)
		}
		known(t, d, c, name)

		// An answer fenced by an event the view did apply costs nothing.
		ver, all = c.view.stamp(name)
		c.onEvent(&pb.Event{Breaker: name, Kind: pb.EventKind_EVENT_KIND_RUN_ENDED, Generation: p.State.GetGeneration()})
		gets = d.Calls.Get("BatchGet")
		c.fastLearn(p, ver, all, time.Now())
		if err := c.Close(); err != nil { // waits for any background read
			t.Fatal(err)
		}
		if n := d.Calls.Get("BatchGet") - gets; n != 0 {
			t.Errorf("an answer fenced by an applied event cost %d BatchGet RPCs, want 0", n)
		}
	})
}

// TestFastSendsSlowSuccesses: with the policy's slow_call, a success that
// took longer (on the client's clock) is sent even while the view shows
// the breaker closed with no run, and the fast successes after it are
// sent until the slow run has ended; then they are skipped again.
func TestFastSendsSlowSuccesses(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		p := policy.Default()
		p.Jitter, p.MinWorkers, p.SlowCall, p.SlowCallThreshold = 0, 2, 2*time.Second, 3
		d := start(t, b, store.Options{Policies: policy.NewSet(p)})
		clk := newFakeClock()
		w1 := fastDial(t, d.Addr, "w1", clk)
		w2 := fastDial(t, d.Addr, "w2", clk)
		name := b.Breaker("search")
		ctx := context.Background()
		ok := func(context.Context) error { return nil }
		atLimit := func(context.Context) error { clk.Advance(2 * time.Second); return nil }
		slow := func(context.Context) error { clk.Advance(25 * time.Second); return nil }
		call := func(c *Client, fn func(context.Context) error) {
			t.Helper()
			if err := c.Call(ctx, name, fn); err != nil {
				t.Fatal(err)
			}
			if err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		call(w1, ok)
		call(w2, ok)
		known(t, d, w1, name)
		known(t, d, w2, name)
		if e := w1.view.get(name); e == nil || e.slowMs != 2000 {
			t.Fatalf("the view of a breaker with slow_call 2s: %+v, want slowMs 2000", e)
		}
		// Successes skipped from here on, beyond those before.
		base := w1.Stats().SuccessesSkipped
		skipped := func() int64 { return w1.Stats().SuccessesSkipped - base }
		call(w1, atLimit) // exactly at slow_call: not slow, skipped
		if got := skipped(); got != 1 {
			t.Fatalf("SuccessesSkipped = %d after a success at slow_call, want 1", got)
		}
		call(w1, slow)
		if got := skipped(); got != 1 {
			t.Errorf("SuccessesSkipped = %d after a slow success, want still 1 (sent)", got)
		}
		if st := state(t, d, name); st.GetSlowCalls() != 1 {
			t.Fatalf("slow_calls at breakerd = %d, want 1", st.GetSlowCalls())
		}
		call(w1, ok) // ends the slow run: sent
		if st := state(t, d, name); st.GetSlowCalls() != 0 || skipped() != 1 {
			t.Fatalf("after a fast success: slow_calls %d, skipped %d; want 0 and 1", st.GetSlowCalls(), skipped())
		}
		known(t, d, w1, name)
		call(w1, ok) // no run again: skipped
		if got := skipped(); got != 2 {
			t.Errorf("SuccessesSkipped = %d once the slow run ended, want 2", got)
		}
		// 3 slow calls from 2 workers trip the breaker.
		call(w1, slow)
		call(w2, slow)
		call(w1, slow)
		if st := state(t, d, name); st.GetState() != pb.State_STATE_OPEN {
			t.Errorf("after 3 slow calls from 2 workers: %v (slow_calls %d), want OPEN", st.GetState(), st.GetSlowCalls())
		}
	})
}

// A transition event that reaches the view after an answer read later
// than it (the trip's event, behind the RecordBatch answer that tripped
// the breaker) changes nothing: applied, it would start the open period
// again on the client's clock and deny past the probe's time. Seen under
// load in TestProbeInFlightDeniesOthers/fast.
func TestFastLateTransitionEventDoesNotRestartTheOpenPeriod(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := start(t, b, withAlternatives())
		w1, w2 := dial(t, d.Addr, "w1"), dial(t, d.Addr, "w2")
		clk := newFakeClock()
		c := fastDial(t, d.Addr, "f1", clk)
		name := b.Breaker("search")
		ctx := context.Background()
		watcher := watchFor(t, w1, name)
		if _, err := c.Allow(ctx, name); err != nil {
			t.Fatal(err)
		}
		known(t, d, c, name)
		trip(t, w1, w2, name)
		var opened *pb.Event
		for opened == nil {
			m, err := watcher.stream.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if m.GetEvent() != nil && m.GetEvent().GetTo() == pb.State_STATE_OPEN {
				opened = m.GetEvent()
			}
		}
		known(t, d, c, name)
		advanceAll(b, 31*time.Second, clk)
		if p, err := c.Allow(ctx, name); err != nil || p.Decision != pb.Decision_DECISION_PROBE {
			t.Fatalf("after the cooldown: %+v, %v; want PROBE", p, err)
		}
		known(t, d, c, name) // half-open, with the probe: the answer is read after the trip
		c.onEvent(opened)    // the trip's event again, late
		allows := d.Calls.Get("Allow")
		p, err := c.Allow(ctx, name)
		if err != nil || p.Decision != pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT {
			t.Fatalf("after a late trip event: %+v, %v; want breakerd's DENIED_PROBE_IN_FLIGHT", p, err)
		}
		// The view knows the probe was in flight when it learned the
		// half-open state (its lease lives at least until then), so it may
		// answer itself; otherwise breakerd decides.
		if n := d.Calls.Get("Allow") - allows; n > 1 || n == 0 && !p.Cached {
			t.Errorf("the half-open breaker cost %d Allow RPCs (cached %v), want 1, or 0 from the view", n, p.Cached)
		}
	})
}

// The view keeps the later of two words about a breaker whatever order
// they land in, and times a denial from when its answer was asked for:
// an answer that arrives late (a slow RPC, a background read) neither
// undoes a newer state nor stretches an open period. Seen under load in
// TestProbeInFlightDeniesOthers/fast: a read from before the cooldown's
// end, learned after it, denied for another full cooldown.
func TestFastViewKeepsTheLaterWordAndTimesFromTheAsk(t *testing.T) {
	t.Parallel()
	v := newView()
	open := &pb.BreakerState{State: pb.State_STATE_OPEN, Generation: 1, AsOfMs: 1000, NextProbeAtMs: 31_000}
	closed := &pb.BreakerState{State: pb.State_STATE_CLOSED, Generation: 0, Failures: 4, AsOfMs: 1000}
	learn := func(s *pb.BreakerState, sent time.Time) {
		ver, all := v.stamp("x")
		v.learn("x", entryOf(s, 0, 0, sent), ver, all)
	}
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	learn(open, t0)
	learn(closed, t0) // read at the same millisecond, before the trip
	if e := v.get("x"); e.state != pb.State_STATE_OPEN || e.gen != 1 {
		t.Fatalf("an older answer replaced the open state: %v gen %d", e.state, e.gen)
	}
	expired := &pb.BreakerState{State: pb.State_STATE_CLOSED, AsOfMs: 2_000_000} // keys expired: generation 0 again, read later
	learn(expired, t0.Add(time.Hour))
	if e := v.get("x"); e.state != pb.State_STATE_CLOSED || e.gen != 0 {
		t.Fatalf("a later read at generation 0 was refused: %v gen %d", e.state, e.gen)
	}

	// An open answer is timed from when it was asked for (t0), whenever it
	// lands: it denies until t0+30s.
	v = newView()
	learn(open, t0)
	e := v.get("x")
	if until := e.clientTime(e.v.Verdict(breaker.Query{Now: e.redisMs(t0)}).Until); !until.Equal(t0.Add(30 * time.Second)) {
		t.Errorf("open until %v, want %v (30 s from the ask)", until, t0.Add(30*time.Second))
	}
}

// A denial answered from the view or the open cache gives its wait in
// whole milliseconds, as breakerd does (not "retry after
// 35.325830155s" from fast mode beside strict mode's "35.339s").
func TestWholeMsRoundsUp(t *testing.T) {
	t.Parallel()
	for in, want := range map[time.Duration]time.Duration{
		35325830155 * time.Nanosecond: 35326 * time.Millisecond,
		time.Nanosecond:               time.Millisecond,
		2 * time.Second:               2 * time.Second,
	} {
		if got := wholeMs(in); got != want {
			t.Errorf("wholeMs(%v) = %v, want %v", in, got, want)
		}
	}
}

// refusingWatch is a fake breakerd that refuses every Watch and counts
// the attempts.
type refusingWatch struct {
	pb.UnimplementedBreakerServiceServer
	watches atomic.Int64
}

func (f *refusingWatch) Watch(*pb.WatchRequest, pb.BreakerService_WatchServer) error {
	f.watches.Add(1)
	return status.Error(codes.PermissionDenied, "token may not watch")
}

// A fast client whose Watch breakerd refuses says so in Stats, not only
// in its log: the view is not live, and each refusal is counted with its
// error.
func TestFastRefusedWatchShowsInStats(t *testing.T) {
	t.Parallel()
	f := &refusingWatch{}
	addr := serveFake(t, f)
	c := dial(t, addr, "w1", WithFastMode(), WithReconnectInterval(time.Millisecond))
	eventually(t, "two refused Watch streams in Stats", func() bool {
		st := c.Stats()
		return st.WatchBreaks >= 2 && f.watches.Load() >= 2
	})
	st := c.Stats()
	if st.ViewLive {
		t.Error("Stats().ViewLive is true with every Watch refused")
	}
	if !strings.Contains(st.LastWatchError, "PermissionDenied") || !strings.Contains(st.LastWatchError, "token may not watch") {
		t.Errorf("Stats().LastWatchError = %q, want breakerd's PermissionDenied", st.LastWatchError)
	}
	if st.WatchBreaks > f.watches.Load() {
		t.Errorf("%d breaks counted for %d Watch calls", st.WatchBreaks, f.watches.Load())
	}
}
