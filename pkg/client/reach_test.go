package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/limits"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// gate sits in front of a daemon's Allow and does to chosen breakers what
// the test says: hold the call until released, or fail it with
// Unavailable. Held calls also miss their Allow budget at once on the
// client (after), while every other call keeps the generous testBudget:
// which calls are slow is the test's choice, never the machine's load.
type gate struct {
	mu      sync.Mutex
	held    map[string]chan struct{} // closed on release
	failing map[string]bool
	arrived atomic.Int64 // held calls that reached the gate
}

func newGate() *gate { return &gate{held: map[string]chan struct{}{}, failing: map[string]bool{}} }

func (g *gate) hold(name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.held[name] = make(chan struct{})
}

func (g *gate) release(name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.held[name])
	delete(g.held, name)
}

func (g *gate) fail(name string, on bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.failing[name] = on
}

func (g *gate) server() grpc.ServerOption {
	return grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if a, ok := req.(*pb.AllowRequest); ok {
			g.mu.Lock()
			ch, fail := g.held[a.GetBreaker()], g.failing[a.GetBreaker()]
			g.mu.Unlock()
			if fail {
				return nil, status.Error(codes.Unavailable, "gate: failed by the test")
			}
			if ch != nil {
				g.arrived.Add(1)
				select {
				case <-ch:
				case <-ctx.Done():
					return nil, status.FromContextError(ctx.Err()).Err()
				}
			}
		}
		return h(ctx, req)
	})
}

// client makes a call on a held breaker miss its budget at once.
func (g *gate) client() Option {
	return func(o *options) {
		o.after = func(name string, d time.Duration) (<-chan time.Time, func() bool) {
			g.mu.Lock()
			_, held := g.held[name]
			g.mu.Unlock()
			if held {
				ch := make(chan time.Time, 1)
				ch <- time.Time{}
				return ch, func() bool { return true }
			}
			t := time.NewTimer(d)
			return t.C, t.Stop
		}
	}
}

// outages records what WithOutageHook was told.
type outages struct {
	mu  sync.Mutex
	got []bool
}

func (o *outages) hook(down bool, _ error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, down)
}

func (o *outages) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return fmt.Sprint(o.got)
}

// A request breakerd would refuse is the caller's error, naming the
// field, and the client stays on breakerd: the next Allow of a breaker
// forced open in Redis is still breakerd's DENIED_FORCED_OPEN.
func TestBadRequestIsNotAnOutage(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testBadRequestIsNotAnOutage(t, m) })
}

