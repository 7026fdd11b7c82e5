package replay

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/breakerd/breakerd/internal/daemon"
	"github.com/breakerd/breakerd/internal/events"
	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/recovery"
	"github.com/breakerd/breakerd/internal/server"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// tally counts the breakerd RPCs of one side of the wire (the daemon's
// server, or the replay's clients), by breaker, and the decisions in
// them. It is safe for concurrent use.
type tally struct {
	clk *clock
	// recovered is when the vendor recovered, incident time (ClosedAt).
	recovered time.Duration

	mu sync.Mutex
	by map[string]*breakerWire
}

// breakerWire is what crossed the wire for one breaker.
type breakerWire struct {
	Allow, Record, BatchGet, Errors int
	// AllowErrors is the Allow RPCs among Errors.
	AllowErrors int
	// Decisions counts Allow answers by decision.
	Decisions map[pb.Decision]int
	// Trip is the state in the Record answer that first opened the
	// circuit; nil when it never opened.
	Trip *pb.BreakerState
	// TripAt is when Trip was recorded, incident time.
	TripAt time.Duration
	// ClosedAt is the incident time of the first Record, once the vendor
	// had recovered, that closed the circuit with a successful probe; 0
	// when none did. (In a partial outage, Config.FailRate, a probe can
	// also succeed before the recovery.)
	ClosedAt time.Duration
	// Open is true when the last Record answer had the circuit open or
	// half-open: false before any trip, and once it closed again.
	Open bool
	// Last is the state in the last Record answer (nil before one): what
	// the daemon's policy for the breaker is shows in it (window_mode,
	// slow_call_ms) whether or not it ever tripped.
	Last *pb.BreakerState
	// Probes are the probes' Records, in order: when, and whether the
	// probe succeeded.
	Probes []probeRecord
}

// probeRecord is one probe's Record.
type probeRecord struct {
	At time.Duration
	OK bool
}

// newTally returns an empty tally on clk, for a vendor that recovers at
// recovered (incident time).
func newTally(clk *clock, recovered time.Duration) *tally {
	return &tally{clk: clk, recovered: recovered, by: map[string]*breakerWire{}}
}

func (t *tally) get(name string) *breakerWire {
	w := t.by[name]
	if w == nil {
		w = &breakerWire{Decisions: map[pb.Decision]int{}}
		t.by[name] = w
	}
	return w
}

// of returns a copy of what crossed the wire for breaker.
func (t *tally) of(breaker string) breakerWire {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := *t.get(breaker)
	w.Probes = append([]probeRecord(nil), w.Probes...)
	w.Decisions = make(map[pb.Decision]int, len(t.by[breaker].Decisions))
	for k, v := range t.by[breaker].Decisions {
		w.Decisions[k] = v
	}
	return w
}

// observe records one unary RPC: its request, its answer and its error.
func (t *tally) observe(req, resp any, err error) {
	now := t.clk.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	switch r := req.(type) {
	case *pb.AllowRequest:
		w := t.get(r.GetBreaker())
		w.Allow++
		if res, ok := resp.(*pb.AllowResponse); ok && err == nil {
			w.Decisions[res.GetDecision()]++
		} else {
			w.Errors++
			w.AllowErrors++
		}
	case *pb.RecordRequest:
		w := t.get(r.GetBreaker())
		w.Record++
		res, ok := resp.(*pb.RecordResponse)
		if !ok || err != nil {
			w.Errors++
			return
		}
		st := res.GetState()
		if w.Trip == nil && st.GetState() == pb.State_STATE_OPEN && st.GetFailedProbes() == 0 {
			w.Trip, w.TripAt = proto.Clone(st).(*pb.BreakerState), now
		}
		if r.GetTicket().GetLeaseToken() != "" && res.GetCounted() {
			w.Probes = append(w.Probes, probeRecord{At: now, OK: st.GetState() == pb.State_STATE_CLOSED})
		}
		w.Open = st.GetState() == pb.State_STATE_OPEN || st.GetState() == pb.State_STATE_HALF_OPEN
		w.Last = st
		if w.ClosedAt == 0 && now >= t.recovered && res.GetCounted() && r.GetTicket().GetLeaseToken() != "" &&
			r.GetOutcome() == pb.Outcome_OUTCOME_SUCCESS && st.GetState() == pb.State_STATE_CLOSED {
			w.ClosedAt = now
		}
	case *pb.BatchGetRequest:
		for _, n := range r.GetBreakers() {
			w := t.get(n)
			w.BatchGet++
			if err != nil {
				w.Errors++
			}
		}
	}
}

