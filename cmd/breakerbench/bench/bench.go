// Package bench measures breakerd on loopback against the ceiling (a gRPC
// no-op and a gRPC handler running one EVALSHA) and the peer (sony/gobreaker
// v2's DistributedCircuitBreaker), in interleaved rounds so that the
// machine's drift cancels out of the ratios. It starts its own redis-server
// and in-process daemons; cmd/breakerbench is its command line.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/breakerd/breakerd/internal/auth"
	"github.com/breakerd/breakerd/internal/daemon"
	"github.com/breakerd/breakerd/internal/tracing"
	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Options configure one run. The zero value is not valid: start from
// Defaults or Quick.
type Options struct {
	// RedisAddr is a Redis to use (host:port). Empty: the bench starts
	// RedisServer on a free loopback port and stops it at the end. On a
	// shared Redis, commands per op count everyone's commands.
	RedisAddr string
	// RedisServer is the redis-server binary to start. Default
	// "redis-server" (looked up in PATH).
	RedisServer string
	// Rounds is how many interleaved rounds run; ratios are taken inside
	// each round and their median printed.
	Rounds int
	// Duration is each scenario's time in each round.
	Duration time.Duration
	// MaxCalls bounds each scenario's ops in each round.
	MaxCalls int64
	// Callers is the number of concurrent callers (goroutines).
	Callers int
	// Breakers is the number of breakers the spread scenarios cycle over.
	Breakers int
	// PeerBreakers is the number of separate breakers the peer's spread
	// scenario uses (one caller's share each).
	PeerBreakers int
	// WirePass is how many sequential ops each scenario runs through a
	// counting proxy to measure Redis round trips per op.
	WirePass int
	// Trips is how many trips per round the propagation scenario times.
	Trips int
	// Pollers is how many clients on the second daemon poll Allow in the
	// propagation scenario.
	Pollers int
	// Executable is the bench's own binary, run with --serve for each
	// measured server (breakerd, the ceiling, the no-op) so that its CPU
	// time per RPC is read from /proc. Empty: every server runs in the
	// bench's process and no CPU is reported (the tests do this).
	Executable string
	// Only, when non-empty, runs only the scenarios whose names contain
	// one of these strings (the ratios then cover what ran).
	Only []string
	// CPUProfile, when set, is a file the measured daemon's child process
	// writes a pprof CPU profile of its whole life to (go tool pprof
	// reads it). Empty: no profile. Needs Executable.
	CPUProfile string
}

// Defaults are the full run: 5 rounds of 2 s per scenario.
func Defaults() Options {
	return Options{RedisServer: "redis-server", Rounds: 5, Duration: 2 * time.Second, MaxCalls: 2_000_000,
		Callers: 64, Breakers: 1000, PeerBreakers: 64, WirePass: 200, Trips: 5, Pollers: 8}
}

// Quick is a run that finishes in about a minute: 3 rounds of 0.5 s.
func Quick() Options {
	o := Defaults()
	o.Rounds, o.Duration, o.WirePass, o.Trips = 3, 500*time.Millisecond, 100, 3
	return o
}

// Validate reports the first invalid field, naming its flag.
func (o Options) Validate() error {
	switch {
	case o.Rounds < 1:
		return fmt.Errorf("--rounds: must be at least 1, got %d", o.Rounds)
	case o.Duration <= 0:
		return fmt.Errorf("--duration: must be positive, got %s", o.Duration)
	case o.Duration > time.Minute:
		return fmt.Errorf("--duration: at most 1m per scenario and round, got %s", o.Duration)
	case o.MaxCalls < 1:
		return fmt.Errorf("--max-calls: must be at least 1, got %d", o.MaxCalls)
	case o.Callers < 1 || o.Callers > 1024:
		return fmt.Errorf("--callers: must be between 1 and 1024, got %d", o.Callers)
	case o.Breakers < 1:
		return fmt.Errorf("--breakers: must be at least 1, got %d", o.Breakers)
	case o.PeerBreakers < 1:
		return fmt.Errorf("--peer-breakers: must be at least 1, got %d", o.PeerBreakers)
	case o.WirePass < 1:
		return fmt.Errorf("--wire-pass: must be at least 1, got %d", o.WirePass)
	case o.Trips < 0:
		return fmt.Errorf("--trips: must not be negative, got %d", o.Trips)
	case o.Pollers < 1:
		return fmt.Errorf("--pollers: must be at least 1, got %d", o.Pollers)
	case o.CPUProfile != "" && o.Executable == "":
		return errors.New("--cpuprofile: the daemon must run in a child process of the bench")
	case o.RedisAddr != "" && !auth.IsLoopback(o.RedisAddr):
		return fmt.Errorf("--redis-addr: the bench runs on loopback only, got %q", o.RedisAddr)
	}
	return nil
}