func testBadRequestIsNotAnOutage(t *testing.T, m *clientMode) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := start(t, b, store.Options{})
		var logs daemontest.Buffer
		var hook outages
		c := m.dial(t, d.Addr, "agent", WithLogger(slog.New(slog.NewTextHandler(&logs, nil))), WithOutageHook(hook.hook))
		ctx := context.Background()
		forced := b.Breaker("forced")
		if _, err := c.API().Force(ctx, &pb.ForceRequest{Breaker: forced, Mode: pb.ForceMode_FORCE_MODE_OPEN, Reason: "vendor maintenance"}); err != nil {
			t.Fatal(err)
		}
		served := d.Calls.Total() // the Force, and a fast client's Watch

		for _, tc := range []struct {
			name, breaker, want string
		}{
			{"invalid UTF-8", "ab\xff", `breaker: must be printable UTF-8 (no control characters), got "ab\xff"`},
			{"a 5 MB name", strings.Repeat("x", 5<<20), "breaker: is 5242880 bytes; at most 256"},
			{"empty", "", "breaker: is required"},
		} {
			p, err := c.Allow(ctx, tc.breaker)
			if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != tc.want {
				t.Errorf("Allow(%s) = %+v, %v; want InvalidArgument %q", tc.name, p, err, tc.want)
			}
			ran := false
			err = c.Call(ctx, tc.breaker, func(context.Context) error { ran = true; return nil })
			if status.Code(err) != codes.InvalidArgument || ran {
				t.Errorf("Call(%s) = %v (ran %v); want InvalidArgument, fn not run", tc.name, err, ran)
			}
			if _, err := NewRun(c).Available(ctx, []Tool{{Name: tc.breaker}}); tc.breaker != "" && (status.Code(err) != codes.InvalidArgument ||
				!strings.HasPrefix(status.Convert(err).Message(), "breakers[0]: ")) {
				t.Errorf("Available(%s) = %v; want InvalidArgument on breakers[0]", tc.name, err)
			}
		}
		if n := d.Calls.Total() - served; n != 0 {
			t.Errorf("bad requests reached the daemon: %d RPCs served, want 0", n)
		}

		// A server-side error about one breaker (a key of the wrong type in
		// Redis) fails that call, not the client.
		broken := b.Breaker("broken")
		if err := b.Client.Set(ctx, store.KeysOf(broken).State, "not a hash", 0).Err(); err != nil {
			t.Fatal(err)
		}
		for range DownAfterFailures + 1 {
			if p, err := c.Allow(ctx, broken); err == nil || reachFailure(err) {
				t.Fatalf("Allow on a breaker whose key is broken: %+v, %v; want breakerd's error", p, err)
			}
		}
		// Gone at once: a daemon's listing on the same Redis would warn
		// of it.
		if err := b.Client.Del(ctx, store.KeysOf(broken).State).Err(); err != nil {
			t.Fatal(err)
		}

		if _, down := c.Unreachable(); down {
			t.Errorf("Unreachable() after bad requests, want false")
		}
		p, err := c.Allow(ctx, forced)
		if err != nil || p.Degraded || p.Decision != pb.Decision_DECISION_DENIED_FORCED_OPEN {
			t.Errorf("Allow(forced) after bad requests: %+v, %v; want breakerd's DENIED_FORCED_OPEN", p, err)
		}
		if strings.Contains(logs.String(), "unreachable") || hook.String() != "[]" || c.Stats().Outages != 0 {
			t.Errorf("the client reported an outage: log %q, hook %s, stats %+v", logs.String(), hook.String(), c.Stats())
		}

		// A worker id breakerd would refuse is refused the same way.
		bad := m.dial(t, d.Addr, "w\n1")
		if _, err := bad.Allow(ctx, forced); status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), "worker_id: ") {
			t.Errorf("Allow with worker id %q: %v; want InvalidArgument on worker_id", "w\n1", err)
		}
	})
}

// What grpc itself says about a bad request (its encoder refusing invalid
// UTF-8, a message over the daemon's limit) is not a failure to reach
// breakerd; a refused connection is. (One mode: it reads errors from the
// raw stub, which both modes share.)
func TestReachFailureReadsGRPCsOwnErrors(t *testing.T) {
	t.Parallel()
	b := testredis.Mini(t)
	d := start(t, b, store.Options{})
	c := dial(t, d.Addr, "agent")
	ctx := context.Background()
	_, utf := c.API().Allow(ctx, &pb.AllowRequest{Breaker: "ab\xff", WorkerId: "agent"})
	_, big := c.API().Allow(ctx, &pb.AllowRequest{Breaker: strings.Repeat("x", 5<<20), WorkerId: "agent"})
	down := dial(t, testredis.FreeAddr(t), "agent")
	_, refused := down.API().Allow(ctx, &pb.AllowRequest{Breaker: "x", WorkerId: "agent"})
	for _, tc := range []struct {
		name string
		err  error
		code codes.Code
		want bool
	}{
		{"invalid UTF-8", utf, codes.Internal, false},
		{"5 MB message", big, codes.ResourceExhausted, false},
		{"connection refused", refused, codes.Unavailable, true},
		{"the RPC's own deadline", status.Error(codes.DeadlineExceeded, "x"), codes.DeadlineExceeded, true},
		{"the caller's cancellation", status.Error(codes.Canceled, "x"), codes.Canceled, false},
		{"a bad name", status.Error(codes.InvalidArgument, "breaker: is required"), codes.InvalidArgument, false},
	} {
		if got := reachFailure(tc.err); status.Code(tc.err) != tc.code || got != tc.want {
			t.Errorf("%s: %v: reachFailure = %v, want %v (code %v)", tc.name, tc.err, got, tc.want, tc.code)
		}
	}
}