// serverOption counts at the daemon: every unary RPC it serves.
func (t *tally) serverOption() grpc.ServerOption {
	return grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		t.observe(req, resp, err)
		return resp, err
	})
}

// dialOption counts at a client: every unary RPC it sends and what came
// back (an error is a call the client's fallback answered instead).
func (t *tally) dialOption() grpc.DialOption {
	return grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		t.observe(req, reply, err)
		return err
	})
}

// embedded is breakerd assembled in-process, as internal/daemon assembles
// it (store, event hub, gRPC server with health), plus a counting
// interceptor: the daemon's own count of what it served.
type embedded struct {
	addr  string
	desc  string
	calls *tally
	stop  func()
	// checks runs the recovery checks (nil without --recovery-check);
	// moves holds, per breaker, its transitions as the daemon heard them
	// (with --recovery-check only).
	checks *recovery.Checker
	mu     sync.Mutex
	moves  map[string][]move
}

// move is one transition of a breaker: when (incident time, from the
// event), to which state, and whether a recovery check caused it.
type move struct {
	at      time.Duration
	to      pb.State
	byCheck bool
}

// checkerID is the in-process daemon's name in the check lease and in the
// events its checks cause.
const checkerID = "outage-replay-daemon"

// checkClock is the Checker's clock: the scripts' (scaled) time. Its timers
// are never used: the replay drives the Checker with Step (runChecks).
type checkClock struct{ c *clock }

func (k checkClock) Now() time.Time                  { return k.c.wall() }
func (k checkClock) At(t time.Time) <-chan time.Time { return time.After(t.Sub(k.c.wall())) }

// runChecks runs the recovery checks as one actor of the virtual clock
// until ctx ends: due checks, then a sleep until the next is due (or a
// quarter interval, to pick up breakers that opened meanwhile). It
// returns a function that stops it and waits.
func (e *embedded) runChecks(ctx context.Context, cfg Config, clk *clock) (stop func()) {
	if e.checks == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	clk.join()
	go func() {
		defer close(done)
		defer clk.leave()
		for ctx.Err() == nil {
			next, ok := e.checks.Step(ctx)
			at := clk.now() + cfg.RecoveryCheck/4
			if ok {
				at = min(at, clk.incident(next))
			}
			at = max(at, clk.now()+time.Millisecond)
			if clk.sleepUntil(ctx, at) != nil {
				return
			}
		}
	}()
	return func() { cancel(); <-done }
}

// halfOpenAfter says how long after incident time t the breaker was first
// half-open (or closed), at the daemon: 0 when it already was at t;
// byCheck says a recovery check moved it; ok is false when it never was.
func (e *embedded) halfOpenAfter(breaker string, t time.Duration) (after time.Duration, byCheck, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var last *move
	for i := range e.moves[breaker] {
		m := &e.moves[breaker][i]
		if m.at <= t {
			last = m
			continue
		}
		if last != nil && last.to != pb.State_STATE_OPEN {
			return 0, last.byCheck, true
		}
		if m.to == pb.State_STATE_HALF_OPEN || m.to == pb.State_STATE_CLOSED {
			return m.at - t, m.byCheck, true
		}
	}
	if last != nil && last.to != pb.State_STATE_OPEN {
		return 0, last.byCheck, true
	}
	return 0, false, false
}

// wireWaits is how long the replay waits on the wire, in wall time: for
// breakerd's answer to its clients, and for setting up (the in-process
// daemon's script load and event hub, or the first answer of an external
// daemon).
type wireWaits struct {
	// budget is the clients' Allow budget (0: the caller's context bounds
	// the wait); rpc bounds each RPC (Allow, Record, BatchGet).
	budget, rpc time.Duration
	setup       time.Duration
}

// wireWaitsFor derives the waits from the clock the replay runs on.
//
// On a virtual clock (an in-process daemon) replay time stands still while
// an RPC is in flight, so the wall time an answer takes changes none of the
// replay's figures: a short wall-clock bound there would only turn a busy
// machine into calls the clients' fallback decides, which the replay reports
// as a fault. Every wait is then generous enough that load cannot exhaust
// it, yet finite, so a daemon that never answers still ends the replay.
//
// In real time (an external daemon, --scale) the wait is part of what is
// replayed: the Allow budget a worker would give breakerd, and the same bound
// on each RPC. Setting up, a daemon that has not answered within setup is
// not there.
func wireWaitsFor(virtual bool) wireWaits {
	if virtual {
		return wireWaits{budget: 0, rpc: 5 * time.Minute, setup: 5 * time.Minute}
	}
	return wireWaits{budget: 2 * time.Second, rpc: 2 * time.Second, setup: 30 * time.Second}
}

