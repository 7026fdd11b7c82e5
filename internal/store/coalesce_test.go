package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// gate is a go-redis hook that, once armed, holds the next script sent
// (go-redis sends a batch of one as a single command, a larger one as a
// pipeline) until the test opens it, so that the calls made meanwhile
// queue behind it.
type gate struct {
	armed   atomic.Bool
	entered chan struct{}
	open    chan struct{}
}

func (g *gate) hold(cmd redis.Cmder) {
	if cmd.Name() == "evalsha" && g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.open
	}
}

func newGate() *gate { return &gate{entered: make(chan struct{}), open: make(chan struct{})} }

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		g.hold(cmd)
		return next(ctx, cmd)
	}
}

func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 {
			g.hold(cmds[0])
		}
		return next(ctx, cmds)
	}
}

// coalesceFixture is a store on its own counted client with a gate.
func coalesceFixture(t *testing.T, b *testredis.Backend) (*store.Store, *gate, *atomic.Int64) {
	t.Helper()
	rdb := b.NewClient(t)
	g := newGate()
	rdb.AddHook(g)
	st := store.New(rdb, store.Options{Now: b.Clock(), Rand: func() float64 { return 0 }, Channel: b.Prefix + "events"})
	if err := st.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	queued := new(atomic.Int64)
	if !store.CountQueued(st, queued) {
		t.Fatal("the store does not coalesce on a standalone client")
	}
	return st, g, queued
}

// holdFirst starts an Allow whose pipeline the gate holds, and returns once
// it is held; the returned channel yields its error.
func holdFirst(t *testing.T, st *store.Store, g *gate, name string) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	g.armed.Store(true)
	go func() {
		_, err := st.Allow(context.Background(), name, "w0")
		done <- err
	}()
	<-g.entered
	return done
}

// TestCoalescedCallsShareRoundTrips: Allow calls made while a pipeline is
// out queue and go to Redis together, one round trip for all of them, and
// each caller gets its own breaker's answer (half the breakers are forced
// open, each with its own reason, which the denial carries from Redis).
func TestCoalescedCallsShareRoundTrips(t *testing.T) {
	t.Parallel()
	eachServer(t, func(t *testing.T, b *testredis.Backend) {
		st, g, queued := coalesceFixture(t, b)
		ctx := context.Background()
		const calls = 40
		for i := 1; i < calls; i += 2 {
			if _, err := st.Force(ctx, b.Breaker(fmt.Sprint(i)), pb.ForceMode_FORCE_MODE_OPEN, fmt.Sprintf("reason %d", i), 0, "op"); err != nil {
				t.Fatal(err)
			}
		}
		first := holdFirst(t, st, g, b.Breaker("first"))
		b.ResetCounts()
		var wg sync.WaitGroup
		res := make([]*pb.AllowResponse, calls)
		errs := make([]error, calls)
		for i := range calls {
			wg.Go(func() { res[i], errs[i] = st.Allow(ctx, b.Breaker(fmt.Sprint(i)), fmt.Sprintf("w%d", i)) })
		}
		daemontest.Eventually(t, "every call queued behind the held pipeline", func() bool { return queued.Load() == 1+calls })
		close(g.open)
		wg.Wait()
		if err := <-first; err != nil {
			t.Fatalf("the held call: %v", err)
		}
		// go-redis's flusher may have taken the first arrivals off the
		// queue (to wait for the held pipeline's turn) before the others
		// came: at most two round trips for them all.
		t.Logf("%d calls made %d round trips after the held one", calls, b.RoundTrips())
		if n := b.RoundTrips(); n > 2 {
			t.Errorf("%d calls made %d round trips after the held one, want at most 2 (pipelines)", calls, n)
		}
		if n := b.Commands(); n != calls {
			t.Errorf("%d calls sent %d commands, want one EVALSHA each", calls, n)
		}
		for i := range calls {
			if errs[i] != nil {
				t.Fatalf("call %d: %v", i, errs[i])
			}
			want := pb.Decision_DECISION_ALLOWED
			if i%2 == 1 {
				want = pb.Decision_DECISION_DENIED_FORCED_OPEN
			}
			if res[i].Decision != want {
				t.Errorf("call %d: %v, want %v", i, res[i].Decision, want)
			}
			if i%2 == 1 && !strings.HasSuffix(res[i].Reason, fmt.Sprintf(": reason %d", i)) {
				t.Errorf("call %d got reason %q: another breaker's answer", i, res[i].Reason)
			}
		}
	})
}