// A slow answer answers one call from the fallback and is not an
// outage: the client stays on breakerd, and the late answer still lands
// (a denial is cached, a PROBE no caller uses is released at once).
//
// In strict mode the late denial goes to the open cache (WithOpenCache);
// in fast mode to the view, which WithOpenCache then does not add to.
func TestSlowAnswersAreNotAnOutage(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testSlowAnswersAreNotAnOutage(t, m) })
}

func testSlowAnswersAreNotAnOutage(t *testing.T, m *clientMode) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		g := newGate()
		d := daemontest.StartWith(t, b, daemontest.Options{Store: withAlternatives(), Server: []grpc.ServerOption{g.server()}})
		w1, w2 := m.dial(t, d.Addr, "w1"), m.dial(t, d.Addr, "w2")
		var logs daemontest.Buffer
		var hook outages
		c := m.dial(t, d.Addr, "agent", g.client(), WithOpenCache(), WithOutageHook(hook.hook), WithClock(m.clk),
			WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		ctx := context.Background()
		forced := b.Breaker("forced")
		if _, err := w1.API().Force(ctx, &pb.ForceRequest{Breaker: forced, Mode: pb.ForceMode_FORCE_MODE_OPEN, Reason: "vendor maintenance"}); err != nil {
			t.Fatal(err)
		}
		if !m.fast { // a fast client is dialled once its view is live
			eventually(t, "the first resync", func() bool { live, _, _ := c.cache.status(); return live })
		}

		// More slow calls than DownAfterFailures, at once, beside calls
		// answered in time: each slow one gets the fallback, the others
		// breakerd.
		var wg sync.WaitGroup
		errs := make(chan error, 20)
		for i := range 5 {
			slow := b.Breaker(fmt.Sprintf("slow-%d", i))
			g.hold(slow)
			wg.Add(2)
			go func() {
				defer wg.Done()
				if p, err := c.Allow(ctx, slow); err != nil || !p.Degraded || p.Decision != pb.Decision_DECISION_ALLOWED {
					errs <- fmt.Errorf("Allow(%s) held past its budget: %+v, %v; want the fallback's ALLOWED", slow, p, err)
				}
			}()
			go func() {
				defer wg.Done()
				if p, err := c.Allow(ctx, forced); err != nil || p.Degraded || p.Decision != pb.Decision_DECISION_DENIED_FORCED_OPEN {
					errs <- fmt.Errorf("Allow(forced) beside slow calls: %+v, %v; want breakerd's DENIED_FORCED_OPEN", p, err)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if _, down := c.Unreachable(); down {
			t.Fatalf("Unreachable() after 5 slow answers, want false")
		}
		eventually(t, "the held calls to reach the gate", func() bool { return g.arrived.Load() == 5 })
		for i := range 5 {
			g.release(b.Breaker(fmt.Sprintf("slow-%d", i)))
		}
		eventually(t, "the 5 late answers", func() bool { return c.Stats().LateAnswers == 5 })

		// A late denial is kept: the next Allow costs no round trip.
		open := b.Breaker("open")
		var epoch uint64
		if !m.fast {
			_, _, epoch = c.cache.status()
		}
		trip(t, w1, w2, open)
		if !m.fast {
			eventually(t, "the trip's event", func() bool { _, _, e := c.cache.status(); return e > epoch })
			// The event carried the state, so the cache already denies open;
			// an event without one (its daemon could not read the state in
			// time) leaves the answer to the next Allow: as here.
			c.cache.event(&pb.Event{Breaker: open}, c.o.clock.Now())
		}
		g.hold(open)
		if p, err := c.Allow(ctx, open); err != nil || !p.Degraded {
			t.Fatalf("Allow(open) held past its budget: %+v, %v; want the fallback's answer", p, err)
		}
		g.release(open)
		eventually(t, "the late denial", func() bool { return c.Stats().LateAnswers == 6 })
		if m.fast {
			// The view learns the late answer; had the trip's event reached
			// it after the answer was stamped, the view reads the breaker
			// again instead (one BatchGet): either way it comes to hold it.
			known(t, d, c, open)
		}
		allows := d.Calls.Get("Allow")
		if p, err := c.Allow(ctx, open); err != nil || !p.Cached || p.Decision != pb.Decision_DECISION_DENIED_OPEN {
			t.Errorf("Allow(open) after its late denial: %+v, %v; want the cached DENIED_OPEN", p, err)
		}
		if n := d.Calls.Get("Allow") - allows; n != 0 {
			t.Errorf("the cached denial cost %d Allow RPCs, want 0", n)
		}

		// A late PROBE is handed back at once with OUTCOME_CANCELED: another
		// worker can probe now, and the cooldown did not grow.
		m.advance(b, 31*time.Second) // the kept denial ends
		g.hold(open)
		if p, err := c.Allow(ctx, open); err != nil || !p.Degraded {
			t.Fatalf("Allow(open) after its cooldown, held: %+v, %v; want the fallback's answer", p, err)
		}
		sent := records(d)
		g.release(open)
		eventually(t, "the late probe's release", func() bool { return c.Stats().ProbesReleased == 1 })
		if err := c.Flush(ctx); err != nil { // fast mode queues the release
			t.Fatal(err)
		}
		if n := records(d) - sent; n != 1 {
			t.Errorf("releasing the late probe sent %d outcome RPCs, want 1", n)
		}
		m.settle(t, d, open, w2) // fast mode: w2 heard of the trip and the probe only by events
		if st := state(t, d, open); st.State != pb.State_STATE_HALF_OPEN || st.ProbeInFlight || st.FailedProbes != 0 {
			t.Errorf("after the late probe's release: %v, probe in flight %v, %d failed probes; want HALF_OPEN, none, 0", st.State, st.ProbeInFlight, st.FailedProbes)
		}
		if p, err := w2.Allow(ctx, open); err != nil || p.Decision != pb.Decision_DECISION_PROBE {
			t.Errorf("w2's Allow after the release: %+v, %v; want PROBE", p, err)
		}

		if _, down := c.Unreachable(); down || c.Stats().Outages != 0 || hook.String() != "[]" || strings.Contains(logs.String(), "unreachable") {
			t.Errorf("slow answers were taken for an outage: down %v, %+v, hook %s, log %q", down, c.Stats(), hook.String(), logs.String())
		}
		if s := c.Stats(); s.BudgetMisses != 7 {
			t.Errorf("Stats().BudgetMisses = %d, want 7", s.BudgetMisses)
		}
	})
}

// Only DownAfterFailures consecutive failures to reach breakerd switch
// the client to its fallback; an answer in between starts the count
// again. The switch is said once: one log line, one hook call.
func TestThreeFailuresToReachSwitchToFallback(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testThreeFailuresToReachSwitchToFallback(t, m) })
}