// target is one set of servers and connections the scenarios run against:
// the timed runs use direct connections, the wire pass the same servers'
// twins whose Redis connections go through a counting proxy.
type target struct {
	daemonA pb.BreakerServiceClient // breakerd
	http    *httpAPI                // the same daemon's HTTP/JSON API
	httpURL string                  // its base URL (http://host:port), for the clients' drivers
	clients []*client.Client        // pkg/client on daemonA's connection, one per worker
	fast    []*client.Client        // the same in fast mode (client.WithFastMode)
	twin    bool                    // the wire pass's twin (its Redis behind the counting proxy)
	noop    pb.BreakerServiceClient
	ceiling pb.BreakerServiceClient
	peerRDB *redis.Client
	prefix  string
	// children are the servers run in child processes, by Serve kind.
	children map[string]*child
	// traced are the daemons exporting traces (trace.go), by Serve kind.
	traced map[string]pb.BreakerServiceClient

	mu    sync.Mutex
	peers map[string][]*gobreaker.DistributedCircuitBreaker[struct{}]
}

// workers is how many distinct worker IDs the callers share.
const workers = 8

// scenario is one row of the table.
type scenario struct {
	name   string
	unit   string // what one op is
	server string // the Serve kind whose CPU it spends; "" for none
	// build returns the op for t; it may prepare state (untimed). An
	// error that is a skipped drops the row with its reason.
	build func(ctx context.Context, t *target, o Options) (opFunc, error)
	// callers, when set, is the row's concurrent callers instead of
	// Options.Callers.
	callers int
	// proc, when set, runs the row's calls in a client's driver process
	// (drivers.go) instead of the op build returns (nil); its rows have
	// no wire pass.
	proc *driver
}

// callersOf is how many concurrent callers s runs with.
func (s scenario) callersOf(o Options) int {
	if s.callers > 0 {
		return s.callers
	}
	return o.Callers
}

func (t *target) breaker(name string) string { return t.prefix + name }

// picker chooses the breaker of each caller's i-th call.
type picker func(o Options) func(caller, i int) string

// spread cycles each caller over o.Breakers breakers, callers out of step.
func spread(o Options) func(caller, i int) string {
	return func(caller, i int) string { return fmt.Sprintf("b%04d", (caller*7919+i)%o.Breakers) }
}

// hot is one breaker shared by every caller.
func hot(Options) func(caller, i int) string { return func(int, int) string { return "hot" } }

func rawAllow(pk picker) func(context.Context, *target, Options) (opFunc, error) {
	return func(_ context.Context, t *target, o Options) (opFunc, error) {
		pick := pk(o)
		return func(ctx context.Context, c, i int) error {
			res, err := t.daemonA.Allow(ctx, &pb.AllowRequest{Breaker: t.breaker(pick(c, i)), WorkerId: workerID(c)})
			if err != nil {
				return err
			}
			if res.GetDecision() != pb.Decision_DECISION_ALLOWED {
				return fmt.Errorf("allow: %s", res.GetDecision())
			}
			return nil
		}, nil
	}
}

func rawRecord(pk picker) func(context.Context, *target, Options) (opFunc, error) {
	return func(_ context.Context, t *target, o Options) (opFunc, error) {
		pick := pk(o)
		return func(ctx context.Context, c, i int) error {
			_, err := t.daemonA.Record(ctx, &pb.RecordRequest{Breaker: t.breaker(pick(c, i)), WorkerId: workerID(c),
				Ticket: &pb.Ticket{}, Outcome: pb.Outcome_OUTCOME_SUCCESS})
			return err
		}, nil
	}
}

func rawPair(pk picker) func(context.Context, *target, Options) (opFunc, error) {
	return rawPairNamed(pk, "", 0)
}

// rawPairNamed is rawPair on the breakers pk names with kind in front
// (countingPolicy's "w-" or "s-"), each success reporting latencyMs.
func rawPairNamed(pk picker, kind string, latencyMs int64) func(context.Context, *target, Options) (opFunc, error) {
	return rawPairOn(func(t *target) pb.BreakerServiceClient { return t.daemonA }, pk, kind, latencyMs)
}

