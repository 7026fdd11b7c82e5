package savings_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/savings"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// savingsFixture is a store whose clock the test moves (the savings
// buckets follow the daemon's clock), with a savings index of its own.
type savingsFixture struct {
	*testredis.Backend
	t     *testing.T
	st    *store.Store
	now   atomic.Int64 // ns since the epoch
	saved []savings.Counts
}

func newSavingsFixture(t *testing.T, b *testredis.Backend) *savingsFixture {
	t.Helper()
	f := &savingsFixture{Backend: b, t: t}
	// Mid-minute, so that a test's few seconds never cross a bucket bound.
	f.now.Store(time.Now().Truncate(time.Hour).Add(30 * time.Second).UnixNano())
	f.st = store.New(b.Client, store.Options{
		Now:        func() time.Time { return time.Unix(0, f.now.Load()) },
		Channel:    b.Prefix + "events",
		SavingsKey: b.Prefix + "saved",
		OnSaved:    func(_ string, c savings.Counts) { f.saved = append(f.saved, c) },
	})
	if err := f.st.Load(context.Background()); err != nil {
		t.Fatalf("Load: %v", err)
	}
	return f
}

// advance moves the store's clock and, on miniredis, the TTLs.
func (f *savingsFixture) advance(d time.Duration) {
	f.now.Add(int64(d))
	if f.Mini != nil {
		f.Mini.FastForward(d)
	}
}

// open gives breaker state (an operator's pin), as a tripped breaker has.
func (f *savingsFixture) open(breaker string) {
	f.t.Helper()
	if _, err := f.st.Force(context.Background(), breaker, pb.ForceMode_FORCE_MODE_OPEN, "savings test", 0, "op"); err != nil {
		f.t.Fatalf("Force(%q): %v", breaker, err)
	}
}

func (f *savingsFixture) read(window time.Duration, breakers ...string) map[string]savings.Counts {
	f.t.Helper()
	got, _, err := f.st.Savings().Read(context.Background(), window, breakers)
	if err != nil {
		f.t.Fatalf("Read(%s, %q): %v", window, breakers, err)
	}
	return got
}

func (f *savingsFixture) deny(breaker string, n int) {
	for range n {
		f.st.Savings().CountDenial(breaker)
	}
}

func TestSavingsCountsWhereTheyHappen(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newSavingsFixture(t, b)
		ctx := context.Background()
		open, unknown := f.Breaker("sv:open"), f.Breaker("sv:unknown")
		f.open(open)

		f.deny(open, 3)
		counted, err := f.st.Savings().Report(ctx, map[string]savings.Counts{
			open:    {ClientDenials: 5, ToolsRemoved: 2},
			unknown: {ClientDenials: 7}, // holds no state: no client denies it
		})
		if err != nil || counted != 1 {
			t.Fatalf("Report = %d, %v; want 1 counted (the breaker with no state ignored)", counted, err)
		}
		want := map[string]savings.Counts{open: {DaemonDenials: 3, ClientDenials: 5, ToolsRemoved: 2}}
		if diff := cmp.Diff(want, f.read(time.Hour, open, unknown)); diff != "" {
			t.Errorf("Read(named) (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(want, f.read(time.Hour)); diff != "" {
			t.Errorf("Read(every breaker in the index) (-want +got):\n%s", diff)
		}
		// The ignored report wrote nothing: no key a worker could grow.
		minute, hour := savings.BucketKeys(store.KeysOf(unknown).State, time.Unix(0, f.now.Load()))
		if n := f.Client.Exists(ctx, minute, hour).Val(); n != 0 {
			t.Errorf("keys of the ignored report: %d exist, want none", n)
		}
		// Every bucket expires.
		minute, hour = savings.BucketKeys(store.KeysOf(open).State, time.Unix(0, f.now.Load()))
		for key, max := range map[string]time.Duration{minute: savings.MinuteRetention, hour: savings.HourRetention} {
			if ttl := f.Client.TTL(ctx, key).Val(); ttl <= 0 || ttl > max {
				t.Errorf("TTL(%s) = %s, want in (0, %s]", key, ttl, max)
			}
		}
		// The metrics hook saw each count as the store took it.
		var sum savings.Counts
		for _, c := range f.saved {
			sum = savings.Counts{DaemonDenials: sum.DaemonDenials + c.DaemonDenials,
				ClientDenials: sum.ClientDenials + c.ClientDenials, ToolsRemoved: sum.ToolsRemoved + c.ToolsRemoved}
		}
		if diff := cmp.Diff(want[open], sum); diff != "" {
			t.Errorf("OnSaved sums (-want +got):\n%s", diff)
		}
	})
}