// TestCoalescedCallKeepsItsDeadline: a call queued behind a pipeline that
// does not come back returns when its own context ends, without waiting
// for the pipeline, and counts nothing toward an outage.
func TestCoalescedCallKeepsItsDeadline(t *testing.T) {
	eachServer(t, func(t *testing.T, b *testredis.Backend) {
		st, g, queued := coalesceFixture(t, b)
		first := holdFirst(t, st, g, b.Breaker("first"))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := st.Allow(ctx, b.Breaker("late"), "w1")
			done <- err
		}()
		daemontest.Eventually(t, "the call queued", func() bool { return queued.Load() == 2 })
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Allow with its context cancelled while queued: %v, want context.Canceled", err)
		}
		b.ResetCounts()
		close(g.open)
		if err := <-first; err != nil {
			t.Fatalf("the held call: %v", err)
		}
		// go-redis does not withdraw a queued command: the abandoned call's
		// script still goes out, as on a round trip cut short, and its
		// reply is lost to the caller: the store sends the same Allow once
		// more to settle a lease it may have taken (internal/replylost; the
		// breaker is closed: there is none, nothing more is sent).
		daemontest.Eventually(t, "the abandoned call sent, and sent again to settle it", func() bool { return b.Commands() == 2 })
		if st.Degraded() {
			t.Error("a caller's own deadline put the store in an outage")
		}
		// A context already ended sends nothing.
		b.ResetCounts()
		if _, err := st.Allow(ctx, b.Breaker("late"), "w1"); !errors.Is(err, context.Canceled) {
			t.Errorf("Allow with an ended context: %v, want context.Canceled", err)
		}
		if n := b.Commands(); n != 0 {
			t.Errorf("Allow with an ended context sent %d commands, want none", n)
		}
	})
}

// TestCoalescedErrorsStayWithTheirCall: in one pipeline, a NOSCRIPT for
// every call (after SCRIPT FLUSH) falls back to EVAL for each, and a call
// whose breaker key holds the wrong type fails alone; the others answer.
func TestCoalescedErrorsStayWithTheirCall(t *testing.T) {
	eachServer(t, func(t *testing.T, b *testredis.Backend) {
		st, g, queued := coalesceFixture(t, b)
		ctx := context.Background()
		bad := b.Breaker("bad")
		if err := b.Client.Set(ctx, store.KeysOf(bad).State, "not a hash", 0).Err(); err != nil {
			t.Fatal(err)
		}
		// Gone once the calls ended (a listing leaves it out, with a
		// warning: list_test.go).
		defer b.Client.Del(ctx, store.KeysOf(bad).State)
		first := holdFirst(t, st, g, b.Breaker("first"))
		if err := b.Client.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		const calls = 10
		var wg sync.WaitGroup
		errs := make([]error, calls)
		for i := range calls {
			name := b.Breaker(fmt.Sprint(i))
			if i == calls/2 {
				name = bad
			}
			wg.Go(func() {
				var rec *pb.RecordResponse
				rec, errs[i] = st.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: "w1", Ticket: &pb.Ticket{},
					Outcome: pb.Outcome_OUTCOME_SERVER_ERROR})
				if errs[i] == nil && (!rec.Counted || rec.State.Failures != 1) {
					errs[i] = fmt.Errorf("record = %v, want counted with 1 failure", rec)
				}
			})
		}
		daemontest.Eventually(t, "every call queued behind the held pipeline", func() bool { return queued.Load() == 1+calls })
		close(g.open)
		wg.Wait()
		if err := <-first; err != nil {
			t.Fatalf("the held call: %v", err)
		}
		for i, err := range errs {
			switch {
			case i == calls/2 && (err == nil || !strings.Contains(err.Error(), "WRONGTYPE")):
				t.Errorf("the call on a wrong-typed key: %v, want its WRONGTYPE error", err)
			case i != calls/2 && err != nil:
				t.Errorf("call %d: %v", i, err)
			}
		}
	})
}