// rawPairOn is rawPairNamed on the daemon of t that on names.
func rawPairOn(on func(*target) pb.BreakerServiceClient, pk picker, kind string, latencyMs int64) func(context.Context, *target, Options) (opFunc, error) {
	return func(_ context.Context, t *target, o Options) (opFunc, error) {
		pick := pk(o)
		d := on(t)
		return func(ctx context.Context, c, i int) error {
			name := t.breaker(kind + pick(c, i))
			res, err := d.Allow(ctx, &pb.AllowRequest{Breaker: name, WorkerId: workerID(c)})
			if err != nil {
				return err
			}
			if res.GetDecision() != pb.Decision_DECISION_ALLOWED {
				return fmt.Errorf("allow: %s", res.GetDecision())
			}
			_, err = d.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: workerID(c),
				Ticket: res.GetTicket(), Outcome: pb.Outcome_OUTCOME_SUCCESS, LatencyMs: latencyMs})
			return err
		}, nil
	}
}

func clientAllow(pk picker) func(context.Context, *target, Options) (opFunc, error) {
	return func(_ context.Context, t *target, o Options) (opFunc, error) {
		return allowThrough(t, t.clients, pk(o)), nil
	}
}

// allowThrough is one Allow through cs (caller c uses cs[c%workers]) on
// the breaker pick names; a denial or a degraded answer is an error.
func allowThrough(t *target, cs []*client.Client, pick func(caller, i int) string) opFunc {
	return func(ctx context.Context, c, i int) error {
		p, err := cs[c%workers].Allow(ctx, t.breaker(pick(c, i)))
		if err != nil {
			return err
		}
		if !p.Allowed() || p.Degraded {
			return fmt.Errorf("allow: %s (degraded %t)", p.Decision, p.Degraded)
		}
		return nil
	}
}

func clientRecord(pk picker) func(context.Context, *target, Options) (opFunc, error) {
	return func(_ context.Context, t *target, o Options) (opFunc, error) {
		pick := pk(o)
		return func(ctx context.Context, c, i int) error {
			p := &client.Permit{Breaker: t.breaker(pick(c, i)), Decision: pb.Decision_DECISION_ALLOWED, Ticket: &pb.Ticket{}}
			res, err := t.clients[c%workers].Record(ctx, p, client.Result{Outcome: pb.Outcome_OUTCOME_SUCCESS})
			if err == nil && res.GetNote() != "" && strings.Contains(res.GetNote(), "fallback") {
				return errors.New(res.GetNote())
			}
			return err
		}, nil
	}
}

func clientPair(pk picker) func(context.Context, *target, Options) (opFunc, error) {
	return func(_ context.Context, t *target, o Options) (opFunc, error) {
		pick := pk(o)
		return func(ctx context.Context, c, i int) error {
			return t.clients[c%workers].Call(ctx, t.breaker(pick(c, i)), func(context.Context) error { return nil })
		}, nil
	}
}

// forceOpen opens the breaker "open" (forced, until AUTO) for the denial
// scenarios.
func forceOpen(ctx context.Context, t *target) error {
	_, err := t.daemonA.Force(ctx, &pb.ForceRequest{Breaker: t.breaker("open"), Mode: pb.ForceMode_FORCE_MODE_OPEN,
		Reason: "breakerbench: a denial", Operator: "breakerbench"})
	return err
}