func TestSavingsWindows(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newSavingsFixture(t, b)
		ctx := context.Background()
		name := f.Breaker("sv:win")
		f.open(name)
		f.deny(name, 10) // t0
		if err := f.st.Savings().Flush(ctx); err != nil {
			t.Fatal(err)
		}
		f.advance(2 * time.Hour)
		f.deny(name, 1) // t0+2h
		if err := f.st.Savings().Flush(ctx); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			window time.Duration
			want   int64
		}{
			{time.Minute, 1},
			{time.Hour, 1},
			{2*time.Hour + time.Minute, 11}, // by the minute: t0's minute is in
			{6 * time.Hour, 11},             // by the hour
		} {
			if got := f.read(c.window, name)[name].DaemonDenials; got != c.want {
				t.Errorf("Read(%s) = %d daemon denials, want %d", c.window, got, c.want)
			}
		}
		// Past the minute buckets' retention, the hours still tell.
		f.advance(savings.MinuteRetention)
		if got := f.read(6*time.Hour, name)[name].DaemonDenials; got != 11 {
			t.Errorf("Read(6h) after the minute buckets expired = %d, want 11", got)
		}
		if got := f.read(time.Hour, name)[name].DaemonDenials; got != 0 {
			t.Errorf("Read(1h) after the minute buckets expired = %d, want 0", got)
		}
		// SavingsBetween reads a span by the minute: an open's savings.
		got, err := f.st.Savings().Between(ctx, name, time.Unix(0, f.now.Load()).Add(-time.Minute), time.Unix(0, f.now.Load()))
		if err != nil || got.Calls() != 0 {
			t.Errorf("Between(last minute) = %+v, %v; want nothing", got, err)
		}
	})
}

func TestSavingsIndexIsPruned(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		f := newSavingsFixture(t, b)
		ctx := context.Background()
		old, recent := f.Breaker("sv:old"), f.Breaker("sv:recent")
		f.open(old)
		f.open(recent)
		f.deny(old, 1)
		if err := f.st.Savings().Flush(ctx); err != nil {
			t.Fatal(err)
		}
		f.advance(savings.HourRetention + time.Hour)
		f.deny(recent, 1)
		if err := f.st.Savings().Flush(ctx); err != nil {
			t.Fatal(err)
		}
		members := f.Client.ZRange(ctx, f.Prefix+"saved", 0, -1).Val()
		if diff := cmp.Diff([]string{recent}, members); diff != "" {
			t.Errorf("savings index (-want +got):\n%s", diff)
		}
	})
}

func TestSavingsFlushKeepsCountsWhileRedisFails(t *testing.T) {
	t.Parallel()
	f := newSavingsFixture(t, testredis.Mini(t))
	ctx := context.Background()
	name := f.Breaker("sv:down")
	f.open(name)
	f.deny(name, 4)
	f.Mini.SetError("LOADING Redis is loading the dataset in memory")
	if err := f.st.Savings().Flush(ctx); err == nil || !store.IsUnavailable(err) {
		t.Fatalf("Flush with Redis failing = %v, want an unavailable error", err)
	}
	f.deny(name, 1)
	f.Mini.SetError("")
	if got := f.read(time.Hour, name)[name].DaemonDenials; got != 5 {
		t.Errorf("ReadSavings after Redis came back = %d daemon denials, want 5 (none lost)", got)
	}
}