func testThreeFailuresToReachSwitchToFallback(t *testing.T, m *clientMode) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		g := newGate()
		d := daemontest.StartWith(t, b, daemontest.Options{Store: store.Options{}, Server: []grpc.ServerOption{g.server()}})
		var logs daemontest.Buffer
		var hook outages
		var c *Client
		c = m.dial(t, d.Addr, "agent", WithReconnectInterval(time.Hour), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
			WithOutageHook(func(down bool, err error) {
				if _, now := c.Unreachable(); now != down { // the hook may call the client
					t.Errorf("the outage hook said down=%v while Unreachable() = %v", down, now)
				}
				hook.hook(down, err)
			}))
		ctx := context.Background()
		bad, good := b.Breaker("bad"), b.Breaker("good")
		g.fail(bad, true)
		allow := func(name string, wantDegraded bool) {
			t.Helper()
			if p, err := c.Allow(ctx, name); err != nil || p.Degraded != wantDegraded {
				t.Fatalf("Allow(%s) = %+v, %v; want Degraded %v", name, p, err, wantDegraded)
			}
		}
		down := func() bool { _, down := c.Unreachable(); return down }

		allow(bad, true)
		allow(bad, true)
		allow(good, false) // an answer: the count starts again
		allow(bad, true)
		allow(bad, true)
		if down() {
			t.Fatalf("Unreachable() after 2 consecutive failures, want false")
		}
		allow(bad, true)
		if !down() {
			t.Fatalf("Unreachable() after %d consecutive failures, want true", DownAfterFailures)
		}
		allows := d.Calls.Get("Allow")
		for range 3 {
			if m.fast {
				// The gate fails only Allow RPCs: the Watch stream is up, and
				// the live view answers a closed breaker it knows, down or not.
				if p, err := c.Allow(ctx, good); err != nil || p.Degraded || !p.Cached || p.Decision != pb.Decision_DECISION_ALLOWED {
					t.Fatalf("Allow(good) from the live view = %+v, %v; want a cached ALLOWED", p, err)
				}
			} else {
				allow(good, true)
			}
			allow(bad, true)
		}
		if n := d.Calls.Get("Allow") - allows; n != 0 {
			t.Errorf("the client down sent %d Allows, want 0 (the fallback answers)", n)
		}
		if n := strings.Count(logs.String(), "breakerd unreachable"); n != 1 || hook.String() != "[true]" || c.Stats().Outages != 1 {
			t.Errorf("the outage was said %d times in the log, hook %s, %+v; want once each", n, hook.String(), c.Stats())
		}
	})
}