func scenarios() []scenario {
	return append([]scenario{
		{"noop", "RPCs", ServeNoop, func(_ context.Context, t *target, _ Options) (opFunc, error) {
			return func(ctx context.Context, c, i int) error {
				_, err := t.noop.Allow(ctx, &pb.AllowRequest{Breaker: "noop", WorkerId: workerID(c)})
				return err
			}, nil
		}, 0, nil},
		{"ceiling", "RPCs", ServeCeiling, func(_ context.Context, t *target, o Options) (opFunc, error) {
			pick := spread(o)
			return func(ctx context.Context, c, i int) error {
				_, err := t.ceiling.Allow(ctx, &pb.AllowRequest{Breaker: t.breaker(pick(c, i)), WorkerId: workerID(c)})
				return err
			}, nil
		}, 0, nil},
		{"allow-1k-raw", "Allows", ServeDaemon, rawAllow(spread), 0, nil},
		{"record-1k-raw", "Records", ServeDaemon, rawRecord(spread), 0, nil},
		{"pair-1k-raw", "pairs", ServeDaemon, rawPair(spread), 0, nil},
		{"allow-hot-raw", "Allows", ServeDaemon, rawAllow(hot), 0, nil},
		{"record-hot-raw", "Records", ServeDaemon, rawRecord(hot), 0, nil},
		{"pair-hot-raw", "pairs", ServeDaemon, rawPair(hot), 0, nil},
		// The counting policies, which write on every call (window)
		// or every slow success: exempt from the 4-commands target.
		{"pair-1k-window-raw", "pairs", ServeDaemon, rawPairNamed(spread, "w-", 0), 0, nil},
		{"pair-1k-slow-raw", "pairs", ServeDaemon, rawPairNamed(spread, "s-", slowLatencyMs), 0, nil},
		{"pair-1k-http", "pairs", ServeDaemon, httpPair(spread), 0, nil},
		{"pair-hot-http", "pairs", ServeDaemon, httpPair(hot), 0, nil},
		{"allow-1k-client", "Allows", ServeDaemon, clientAllow(spread), 0, nil},
		{"record-1k-client", "Records", ServeDaemon, clientRecord(spread), 0, nil},
		{"pair-1k-client", "Calls", ServeDaemon, clientPair(spread), 0, nil},
		{"allow-hot-client", "Allows", ServeDaemon, clientAllow(hot), 0, nil},
		{"record-hot-client", "Records", ServeDaemon, clientRecord(hot), 0, nil},
		{"pair-hot-client", "Calls", ServeDaemon, clientPair(hot), 0, nil},
		{"deny-open-raw", "denials", ServeDaemon, func(ctx context.Context, t *target, _ Options) (opFunc, error) {
			if err := forceOpen(ctx, t); err != nil {
				return nil, err
			}
			return func(ctx context.Context, c, i int) error {
				res, err := t.daemonA.Allow(ctx, &pb.AllowRequest{Breaker: t.breaker("open"), WorkerId: workerID(c)})
				if err != nil {
					return err
				}
				if res.GetDecision() == pb.Decision_DECISION_ALLOWED || res.GetDecision() == pb.Decision_DECISION_PROBE {
					return fmt.Errorf("allow on an open breaker: %s", res.GetDecision())
				}
				return nil
			}, nil
		}, 0, nil},
		{"deny-open-client", "denials", ServeDaemon, func(ctx context.Context, t *target, _ Options) (opFunc, error) {
			if err := forceOpen(ctx, t); err != nil {
				return nil, err
			}
			return func(ctx context.Context, c, i int) error {
				p, err := t.clients[c%workers].Allow(ctx, t.breaker("open"))
				if err != nil {
					return err
				}
				if p.Allowed() || p.Degraded {
					return fmt.Errorf("allow on an open breaker: %s (degraded %t)", p.Decision, p.Degraded)
				}
				return nil
			}, nil
		}, 0, nil},
		{"peer-64", "Executes", "", func(ctx context.Context, t *target, o Options) (opFunc, error) {
			return t.peerOp(o, o.PeerBreakers)
		}, 0, nil},
		{"peer-1", "Executes", "", func(ctx context.Context, t *target, o Options) (opFunc, error) {
			return t.peerOp(o, 1)
		}, 0, nil},
	}, slices.Concat(fastScenarios(), driverScenarios(), traceScenarios())...)
}

// peerOp gives each caller its own store and breaker instances (each
// caller stands for one process of the fleet) on n shared breakers.
func (t *target) peerOp(o Options, n int) (opFunc, error) {
	key := fmt.Sprintf("peer-%d", n)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.peers == nil {
		t.peers = map[string][]*gobreaker.DistributedCircuitBreaker[struct{}]{}
	}
	bs, ok := t.peers[key]
	if !ok {
		for c := 0; c < o.Callers; c++ {
			b, err := newPeer(newPeerStore(t.peerRDB, t.prefix), fmt.Sprintf("%s-%d", key, c%n))
			if err != nil {
				return nil, fmt.Errorf("peer: %w", err)
			}
			bs = append(bs, b)
		}
		t.peers[key] = bs
	}
	return func(ctx context.Context, c, i int) error {
		_, err := bs[c].Execute(func() (struct{}, error) { return struct{}{}, nil })
		return err
	}, nil
}

func workerID(c int) string { return fmt.Sprintf("bench-w%d", c%workers) }

// env is everything one run started; close stops it all.
type env struct {
	rdb     *redis.Client // the bench's own connection, for INFO
	rpcs    rpcCounter
	main    *target
	wire    *target
	proxy   *wireProxy
	daemonB string
	// daemonBURL is daemon B's HTTP/JSON API, for the drivers' trips.
	daemonBURL string
	closers    []func()
}

func (e *env) close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
}

// countingPolicy is the bench daemons' policy unless told otherwise:
// breakers named w-NNNN (under the bench's prefix, or its wire twin's)
// count the failure rate in a window, s-NNNN count slow calls; every
// other name has breakerd's defaults. The slow-call threshold is out of
// reach, so that the bench's slow successes never trip (a denial would be
// an error): what it measures is the write each one costs.
const countingPolicy = `breakers:
  - match: "*/w-*"
    mode: window
  - match: "*/*/w-*"
    mode: window
  - match: "*/s-*"
    slow_call: 2s
    slow_call_threshold: 1000000000
  - match: "*/*/s-*"
    slow_call: 2s
    slow_call_threshold: 1000000000
`