func TestRunSavingsFlushesOnStop(t *testing.T) {
	t.Parallel()
	f := newSavingsFixture(t, testredis.Mini(t))
	name := f.Breaker("sv:stop")
	f.open(name)
	f.deny(name, 2)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var flushErr error
	go func() {
		defer close(done)
		f.st.Savings().Run(ctx, time.Hour, func(err error) { flushErr = errors.Join(flushErr, err) })
	}()
	cancel()
	<-done
	if flushErr != nil {
		t.Fatal(flushErr)
	}
	minute, _ := savings.BucketKeys(store.KeysOf(name).State, time.Unix(0, f.now.Load()))
	if got := f.Client.HGet(context.Background(), minute, "denied").Val(); got != "2" {
		t.Errorf("denied in the minute bucket after stop = %q, want 2", got)
	}
}

func TestSavingsDenialsOfABreakerWithoutStateAreNotWritten(t *testing.T) {
	t.Parallel()
	f := newSavingsFixture(t, testredis.Mini(t))
	ctx := context.Background()
	name := f.Breaker("sv:memory-only")
	f.deny(name, 2) // as a daemon answering from memory while Redis was away
	if err := f.st.Savings().Flush(ctx); err != nil {
		t.Fatal(err)
	}
	minute, hour := savings.BucketKeys(store.KeysOf(name).State, time.Unix(0, f.now.Load()))
	if n := f.Client.Exists(ctx, minute, hour, f.Prefix+"saved").Val(); n != 0 {
		t.Errorf("%d savings keys written for a breaker without state, want none", n)
	}
}

// holdFirst holds the first pipeline its client sends until release is
// closed, and closes held as it does; it lets every later one through.
type holdFirst struct {
	once          atomic.Bool
	held, release chan struct{}
}

func (h *holdFirst) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *holdFirst) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *holdFirst) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.once.CompareAndSwap(false, true) {
			close(h.held)
			<-h.release
		}
		return next(ctx, cmds)
	}
}

// heldFlush is an index on b holding one daemon denial of name (a
// breaker with state), and a flush of it in flight, held at its first
// pipeline until the hook's release; flushed gets the flush's error.
func heldFlush(t *testing.T, b *testredis.Backend, name string) (x *savings.Index, h *holdFirst, flushed <-chan error) {
	t.Helper()
	b.Mini.HSet(store.KeysOf(name).State, "state", "open")
	h = &holdFirst{held: make(chan struct{}), release: make(chan struct{})}
	c := redis.NewClient(&redis.Options{Addr: b.Addr})
	t.Cleanup(func() { _ = c.Close() })
	c.AddHook(h)
	x = savings.New(savings.Options{Client: c, IndexKey: b.Prefix + "saved", Now: time.Now,
		StateKey: func(breaker string) string { return store.KeysOf(breaker).State }})
	x.CountDenial(name)
	done := make(chan error, 1)
	go func() { done <- x.Flush(context.Background()) }() // as Run's ticker does
	<-h.held
	return x, h, done
}

func TestSavingsReadWaitsForAFlushInFlight(t *testing.T) {
	t.Parallel()
	b := testredis.Mini(t)
	name := b.Breaker("sv:inflight")
	x, h, flushed := heldFlush(t, b, name)
	type result struct {
		got map[string]savings.Counts
		err error
	}
	read := make(chan result, 1)
	go func() {
		got, _, err := x.Read(context.Background(), time.Hour, []string{name})
		read <- result{got, err}
	}()
	// A read that does not wait for the flush in flight answers while it
	// is held; one that waits answers once it is let go. The second is
	// right whenever the release comes, so only a read that does not
	// wait, and answers within the second, is caught.
	var r result
	select {
	case r = <-read:
		close(h.release)
	case <-time.After(time.Second):
		close(h.release)
		r = <-read
	}
	if err := <-flushed; err != nil {
		t.Fatalf("the flush in flight: %v", err)
	}
	if r.err != nil || r.got[name].DaemonDenials != 1 {
		t.Errorf("Read during a flush in flight = %v, %v; want the 1 daemon denial counted before it", r.got, r.err)
	}
}

func TestSavingsFlushWaitingForAnotherEndsWithItsContext(t *testing.T) {
	t.Parallel()
	b := testredis.Mini(t)
	x, h, flushed := heldFlush(t, b, b.Breaker("sv:wait"))
	defer func() { close(h.release); <-flushed }()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := x.Flush(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Flush with its context ended while another is in flight = %v, want context.Canceled", err)
	}
}