// A Record's durations go out within what breakerd accepts, so the
// outcome is kept, and whether the wait exceeds the deadline is too.
func TestRecordClampsDurationsToBreakerdsBounds(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testRecordClampsDurationsToBreakerdsBounds(t, m) })
}

func testRecordClampsDurationsToBreakerdsBounds(t *testing.T, m *clientMode) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := start(t, b, store.Options{})
		c := m.dial(t, d.Addr, "agent")
		ctx := context.Background()
		const day = 24 * time.Hour
		for _, tc := range []struct {
			name                string
			retryAfter, dl, lat time.Duration
			counted             bool
		}{
			{"Retry-After 1000000s, 5s left", 1000000 * time.Second, 5 * time.Second, time.Second, true},
			{"Retry-After 1h, deadline 30 days away", time.Hour, 30 * day, time.Second, false},
			{"Retry-After 30 days, deadline 10 days away", 30 * day, 10 * day, time.Second, true},
			{"Retry-After the largest, latency 30 days", maxWait, 0, 30 * day, true},
		} {
			name := b.Breaker(tc.name)
			p, err := c.Allow(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.Record(ctx, p, Result{Outcome: pb.Outcome_OUTCOME_RATE_LIMITED, RetryAfter: tc.retryAfter, Deadline: tc.dl, Latency: tc.lat})
			// A fast Record returns before breakerd has judged the outcome:
			// only a strict response says whether it counted.
			if err != nil || !m.fast && res.GetCounted() != tc.counted {
				t.Errorf("Record(%s) = %v, %v; want counted %v", tc.name, res, err, tc.counted)
			}
			m.settle(t, d, name, c)
			want := int64(0)
			if tc.counted {
				want = 1
			}
			if st := state(t, d, name); st.GetFailures() != want {
				t.Errorf("after Record(%s): %d failures at breakerd, want %d", tc.name, st.GetFailures(), want)
			}
		}
	})
}

// The caller's cancellation is never counted, however the tool words it;
// on a probe it releases the lease (OUTCOME_CANCELED) and the cooldown
// does not grow. A deadline that passed is a TIMEOUT.
func TestCancellationIsTheCallersWhateverTheToolSays(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testCancellationIsTheCallersWhateverTheToolSays(t, m) })
}