// slowLatencyMs is the latency the slow-call scenarios report: above the
// countingPolicy's slow_call of 2s.
const slowLatencyMs = 3000

// startDaemon runs a breakerd (daemon.Run, the production assembly with
// its metrics) on a free loopback port against redisAddr until stop, with
// the policies of policyFile (YAML; "" for countingPolicy).
func startDaemon(ctx context.Context, redisAddr, policyFile string) (addr string, stop func(), err error) {
	a, stop, err := serveDaemon(ctx, redisAddr, policyFile, false, tracing.Env{})
	return a.grpc, stop, err
}

// daemonAddrs are where a daemon serves: gRPC, and HTTP/JSON when asked.
type daemonAddrs struct{ grpc, http string }

// serveDaemon is startDaemon, serving the HTTP/JSON API too when
// withHTTP (on a loopback port free a moment before), tracing as tr says.
func serveDaemon(ctx context.Context, redisAddr, policyFile string, withHTTP bool, tr tracing.Env) (addrs daemonAddrs, stop func(), err error) {
	if policyFile == "" {
		dir, err := os.MkdirTemp("", "breakerbench-policy-")
		if err != nil {
			return addrs, nil, err
		}
		policyFile = filepath.Join(dir, "policy.yaml")
		if err := os.WriteFile(policyFile, []byte(countingPolicy), 0o600); err != nil {
			_ = os.RemoveAll(dir)
			return addrs, nil, err
		}
		addrs, stop, err := serveDaemon(ctx, redisAddr, policyFile, withHTTP, tr)
		if err != nil {
			_ = os.RemoveAll(dir)
			return addrs, nil, err
		}
		return addrs, func() { stop(); _ = os.RemoveAll(dir) }, nil
	}
	c := daemon.Config{Listen: "127.0.0.1:0", RedisURL: "redis://" + redisAddr + "/0", PolicyFile: policyFile, EventsMaxLen: 1000,
		EventRetention: 168 * time.Hour, ShutdownTimeout: 5 * time.Second, HealthInterval: time.Hour, LogFormat: "text", Tracing: tr}
	if withHTTP {
		c.HTTPListen = "127.0.0.1:0"
	}
	// The daemon's decision bound from the environment, as breakerd reads
	// it (the test suites set a lax one beside other suites).
	if v := os.Getenv("BREAKERD_REDIS_DECISION_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return addrs, nil, fmt.Errorf("BREAKERD_REDIS_DECISION_TIMEOUT: %w", err)
		}
		c.RedisDecisionTimeout = d
	}
	return runDaemon(ctx, c)
}

// runDaemon runs daemon.Run with c until stop, once it serves.
func runDaemon(ctx context.Context, c daemon.Config) (addrs daemonAddrs, stop func(), err error) {
	dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ready := make(chan daemon.Listeners, 1)
	done := make(chan error, 1)
	go func() {
		done <- daemon.RunListeners(dctx, c, slog.New(slog.NewTextHandler(io.Discard, nil)), func(l daemon.Listeners) { ready <- l })
	}()
	select {
	case l := <-ready:
		addrs.grpc = l.GRPC.String()
		if l.HTTP != nil {
			addrs.http = l.HTTP.String()
		}
	case err := <-done:
		cancel()
		return addrs, nil, fmt.Errorf("breakerd: %w", err)
	case <-time.After(30 * time.Second):
		cancel()
		return addrs, nil, errors.New("breakerd: not serving after 30s")
	}
	return addrs, func() { cancel(); <-done }, nil
}

func (e *env) dial(addr string) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), e.rpcs.dialOption())
	if err != nil {
		return nil, err
	}
	e.closers = append(e.closers, func() { _ = conn.Close() })
	return conn, nil
}

