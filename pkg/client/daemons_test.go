package client

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Several daemons: a client given two addresses is not stranded when one
// of them dies.

// TestDialSeveralDaemonsRefusesABadAddress: a list with a malformed
// address is an error at Dial naming it, never a client that falls back
// on every call.
func TestDialSeveralDaemonsRefusesABadAddress(t *testing.T) {
	t.Parallel()
	for _, target := range []string{"127.0.0.1:7070,127.0.0.1", "127.0.0.1:7070,", "a:1,,b:2"} {
		c, err := Dial(target)
		if err == nil {
			_ = c.Close()
			t.Errorf("Dial(%q) = nil error, want one naming the bad address", target)
			continue
		}
		if !strings.Contains(err.Error(), "daemon address") {
			t.Errorf("Dial(%q) = %v, want an error naming the daemon address", target, err)
		}
	}
}

// unavailableDaemon answers every Allow Unavailable, as a daemon under
// --redis-outage unavailable does while its Redis is away.
type unavailableDaemon struct {
	pb.UnimplementedBreakerServiceServer
	allows atomic.Int64
}

func (u *unavailableDaemon) Allow(context.Context, *pb.AllowRequest) (*pb.AllowResponse, error) {
	u.allows.Add(1)
	return nil, status.Error(codes.Unavailable, "redis unreachable")
}

// TestUnavailableDaemonIsSkipped: of two daemons, one answers every Allow
// Unavailable; each Allow it gets is sent on to the other, and every
// answer comes from breakerd, none from the fallback.
func TestUnavailableDaemonIsSkipped(t *testing.T) {
	t.Parallel()
	b := testredis.Mini(t)
	d := start(t, b, store.Options{})
	fake := &unavailableDaemon{}
	c := dial(t, serveFake(t, fake)+","+d.Addr, "w1")
	ctx := context.Background()
	name := b.Breaker("search")
	calls := 0
	eventually(t, "the unavailable daemon to get an Allow", func() bool {
		calls++
		p, err := c.Allow(ctx, name)
		if err != nil || p.Degraded || p.Decision != pb.Decision_DECISION_ALLOWED {
			t.Fatalf("Allow(%q) = %+v, %v; want ALLOWED from the other daemon", name, p, err)
		}
		return fake.allows.Load() > 0
	})
	if got := d.Calls.Get("Allow"); got != calls {
		t.Errorf("%d Allow calls, %d of them first sent to the unavailable daemon: the live daemon served %d, want all %d", calls, fake.allows.Load(), got, calls)
	}
	if n := c.Stats().Outages; n != 0 {
		t.Errorf("Stats().Outages = %d, want 0", n)
	}
}

// TestKilledDaemonStrandsNoClient: a fast, a cached and a strict client,
// each given both daemons' addresses and running 3 workers in a loop,
// call a dependency whose breaker is open and a healthy one. One daemon
// is stopped (its streams cut, its port closed) under that load. Every
// call goes on through the other daemon: no client falls back, no answer
// is degraded, and no call reaches the open breaker's dependency (counted
// at the dependency).
func TestKilledDaemonStrandsNoClient(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d1, d2 := start(t, b, store.Options{}), start(t, b, store.Options{})
		target := d1.Addr + "," + d2.Addr
		failing, healthy := newVendor(t, 503), newVendor(t, 200)
		open, ok := b.Breaker("vendor-down"), b.Breaker("vendor-up")
		trip(t, dial(t, target, "tripper-1"), dial(t, target, "tripper-2"), open)
		hitsAtTrip := failing.hits.Load()

		clk := newFakeClock() // never moves: the open breaker's cooldown never ends
		clients := map[string]*Client{
			"fast":   fastDial(t, target, "fast", clk),
			"cached": dial(t, target, "cached", WithOpenCache(), WithClock(clk)),
			"strict": dial(t, target, "strict", WithClock(clk)),
		}
		ctx := context.Background()
		for kind, c := range clients {
			eventually(t, "the "+kind+" client denies "+open, func() bool {
				p, err := c.Allow(ctx, open)
				return err == nil && p.Decision == pb.Decision_DECISION_DENIED_OPEN
			})
		}

		l := &daemonsLoad{open: open, ok: ok, failing: failing, healthy: healthy}
		stop := l.run(clients, 3)
		defer stop()
		eventually(t, "both daemons to serve the load", func() bool {
			return l.rounds.Load() >= 100 && d1.Calls.Get("Allow") > 0 &&
				d2.Calls.Get("Allow") > 0
		})
		d1.Stop()
		killed := l.rounds.Load()
		eventually(t, "the load to go on through the other daemon", func() bool { return l.rounds.Load() >= killed+300 })
		eventually(t, "the fast and cached clients' streams to be live again", func() bool {
			live, _, _ := clients["cached"].cache.status()
			return live && clients["fast"].Stats().ViewLive
		})
		stop()

		t.Logf("%d rounds (%d after the kill); %d calls reached the healthy dependency; %d degraded answers; errors %v",
			l.rounds.Load(), l.rounds.Load()-killed, healthy.hits.Load(), l.degraded.Load(), l.errs())
		if n := failing.hits.Load() - hitsAtTrip; n != 0 {
			t.Errorf("%d calls reached the dependency whose breaker was open, want 0", n)
		}
		if n := l.degraded.Load(); n != 0 {
			t.Errorf("%d answers came from a fallback, want 0: the other daemon answers within the budget", n)
		}
		for _, e := range l.errs() {
			t.Errorf("a call failed: %s", e)
		}
		for kind, c := range clients {
			if n := c.Stats().Outages; n != 0 {
				t.Errorf("the %s client switched to its fallback %d times, want 0", kind, n)
			}
		}
	})
}

// daemonsLoad is workers asking for both breakers in a loop, calling each
// dependency only when allowed and recording what it answered.
type daemonsLoad struct {
	open, ok         string
	failing, healthy *vendor
	rounds, degraded atomic.Int64
	mu               sync.Mutex
	errors           []string
}

func (l *daemonsLoad) run(clients map[string]*Client, workers int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for kind, c := range clients {
		for i := range workers {
			w := c.ForWorker(fmt.Sprintf("%s-%d", kind, i))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					l.call(ctx, w, l.open, l.failing)
					l.call(ctx, w, l.ok, l.healthy)
					l.rounds.Add(1)
				}
			}()
		}
	}
	var once sync.Once
	return func() { once.Do(func() { cancel(); wg.Wait() }) }
}

func (l *daemonsLoad) call(ctx context.Context, c *Client, name string, v *vendor) {
	p, err := c.Allow(ctx, name)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		l.fail(fmt.Sprintf("%s Allow(%s): %v", c.WorkerID(), name, err))
		return
	}
	if p.Degraded {
		l.degraded.Add(1)
	}
	if !p.Allowed() {
		return
	}
	r := Result{Outcome: pb.Outcome_OUTCOME_SUCCESS}
	if err := v.call(ctx); err != nil {
		r = Result{Outcome: pb.Outcome_OUTCOME_SERVER_ERROR, Message: "HTTP 503"}
	}
	if _, err := c.Record(context.WithoutCancel(ctx), p, r); err != nil {
		l.fail(fmt.Sprintf("%s Record(%s): %v", c.WorkerID(), name, err))
	}
}

func (l *daemonsLoad) fail(e string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errors = append(l.errors, e)
}

func (l *daemonsLoad) errs() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.errors...)
}