func testCancellationIsTheCallersWhateverTheToolSays(t *testing.T, m *clientMode) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := start(t, b, withAlternatives())
		w1, w2 := m.dial(t, d.Addr, "w1"), m.dial(t, d.Addr, "w2")
		name := b.Breaker("search")
		for _, tool := range []func(ctx context.Context) error{
			func(ctx context.Context) error { return fmt.Errorf("search: %v", ctx.Err()) },
			func(ctx context.Context) error { return errors.New("driver: query canceled") },
		} {
			ctx, cancel := context.WithCancel(context.Background())
			sent := records(d)
			err := w1.Call(ctx, name, func(ctx context.Context) error { cancel(); return tool(ctx) })
			m.settle(t, d, name, w1)
			if err == nil || records(d) != sent {
				t.Errorf("a cancelled call: %v, %d outcome RPCs; want the tool's error, none", err, records(d)-sent)
			}
		}
		if st := state(t, d, name); st.Failures != 0 {
			t.Errorf("cancelled calls counted %d failures, want 0", st.Failures)
		}

		trip(t, w1, w2, name)
		m.settle(t, d, name, w1, w2)
		m.advance(b, 31*time.Second)
		before := state(t, d, name)
		ctx, cancel := context.WithCancel(context.Background())
		err := w1.Call(ctx, name, func(ctx context.Context) error { cancel(); return errors.New("driver: query canceled") })
		if err == nil || err.Error() != "driver: query canceled" {
			t.Fatalf("the probe the caller cancelled: %v", err)
		}
		m.settle(t, d, name, w1, w2) // fast mode: the release is sent in the background
		st := state(t, d, name)
		if st.State != pb.State_STATE_HALF_OPEN || st.ProbeInFlight || st.FailedProbes != 0 || st.CooldownMs != before.CooldownMs {
			t.Errorf("after a cancelled probe: %v, probe in flight %v, %d failed probes, cooldown %dms; want HALF_OPEN, released, 0, %dms",
				st.State, st.ProbeInFlight, st.FailedProbes, st.CooldownMs, before.CooldownMs)
		}
		if p, err := w2.Allow(context.Background(), name); err != nil || p.Decision != pb.Decision_DECISION_PROBE {
			t.Errorf("w2 after the cancelled probe: %+v, %v; want PROBE", p, err)
		}
	})
}

// recordingServer is a breakerd that allows every call and keeps every
// RecordRequest and how much time each arrived with (its deadline, sent
// on the wire as grpc-timeout; -1 for none): the wire is the witness of
// what the client sends.
type recordingServer struct {
	pb.UnimplementedBreakerServiceServer
	mu        sync.Mutex
	records   []*pb.RecordRequest
	remaining []time.Duration
}

func (s *recordingServer) Allow(context.Context, *pb.AllowRequest) (*pb.AllowResponse, error) {
	return &pb.AllowResponse{Decision: pb.Decision_DECISION_ALLOWED, Ticket: &pb.Ticket{Generation: 1}}, nil
}

func (s *recordingServer) Record(ctx context.Context, req *pb.RecordRequest) (*pb.RecordResponse, error) {
	s.keep(ctx, req)
	return &pb.RecordResponse{}, nil
}

// RecordBatch keeps each outcome as Record does (a fast client's).
func (s *recordingServer) RecordBatch(ctx context.Context, req *pb.RecordBatchRequest) (*pb.RecordBatchResponse, error) {
	out := &pb.RecordBatchResponse{}
	for _, r := range req.GetRecords() {
		s.keep(ctx, r)
		out.Results = append(out.Results, &pb.RecordResponse{})
	}
	return out, nil
}

func (s *recordingServer) keep(ctx context.Context, req *pb.RecordRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records = append(s.records, req)
	if dl, ok := ctx.Deadline(); ok {
		s.remaining = append(s.remaining, time.Until(dl))
	} else {
		s.remaining = append(s.remaining, -1)
	}
}

// Watch is a live stream that never has an event: a fast client's view
// goes live on it.
func (s *recordingServer) Watch(_ *pb.WatchRequest, stream pb.BreakerService_WatchServer) error {
	if err := stream.SendHeader(nil); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func (s *recordingServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records)
}

func (s *recordingServer) last(t *testing.T) *pb.RecordRequest {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.records) == 0 {
		t.Fatal("no Record reached breakerd")
	}
	return s.records[len(s.records)-1]
}

// What Call sends breakerd for a vendor's waits and quota answers,
// read off the wire: quota exhaustion as its own outcome, waits clamped
// to breakerd's bounds, a bare 429 as 60s.
func TestCallSendsWhatTheVendorSaid(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testCallSendsWhatTheVendorSaid(t, m) })
}