// newTarget starts a daemon, the no-op and the ceiling on redisAddr (in
// child processes of exe when it is set, the daemon's writing a CPU
// profile to profile when that is set) and dials them.
func (e *env) newTarget(ctx context.Context, redisAddr, prefix, exe, profile string) (*target, error) {
	t := &target{prefix: prefix, peerRDB: redis.NewClient(&redis.Options{Addr: redisAddr}), children: map[string]*child{},
		traced: map[string]pb.BreakerServiceClient{}}
	e.closers = append(e.closers, func() { _ = t.peerRDB.Close() })
	addrs := map[string]string{}
	httpAddr := ""
	for _, kind := range append([]string{ServeDaemon, ServeNoop, ServeCeiling}, traceKinds...) {
		if exe != "" {
			c, err := spawn(exe, kind, redisAddr, map[bool]string{true: profile}[kind == ServeDaemon])
			if err != nil {
				return nil, err
			}
			e.closers = append(e.closers, c.stop)
			t.children[kind], addrs[kind] = c, c.addr
			if kind == ServeDaemon {
				httpAddr = c.httpAddr
			}
			continue
		}
		var (
			addr string
			stop func()
			err  error
		)
		switch kind {
		case ServeDaemon:
			var a daemonAddrs
			a, stop, err = serveDaemon(ctx, redisAddr, "", true, tracing.Env{})
			addr, httpAddr = a.grpc, a.http
		case ServeDaemonTraceSome, ServeDaemonTraceAll:
			addr, stop, err = serveTraced(ctx, redisAddr, kind)
		case ServeNoop:
			addr, stop, err = startCeiling(nil)
		case ServeCeiling:
			crdb := redis.NewClient(&redis.Options{Addr: redisAddr})
			e.closers = append(e.closers, func() { _ = crdb.Close() })
			addr, stop, err = startCeiling(crdb)
		}
		if err != nil {
			return nil, err
		}
		e.closers = append(e.closers, stop)
		addrs[kind] = addr
	}
	dc, err := e.dial(addrs[ServeDaemon])
	if err != nil {
		return nil, err
	}
	t.daemonA = pb.NewBreakerServiceClient(dc)
	if httpAddr != "" {
		t.http, t.httpURL = newHTTPAPI(httpAddr, &e.rpcs.n), "http://"+httpAddr
		e.closers = append(e.closers, t.http.close)
	}
	for w := 0; w < workers; w++ {
		cl := client.New(dc, clientOptions(workerID(w))...)
		e.closers = append(e.closers, func() { _ = cl.Close() })
		t.clients = append(t.clients, cl)
		fc := client.New(dc, clientOptions(workerID(w), client.WithFastMode())...)
		e.closers = append(e.closers, func() { _ = fc.Close() })
		t.fast = append(t.fast, fc)
	}
	nc, err := e.dial(addrs[ServeNoop])
	if err != nil {
		return nil, err
	}
	t.noop = pb.NewBreakerServiceClient(nc)
	cc, err := e.dial(addrs[ServeCeiling])
	if err != nil {
		return nil, err
	}
	t.ceiling = pb.NewBreakerServiceClient(cc)
	for _, kind := range traceKinds {
		tc, err := e.dial(addrs[kind])
		if err != nil {
			return nil, err
		}
		t.traced[kind] = pb.NewBreakerServiceClient(tc)
	}
	return t, nil
}

// clientOptions are the options of every client the bench makes, for
// worker, then extra. Savings reports wait for Close: a client's periodic
// report is a background write of its own, and one landing inside another
// scenario's timed run would be counted as that scenario's Redis commands.
func clientOptions(worker string, extra ...client.Option) []client.Option {
	return append([]client.Option{client.WithWorkerID(worker), client.WithAllowBudget(10 * time.Second),
		client.WithSavingsInterval(time.Hour)}, extra...)
}

// wirePasses is how many sequential passes measure a scenario's Redis
// round trips per op; the least is reported. A busy machine can only add
// round trips (a reply that comes after the client's read timeout is asked
// for again), never take one away, so the least is the scenario's own cost.
const wirePasses = 3

// roundTrips is op's Redis round trips per op: the least over wirePasses
// sequential passes through the counting proxy.
func (e *env) roundTrips(ctx context.Context, o Options, op opFunc) float64 {
	least := math.Inf(1)
	for range wirePasses {
		before := e.proxy.reads.Load()
		s := drive(ctx, 1, time.Minute, int64(o.WirePass), op)
		if s.ops > 0 {
			least = min(least, float64(e.proxy.reads.Load()-before)/float64(s.ops))
		}
	}
	if math.IsInf(least, 1) {
		return 0
	}
	return least
}

// Run runs the bench and writes its report to w: the setup, one table of
// medians, per-round ratios, and their medians on the last lines.
func Run(ctx context.Context, o Options, w io.Writer) error {
	_, err := run(ctx, o, w)
	return err
}

