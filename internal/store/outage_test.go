package store_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/events"
	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// outageFixture is a daemon's store that reaches Redis through a proxy the
// test cuts, with its event hub on a direct connection.
type outageFixture struct {
	*fixture
	proxy *testredis.Proxy
	flips chan bool
	rdb   *redis.Client // the store's client, through proxy
}

func newOutageFixture(t *testing.T, b *testredis.Backend, mod func(*redis.Options), opts ...func(*store.Options)) *outageFixture {
	t.Helper()
	proxy := testredis.NewProxy(t, b.Addr)
	flips := make(chan bool, 10)
	if mod == nil { // the daemon's options (internal/daemon connect), its decision timeout below
		mod = func(o *redis.Options) { o.MaxRetries, o.DialerRetries = 1, 1 }
	}
	p := policy.Default()
	p.Threshold, p.MinWorkers = 3, 2
	o := store.Options{Now: b.Clock(), Rand: func() float64 { return 0 },
		Channel: b.Prefix + "events", Policies: policy.NewSet(p), OnOutage: func(_ string, down bool, _ error) { flips <- down },
		DecisionTimeout: store.DefaultDecisionTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	rdb := b.ClientVia(t, proxy.Addr(), mod)
	st := store.New(rdb, o)
	t.Cleanup(st.Close)
	// A loaded machine can make one command outlive a short read timeout
	// (TestSlowCommandIsNotAnOutage's): loading is retried, not judged.
	for i := 0; ; i++ {
		err := st.Load(context.Background())
		if err == nil {
			break
		}
		if i == 20 {
			t.Fatal(err)
		}
	}
	hub := events.NewHub(b.Client, b.Prefix+"events", slog.New(slog.NewTextHandler(io.Discard, nil)))
	hub.Observe(st.ObserveEvent)
	stop, err := hub.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return &outageFixture{fixture: &fixture{Backend: b, t: t, st: st}, proxy: proxy, flips: flips, rdb: rdb}
}

// TestOutageAnswersFromMemory: with Redis cut off, the daemon answers from
// its own breakers, fed by every worker it serves (the quorum still means
// two workers), starting from what it last heard; when Redis answers
// again, Redis's state wins.
func TestOutageAnswersFromMemory(t *testing.T) {
	eachServer(t, func(t *testing.T, b *testredis.Backend) {
		f := newOutageFixture(t, b, nil)
		ctx := context.Background()
		forced, search, fresh := b.Breaker("forced"), b.Breaker("search"), b.Breaker("fresh")
		if _, err := f.st.Force(ctx, forced, pb.ForceMode_FORCE_MODE_OPEN, "vendor maintenance", 0, "alice"); err != nil {
			t.Fatal(err)
		}
		// The hub hears the Force before the cut.
		waitSeen(t, f, forced)

		f.proxy.Cut()
		// The first call finds Redis gone and is answered from memory.
		start := time.Now()
		a := f.allow(search, "w1")
		t.Logf("figure (not asserted): the call that found Redis gone took %v", time.Since(start))
		if !a.Degraded || a.Decision != pb.Decision_DECISION_ALLOWED {
			t.Fatalf("first Allow after the cut = %v degraded %v, want a degraded ALLOWED", a.Decision, a.Degraded)
		}
		if down := <-f.flips; !down {
			t.Fatalf("OnOutage(%v), want true", down)
		}
		f.record(search, "w1", a.Ticket, pb.Outcome_OUTCOME_TIMEOUT)
		for _, w := range []string{"w2", "w1"} {
			if r := f.call(search, w, pb.Outcome_OUTCOME_TIMEOUT); !r.Degraded || !r.Counted {
				t.Fatalf("Record(%s) in the outage: counted %v degraded %v", w, r.Counted, r.Degraded)
			}
		}
		// Threshold 3 from 2 workers: open, in this daemon's memory; no
		// command goes to Redis for it.
		b.ResetCounts()
		start = time.Now()
		for _, w := range []string{"w1", "w2"} {
			if a := f.allow(search, w); !a.Degraded || a.Decision != pb.Decision_DECISION_DENIED_OPEN {
				t.Errorf("Allow(%s) after 3 timeouts from 2 workers = %v degraded %v, want a degraded DENIED_OPEN", w, a.Decision, a.Degraded)
			}
		}
		t.Logf("figure (not asserted): a degraded Allow took %v", time.Since(start)/2)
		if a := f.allow(forced, "w1"); !a.Degraded || a.Decision != pb.Decision_DECISION_DENIED_FORCED_OPEN {
			t.Errorf("Allow(forced) in the outage = %v degraded %v, want a degraded DENIED_FORCED_OPEN (seeded from the event feed)", a.Decision, a.Degraded)
		}
		if n := b.Commands(); n != 0 {
			t.Errorf("%d Redis commands during the outage's answers, want 0: no call waits on Redis", n)
		}

		f.proxy.Restore(t)
		start = time.Now()
		if down := <-f.flips; down {
			t.Fatalf("OnOutage(%v) after the restore, want false", down)
		}
		t.Logf("figure (not asserted): back on Redis %v after it answered again", time.Since(start))
		// Redis's state wins: the forced breaker is still denied, the one
		// tripped in memory is closed there, and no answer is degraded.
		if a := f.allow(forced, "w1"); a.Degraded || a.Decision != pb.Decision_DECISION_DENIED_FORCED_OPEN {
			t.Errorf("Allow(forced) after the restore = %v degraded %v, want DENIED_FORCED_OPEN from Redis", a.Decision, a.Degraded)
		}
		for _, n := range []string{search, fresh} {
			if a := f.allow(n, "w2"); a.Degraded || a.Decision != pb.Decision_DECISION_ALLOWED {
				t.Errorf("Allow(%s) after the restore = %v degraded %v, want ALLOWED from Redis", n, a.Decision, a.Degraded)
			}
		}
	})
}

// waitSeen waits until the fixture's store has heard an event for name
// (its hub delivers asynchronously: an answer from Redis is no proof).
func waitSeen(t *testing.T, f *outageFixture, name string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !store.Seeded(f.st, name) {
		if time.Now().After(deadline) {
			t.Fatalf("no event for %s reached the store's outage memory within a minute", name)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSlowCommandIsNotAnOutage: one command timing out fails that call;
// three in a row mean Redis is away.
func TestSlowCommandIsNotAnOutage(t *testing.T) {
	eachServer(t, func(t *testing.T, b *testredis.Backend) {
		// The stall makes every command time out whatever the timeout;
		// 500 ms keeps an unstalled command on a busy machine inside it.
		f := newOutageFixture(t, b, func(o *redis.Options) {
			o.ReadTimeout, o.WriteTimeout, o.MaxRetries = 500*time.Millisecond, 500*time.Millisecond, -1
		})
		ctx := context.Background()
		name := b.Breaker("search")
		// answered waits for an answer from Redis: a command that outlived
		// the timeout before the stall (a busy machine) is retried, and a
		// success resets the count of timeouts in a row.
		answered := func() {
			t.Helper()
			for i := 0; ; i++ {
				a, err := f.st.Allow(ctx, name, "w1")
				if err == nil && !a.Degraded {
					return
				}
				if i == 50 {
					t.Fatalf("no answer from Redis: %v, %v", a, err)
				}
			}
		}
		answered()
		f.proxy.Stall()
		// A busy host may run this process late (a decision's bound
		// passing unread): that timeout begins no outage. The first one
		// from the third on that is not late does.
		for i := 0; ; i++ {
			a, err := f.st.Allow(ctx, name, "w1")
			if err == nil && a.Degraded && i >= 2 && f.st.Degraded() {
				break
			}
			switch {
			case err == nil || f.st.Degraded():
				t.Fatalf("timeout %d: %v, err %v, degraded %v; want an error and no outage before the third", i+1, a, err, f.st.Degraded())
			case i >= 2 && !store.RanLate(err):
				t.Fatalf("timeout %d in a row: %v; want a degraded answer", i+1, err)
			case i == 20:
				t.Fatalf("21 timeouts in a row, each taken as this process running late: %v", err)
			}
		}
		f.proxy.Restore(t)
		<-f.flips // down
		<-f.flips // up
		answered()
	})
}

// eachServer runs fn on miniredis and on the real Redis: the proxy these
// tests cut fronts one server, which a Cluster's client does not talk to
// alone (the failover tests cover a Cluster losing a node).
func eachServer(t *testing.T, fn func(t *testing.T, b *testredis.Backend)) {
	t.Run("miniredis", func(t *testing.T) { fn(t, testredis.Mini(t)) })
	t.Run("redis", func(t *testing.T) { fn(t, testredis.Real(t)) })
}

// TestShutdownIsNoOutage: a daemon closes its store, then its Redis
// client; a call still running then fails with the client closed, which
// is no news of Redis: no outage is reported and the call is not
// answered from memory.
func TestShutdownIsNoOutage(t *testing.T) {
	b := testredis.Mini(t)
	flips := make(chan bool, 1)
	rdb := b.NewClient(t)
	st := store.New(rdb, store.Options{Now: b.Clock(), Channel: b.Prefix + "events",
		OnOutage: func(_ string, down bool, _ error) { flips <- down }, DecisionTimeout: store.DefaultDecisionTimeout})
	if err := st.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if err := rdb.Close(); err != nil {
		t.Fatal(err)
	}
	a, err := st.Allow(context.Background(), b.Breaker("search"), "w1")
	if err == nil {
		t.Errorf("Allow on a closed client = %v degraded %v, want an error", a.Decision, a.Degraded)
	}
	select {
	case down := <-flips:
		t.Errorf("OnOutage(%v) after the store was closed", down)
	default:
	}
	if st.Degraded() {
		t.Error("the store is degraded after a call cut off by its shutdown")
	}
}