func testCallSendsWhatTheVendorSaid(t *testing.T, m *clientMode) {
	srv := &recordingServer{}
	addr := serveFake(t, srv)
	c := m.dial(t, addr, "agent")

	var answer atomic.Value // func(http.ResponseWriter)
	vendor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		answer.Load().(func(http.ResponseWriter))(w)
	}))
	defer vendor.Close()
	call := func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, vendor.URL, nil)
		if err != nil {
			return err
		}
		resp, err := vendor.Client().Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		return CheckResponse(resp)
	}
	const week = limits.MaxDurationMs
	for _, tc := range []struct {
		name                string
		status              int
		header              http.Header
		body                string
		deadline            time.Duration // 0: none
		outcome             pb.Outcome
		message             string
		retryMs, deadlineMs func(int64) bool
	}{
		{name: "HTTP 402", status: 402, body: `{"error":{"code":"payment_required"}}`,
			outcome: pb.Outcome_OUTCOME_QUOTA_EXHAUSTED, message: "HTTP 402 Payment Required"},
		{name: "429 insufficient_quota", status: 429, header: http.Header{"Retry-After": {"20"}},
			body:    `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}`,
			outcome: pb.Outcome_OUTCOME_QUOTA_EXHAUSTED, message: "HTTP 429 Too Many Requests: insufficient_quota"},
		{name: "429 Retry-After 1000000, 1h left", status: 429, header: http.Header{"Retry-After": {"1000000"}}, deadline: time.Hour,
			outcome: pb.Outcome_OUTCOME_RATE_LIMITED, message: "HTTP 429 Too Many Requests",
			retryMs: func(ms int64) bool { return ms == week }, deadlineMs: func(ms int64) bool { return ms > 0 && ms <= 3600_000 }},
		{name: "429, 30 days left", status: 429, header: http.Header{"Retry-After-Ms": {"1500"}}, deadline: 30 * 24 * time.Hour,
			outcome: pb.Outcome_OUTCOME_RATE_LIMITED, message: "HTTP 429 Too Many Requests",
			retryMs: func(ms int64) bool { return ms == 1500 }, deadlineMs: func(ms int64) bool { return ms == week }},
		{name: "bare 429, 50s left", status: 429, deadline: 50 * time.Second,
			outcome: pb.Outcome_OUTCOME_RATE_LIMITED, message: "HTTP 429 Too Many Requests",
			retryMs: func(ms int64) bool { return ms == 60000 }, deadlineMs: func(ms int64) bool { return ms > 0 && ms <= 50_000 }},
	} {
		answer.Store(func(w http.ResponseWriter) {
			for k, v := range tc.header {
				w.Header()[k] = v
			}
			w.WriteHeader(tc.status)
			_, _ = w.Write([]byte(tc.body))
		})
		ctx, cancel := context.Background(), context.CancelFunc(func() {})
		if tc.deadline > 0 {
			ctx, cancel = context.WithTimeout(ctx, tc.deadline)
		}
		sent := srv.count()
		err := c.Call(ctx, "vendor", call)
		cancel()
		var he *HTTPError
		if !errors.As(err, &he) || he.StatusCode != tc.status {
			t.Errorf("%s: Call = %v, want the vendor's %d", tc.name, err, tc.status)
			continue
		}
		if err := c.Flush(context.Background()); err != nil { // fast mode sends in the background
			t.Fatal(err)
		}
		if n := srv.count() - sent; n != 1 {
			t.Fatalf("%s: the call sent %d outcomes, want 1", tc.name, n)
		}
		r := srv.last(t)
		if r.GetOutcome() != tc.outcome || r.GetMessage() != tc.message {
			t.Errorf("%s: sent %v %q, want %v %q", tc.name, r.GetOutcome(), r.GetMessage(), tc.outcome, tc.message)
		}
		if tc.retryMs != nil && (!tc.retryMs(r.GetRetryAfterMs()) || !tc.deadlineMs(r.GetDeadlineMs())) {
			t.Errorf("%s: sent retry_after_ms %d, deadline_ms %d", tc.name, r.GetRetryAfterMs(), r.GetDeadlineMs())
		}
	}
}
