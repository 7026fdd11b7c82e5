package client

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// fakeClock is a Clock the test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// testBudget is the Allow budget of tests that are not about the budget:
// on a loaded CI machine a loopback RPC can take longer than 50ms, and
// these tests mean to see breakerd's answers.
const testBudget = 5 * time.Second

func dial(t *testing.T, addr, worker string, opts ...Option) *Client {
	t.Helper()
	// Savings reports go out when a test flushes them (or at Close), never
	// on a timer in the middle of a test counting RPCs.
	c, err := Dial(addr, append([]Option{WithWorkerID(worker), WithAllowBudget(testBudget), WithSavingsInterval(time.Hour)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// withAlternatives is a daemon policy set whose every breaker offers alts.
func withAlternatives(alts ...string) store.Options {
	p := policy.Default()
	p.Alternatives = alts
	p.Jitter = 0
	return store.Options{Policies: policy.NewSet(p)}
}

func start(t *testing.T, b *testredis.Backend, o store.Options) *daemontest.Daemon {
	return daemontest.Start(t, b, o)
}

// vendor is a fake dependency that counts the requests reaching it.
type vendor struct {
	srv        *httptest.Server
	hits       atomic.Int64
	status     atomic.Int64
	retryAfter atomic.Value // string
}

func newVendor(t *testing.T, status int) *vendor {
	v := &vendor{}
	v.status.Store(int64(status))
	v.retryAfter.Store("")
	v.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v.hits.Add(1)
		if ra := v.retryAfter.Load().(string); ra != "" {
			w.Header().Set("Retry-After", ra)
		}
		w.WriteHeader(int(v.status.Load()))
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(v.srv.Close)
	return v
}

// call is a tool call to the vendor: an HTTP GET checked by CheckResponse.
func (v *vendor) call(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, v.srv.URL, nil)
	if err != nil {
		return err
	}
	resp, err := v.srv.Client().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return CheckResponse(resp)
}

func (v *vendor) setRetryAfter(secs int) { v.retryAfter.Store(strconv.Itoa(secs)) }

// trip opens name with 5 failing calls from two workers (the default
// threshold and quorum) through c1 and c2.
func trip(t *testing.T, c1, c2 *Client, name string) {
	t.Helper()
	fail := func(ctx context.Context) error {
		return &OutcomeError{Outcome: pb.Outcome_OUTCOME_SERVER_ERROR, Message: "HTTP 503"}
	}
	for i := range 5 {
		c := c1
		if i == 4 {
			c = c2
		}
		_ = c.Call(context.Background(), name, fail)
	}
	for _, c := range []*Client{c1, c2} { // fast clients: sent, and seen by the view
		if err := c.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if c1.view != nil {
		eventually(t, "the trip reaches "+c1.WorkerID()+"'s view", func() bool {
			e := c1.view.get(name)
			return e != nil && e.state == pb.State_STATE_OPEN
		})
	}
	p, err := c1.Allow(context.Background(), name)
	if err != nil || p.Decision != pb.Decision_DECISION_DENIED_OPEN {
		t.Fatalf("after tripping %s: %v, %v; want DENIED_OPEN", name, p, err)
	}
}

// eventually waits for cond, as long as the test may run: for background
// work (a Watch event arriving, a reconnect), never for a cooldown. A busy
// machine is slow, not wrong (daemontest.Eventually).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	daemontest.Eventually(t, what, cond)
}

func state(t *testing.T, d *daemontest.Daemon, name string) *pb.BreakerState {
	t.Helper()
	st, err := d.Store.Get(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// serveFake serves srv as breakerd on a free loopback port until t ends
// and returns its address.
func serveFake(t *testing.T, srv pb.BreakerServiceServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	pb.RegisterBreakerServiceServer(g, srv)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// clientMode is one of the client's two modes: strict (every Allow and
// Record a round trip) and fast (WithFastMode). The behaviour tests that
// apply to both run in both (eachMode).
type clientMode struct {
	fast bool
	// clk is the fast clients' clock, moved with the backend's (advance):
	// a fast client times an open period on its own clock.
	clk *fakeClock
}

func eachMode(t *testing.T, fn func(t *testing.T, m *clientMode)) {
	for _, fast := range []bool{false, true} {
		name := "strict"
		if fast {
			name = "fast"
		}
		t.Run(name, func(t *testing.T) { fn(t, &clientMode{fast: fast, clk: newFakeClock()}) })
	}
}

// dial dials a client in this mode (a fast one once its view is live).
func (m *clientMode) dial(t *testing.T, addr, worker string, opts ...Option) *Client {
	t.Helper()
	if m.fast {
		return fastDial(t, addr, worker, m.clk, opts...)
	}
	return dial(t, addr, worker, opts...)
}

// advance moves the backend's clock and the fast clients' by d.
func (m *clientMode) advance(b *testredis.Backend, d time.Duration) {
	b.Advance(d)
	m.clk.Advance(d)
}

// settle waits until what cs sent has reached breakerd and, for fast
// clients, until their views hold name as breakerd has it. Strict
// clients are settled when their calls return.
func (m *clientMode) settle(t *testing.T, d *daemontest.Daemon, name string, cs ...*Client) {
	t.Helper()
	// Every client's outcomes first: waiting on one view before another
	// client's queue is sent would let that queue move breakerd on (a
	// trip) after the first view was judged settled.
	for _, c := range cs {
		if err := c.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cs {
		if c.view != nil {
			settled(t, d, c, name)
		}
	}
}

// settled waits until c's view holds name as breakerd has it, or holds
// nothing of it (an alert made the view forget it, so the next Allow asks
// breakerd): either way the view answers no stale word. Tests that count
// the RPCs the view saves wait with known instead.
func settled(t *testing.T, d *daemontest.Daemon, c *Client, name string) {
	t.Helper()
	var last struct {
		e  *entry
		st *pb.BreakerState
	}
	defer func() {
		if t.Failed() && last.e != nil {
			t.Logf("last seen: %s's view %+v (snapshot %v); breakerd %v", c.WorkerID(), *last.e, last.e.st, last.st)
		}
	}()
	eventually(t, c.WorkerID()+"'s view of "+name+" agrees with breakerd or is empty", func() bool {
		st, err := d.Store.Get(context.Background(), name)
		if err != nil {
			return false
		}
		e := c.view.get(name)
		last.e, last.st = e, st
		return e == nil || agrees(e, st)
	})
}

// options are the options that put a client made with Dial or New in this
// mode (m.dial also waits for a fast view to be live).
func (m *clientMode) options() []Option {
	if m.fast {
		return []Option{WithFastMode(), WithClock(m.clk)}
	}
	return nil
}

// records counts the outcomes RPCs d served: Records, and the RecordBatch
// calls of fast clients.
func records(d *daemontest.Daemon) int { return d.Calls.Get("Record") + d.Calls.Get("RecordBatch") }

// eventWatcher is a Watch stream on one breaker, opened before the test
// acts, so the test can wait until breakerd's hub has handed out an event.
type eventWatcher struct {
	stream pb.BreakerService_WatchClient
}

// watchFor opens a Watch on breaker through c and waits until it is live.
func watchFor(t *testing.T, c *Client, breaker string) *eventWatcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := c.API().Watch(ctx, &pb.WatchRequest{Breakers: []string{breaker}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Header(); err != nil {
		t.Fatal(err)
	}
	return &eventWatcher{stream: stream}
}

// await reads events until one moves the breaker to state.
func (w *eventWatcher) await(t *testing.T, to pb.State) {
	t.Helper()
	for {
		m, err := w.stream.Recv()
		if err != nil {
			t.Fatalf("waiting for an event to %v: %v", to, err)
		}
		if m.GetEvent() != nil && m.GetEvent().GetTo() == to {
			return
		}
	}
}

// fresh is a Client.hearing for openCache tests: the stream is heard.
func fresh(bool, time.Time) (degraded, unheard bool) { return false, false }