// clientOptions are the waits as options of a replay client.
func (w wireWaits) clientOptions() []client.Option {
	return []client.Option{client.WithAllowBudget(w.budget), client.WithRPCTimeout(w.rpc),
		client.WithRecordTimeout(w.rpc), client.WithFirstContactBudget(w.budget)}
}

// startEmbedded runs breakerd on redisURL (an embedded in-memory Redis
// when empty) with the replay's policy, on a loopback port.
func startEmbedded(cfg Config, clk *clock, id, statusURL string, waits wireWaits) (*embedded, error) {
	yaml := cfg.PolicyYAML()
	if cfg.RecoveryCheck > 0 {
		yaml = cfg.checkPolicyYAML(armBreakerPrefix(id, ArmFleetRemoveCheck), statusURL)
	}
	pols, err := policy.Parse([]byte(yaml))
	if err != nil {
		return nil, fmt.Errorf("replay policy: %w", err)
	}
	var rdb redis.UniversalClient
	var mr *miniredis.Miniredis
	desc := "in-process on an embedded in-memory Redis"
	if cfg.RedisURL == "" {
		mr = miniredis.NewMiniRedis()
		if err := mr.Start(); err != nil {
			return nil, fmt.Errorf("embedded redis: %w", err)
		}
		rdb = redis.NewClient(&redis.Options{Addr: mr.Addr()})
	} else {
		opt, err := redis.ParseURL(cfg.RedisURL)
		if err != nil {
			// The parse error quotes the URL: never its password.
			return nil, fmt.Errorf("--redis-url %s: invalid Redis URL", daemon.RedactURL(cfg.RedisURL))
		}
		rdb = redis.NewClient(opt)
		desc = fmt.Sprintf("in-process on Redis %s db %d", opt.Addr, opt.DB)
	}
	closeRedis := func() {
		_ = rdb.Close()
		if mr != nil {
			mr.Close()
		}
	}
	// A channel of its own, so a shared Redis's fleet does not see the
	// replay's events; its event streams outlive the replay by a minute.
	// Its scripts decide on the replay's virtual clock (scaled back to the
	// policy's durations), not on Redis TIME.
	st := store.New(rdb, store.Options{Policies: pols, Channel: NamePrefix + id + ":events", EventRetention: time.Minute, Now: clk.wall})
	lctx, cancel := context.WithTimeout(context.Background(), waits.setup)
	err = st.Load(lctx)
	cancel()
	if err != nil {
		closeRedis()
		return nil, fmt.Errorf("redis: %w", err)
	}
	hub := events.NewHub(rdb, st.Channel(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	e := &embedded{desc: desc, moves: map[string][]move{}}
	if cfg.RecoveryCheck > 0 {
		ck, err := recovery.New(recovery.Options{Store: st, ID: checkerID, Clock: checkClock{clk}})
		if err != nil {
			closeRedis()
			return nil, err
		}
		e.checks = ck
		hub.Observe(ck.Observe)
		hub.Observe(func(ev *pb.Event) {
			if ev.GetFrom() == ev.GetTo() {
				return // an alert, not a transition
			}
			m := move{at: clk.incident(time.UnixMilli(ev.GetAtMs())), to: ev.GetTo(),
				byCheck: ev.GetTo() == pb.State_STATE_HALF_OPEN && ev.GetActor() == checkerID}
			e.mu.Lock()
			e.moves[ev.GetBreaker()] = append(e.moves[ev.GetBreaker()], m)
			e.mu.Unlock()
		})
	}
	hctx, hcancel := context.WithTimeout(context.Background(), waits.setup)
	stopHub, err := hub.Start(hctx)
	hcancel()
	if err != nil {
		closeRedis()
		return nil, fmt.Errorf("event hub: %w", err)
	}
	calls := newTally(clk, cfg.Outage)
	g, hs := server.New(st, hub).NewGRPC(calls.serverOption())
	server.SetServing(hs, true)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		stopHub()
		closeRedis()
		return nil, err
	}
	go func() { _ = g.Serve(lis) }()
	e.addr, e.calls = lis.Addr().String(), calls
	e.stop = func() {
		g.Stop()
		stopHub()
		closeRedis()
	}
	return e, nil
}

// reachable checks that a breakerd answers at addr, within waits.setup.
func reachable(ctx context.Context, addr string, waits wireWaits) error {
	c, err := client.Dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, waits.setup)
	defer cancel()
	if _, err := c.API().BatchGet(ctx, &pb.BatchGetRequest{Breakers: []string{NamePrefix + "ping"}}); err != nil {
		return fmt.Errorf("--addr: no breakerd answers at %s: %w", addr, err)
	}
	return nil
}