// run is Run, returning each scenario's row by name.
func run(ctx context.Context, o Options, w io.Writer) (map[string]row, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	e := &env{}
	defer e.close()
	r, err := useRedis(ctx, o.RedisAddr, o.RedisServer, &e.closers)
	if err != nil {
		return nil, err
	}
	e.rdb = r.rdb
	redisAddr, owned, version := r.addr, r.owned, r.version
	prefix := fmt.Sprintf("bench-%08x/", rand.Uint32())
	main, err := e.newTarget(ctx, redisAddr, prefix, o.Executable, o.CPUProfile)
	if err != nil {
		return nil, err
	}
	e.main = main
	// The second daemon, for the propagation scenario.
	bAddrs, stopB, err := serveDaemon(ctx, redisAddr, "", true, tracing.Env{})
	if err != nil {
		return nil, err
	}
	e.closers = append(e.closers, stopB)
	e.daemonB, e.daemonBURL = bAddrs.grpc, "http://"+bAddrs.http
	// The wire twins: the same servers, with Redis behind a counting proxy.
	e.proxy, err = newWireProxy(redisAddr)
	if err != nil {
		return nil, err
	}
	e.closers = append(e.closers, e.proxy.close)
	e.wire, err = e.newTarget(ctx, e.proxy.addr(), prefix+"wire/", "", "")
	if err != nil {
		return nil, err
	}
	e.wire.twin = true

	fmt.Fprintf(w, "breakerbench: redis %s at %s (%s), %d callers, %d rounds of %s per scenario (at most %d calls), %d breakers spread\n",
		version, redisAddr, map[bool]string{true: "started by the bench", false: "given; commands per op count every client of it"}[owned],
		o.Callers, o.Rounds, o.Duration, o.MaxCalls, o.Breakers)
	fmt.Fprintln(w, "breakerd: strict mode (every Allow and Record is an RPC) in *-raw and *-client, fast mode (client.WithFastMode) in *-fast")
	fmt.Fprintln(w, PeerNote)

	run, ops, wireOps, skips, err := e.build(ctx, o)
	if err != nil {
		return nil, err
	}
	for i, s := range run {
		if s.proc != nil {
			continue
		}
		// Warm up: connections, scripts loaded, code paths paged in; the
		// twin once over every breaker, so that the counted pass measures
		// the steady state (a breaker's first Record that may create state
		// also asks the --max-breakers ceiling).
		drive(ctx, s.callersOf(o), 50*time.Millisecond, 2000, ops[i])
		drive(ctx, 1, time.Minute, int64(max(5, o.Breakers)), wireOps[i])
	}

	// Fast clients send outcomes in the background: let the warm-up's
	// reach Redis before anything is counted.
	for _, t := range []*target{e.main, e.wire} {
		for _, cl := range t.fast {
			if err := cl.Flush(ctx); err != nil {
				return nil, err
			}
		}
	}
	wireRT := make([]float64, len(run))
	for i, s := range run {
		wireRT[i] = noWirePass
		if s.proc == nil {
			wireRT[i] = e.roundTrips(ctx, o, wireOps[i])
		}
	}

	samples := make([][]sample, len(run)) // [scenario][round]
	var trips [][]time.Duration           // [round][trip]
	var fastTrips []fastTrip
	var storms []stormResult
	watched := map[string]*watchResult{}
	for r := 0; r < o.Rounds; r++ {
		for k := range run {
			i := (k + r) % len(run) // rotate the order so no scenario always runs first
			if err := e.rpcs.settled(ctx); err != nil {
				return nil, err
			}
			srv := e.main.children[run[i].server]
			var before counts
			s, err := e.timed(ctx, o, run[i], ops[i], func() (err error) {
				before, err = e.counts(ctx, srv)
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("%s: %w", run[i].name, err)
			}
			after, err := e.counts(ctx, srv)
			if err != nil {
				return nil, err
			}
			if run[i].proc == nil {
				s.rpcs = after.rpcs - before.rpcs
			}
			if before.hasCPU && after.hasCPU {
				s.cpu, s.hasCPU = after.cpu-before.cpu, true
			}
			s.cmds, s.scripts = after.cmds-before.cmds, after.scripts-before.scripts
			s.redisCPU = after.redisCPU - before.redisCPU
			s.top = topCommands(before.by, after.by, 5)
			samples[i] = append(samples[i], s)
		}
		if o.Trips > 0 && selected(o.Only, "trip") {
			ts, err := e.propagation(ctx, o, r)
			if err != nil {
				return nil, err
			}
			trips = append(trips, ts)
		}
		if o.Trips > 0 && selected(o.Only, "trip-fast") {
			ts, err := e.fastPropagation(ctx, o, r)
			if err != nil {
				return nil, err
			}
			fastTrips = append(fastTrips, ts...)
		}
		if err := e.watchRound(ctx, o, r, watched); err != nil {
			return nil, err
		}
		if selected(o.Only, "storm-fast") {
			st, err := e.storm(ctx, o, r, min(50, o.Breakers))
			if err != nil {
				return nil, err
			}
			storms = append(storms, st)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	fastRows := map[string]row{}
	for i, s := range run {
		fastRows[s.name] = summarize(s, samples[i], wireRT[i])
	}
	fastReport(w, o, fastRows, fastTrips, storms)
	watchReport(w, watched)
	return report(w, o, run, samples, wireRT, trips, skips), nil
}

// noWirePass is the round trips of a row with no wire pass (a driver's).
const noWirePass = -1

// build builds the selected scenarios on the main target and its wire
// twin: what runs, each one's ops, and the rows skipped, each "name:
// skipped: reason".
func (e *env) build(ctx context.Context, o Options) (run []scenario, ops, wireOps []opFunc, skips []string, err error) {
	for _, s := range scenarios() {
		if !selected(o.Only, s.name) {
			continue
		}
		op, err := s.build(ctx, e.main, o)
		var skip skipped
		if errors.As(err, &skip) {
			skips = append(skips, s.name+": "+skip.Error())
			continue
		}
		if err != nil {
			return nil, nil, nil, nil, fmt.Errorf("%s: %w", s.name, err)
		}
		var wop opFunc
		if s.proc == nil {
			if wop, err = s.build(ctx, e.wire, o); err != nil {
				return nil, nil, nil, nil, fmt.Errorf("%s (wire): %w", s.name, err)
			}
		}
		run, ops, wireOps = append(run, s), append(ops, op), append(wireOps, wop)
	}
	return run, ops, wireOps, skips, nil
}

// counts are what a timed run is measured by, read before and after it:
// Redis's commands and script runs, the RPCs the bench sent, and the CPU
// time of the row's server process.
type counts struct {
	cmds, scripts, rpcs int64
	by                  map[string]int64 // the calls by command
	cpu                 time.Duration
	redisCPU            time.Duration // Redis's own CPU time (INFO cpu)
	hasCPU              bool          // no server process, or no /proc (not Linux): CPU is not reported
}

// counts reads the counters now; srv is the row's server process or nil.
func (e *env) counts(ctx context.Context, srv *child) (counts, error) {
	cmds, by, err := commandCalls(ctx, e.rdb)
	if err != nil {
		return counts{}, err
	}
	rc, err := redisCPU(ctx, e.rdb)
	if err != nil {
		return counts{}, err
	}
	c := counts{cmds: cmds, scripts: scriptRuns(by), rpcs: e.rpcs.n.Load(), by: by, redisCPU: rc}
	if srv != nil {
		if cpu, err := srv.cpu(); err == nil {
			c.cpu, c.hasCPU = cpu, true
		}
	}
	return c, nil
}

// timed is one timed run of s: op on its callers, or its driver. begin
// reads the counters as the timed run starts: at once for op, and for a
// driver when it says its warm-up is over.
func (e *env) timed(ctx context.Context, o Options, s scenario, op opFunc, begin func() error) (sample, error) {
	if s.proc != nil {
		return s.proc.run(ctx, e.main, o, o.Duration, driverWarmup, begin)
	}
	if err := begin(); err != nil {
		return sample{}, err
	}
	resyncs := e.main.resyncs()
	before, err := selfCPU()
	smp := drive(ctx, s.callersOf(o), o.Duration, o.MaxCalls, op)
	if after, err2 := selfCPU(); err == nil && err2 == nil {
		smp.clientCPU = after - before
	}
	smp.resyncs = e.main.resyncs() - resyncs
	return smp, nil
}

// resyncs is how many times t's fast views have resynced so far
// (client.Stats.Resyncs: one per Watch stream (re)connected).
func (t *target) resyncs() (n int64) {
	for _, cl := range t.fast {
		n += cl.Stats().Resyncs
	}
	return n
}

// driverWarmup is the untimed calls a driver makes in each round before
// its timed run: a driver is a new process each round, where Go's rows
// keep their warmed clients (docs/performance.md, "The clients' rows").
// The counters are read when the driver says its timed run starts, so
// the Redis commands and the daemon's CPU over the run are still the
// timed pairs'.
const driverWarmup = time.Second

func selected(only []string, name string) bool {
	if len(only) == 0 {
		return true
	}
	for _, s := range only {
		if strings.Contains(name, s) {
			return true
		}
	}
	return false
}

func redisVersion(ctx context.Context, rdb *redis.Client) (string, error) {
	s, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return "", fmt.Errorf("redis: %w", err)
	}
	for _, line := range strings.Split(s, "\r\n") {
		if v, ok := strings.CutPrefix(line, "redis_version:"); ok {
			return v, nil
		}
	}
	return "unknown", nil
}
