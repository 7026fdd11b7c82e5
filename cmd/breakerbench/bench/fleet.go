package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/breakerd/breakerd/internal/auth"

	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// The fleet simulation (breakerbench --fleet): many fast-mode
// workers in one process, a few connections each shared by its workers
// through client.ForWorker (one Watch stream a connection), two daemons
// on one Redis, skewed popularity and one vendor that fails for a while.
// It checks docs/scale.md's model at this machine's size.

// FleetOptions configure Fleet. Start from DefaultFleet or QuickFleet.
type FleetOptions struct {
	// RedisAddr is a loopback Redis to use; empty: the simulation starts
	// RedisServer on a free port. On a shared Redis the command counts
	// include everyone's commands.
	RedisAddr, RedisServer string
	// Clients is how many simulated fast-mode workers (distinct worker
	// ids) make tool calls.
	Clients int
	// Conns is how many gRPC connections they share, alternately to the
	// two daemons: one fast client (one Watch stream, one view, one
	// outcome queue) per connection, the workers its ForWorker handles.
	Conns int
	// Breakers is how many breakers the calls go to.
	Breakers int
	// Zipf is the popularity skew s (> 1): the breaker of rank k (0 the
	// most popular) gets calls in proportion to 1/(1+k)^s.
	Zipf float64
	// Rate is each worker's tool calls per second.
	Rate float64
	// Warmup runs the load before anything is counted (every connection's
	// view has learned every breaker before it starts).
	Warmup time.Duration
	// Duration is the measured run.
	Duration time.Duration
	// FailRank is the popularity rank of the breaker whose vendor fails;
	// every call to it fails (SERVER_ERROR, at once) from FailFrom until
	// FailUntil, measured from the start of the measured run.
	FailRank            int
	FailFrom, FailUntil time.Duration
	// Cooldown is the daemons' cooldown_base (policy; cooldown_cap is
	// twice it, no jitter), so that probes and the recovery fit the run.
	Cooldown time.Duration
}

// DefaultFleet is 10,000 workers at 2 calls a second on 8 connections,
// 1,000 breakers at Zipf s 1.1, the most popular breaker's vendor down
// from 20 s to 49 s of a 90 s run (a probe at 50 s finds it back).
func DefaultFleet() FleetOptions {
	return FleetOptions{RedisServer: "redis-server", Clients: 10_000, Conns: 8, Breakers: 1000, Zipf: 1.1, Rate: 2,
		Warmup: 5 * time.Second, Duration: 90 * time.Second, FailRank: 0, FailFrom: 20 * time.Second, FailUntil: 49 * time.Second,
		Cooldown: 2 * time.Second}
}

// QuickFleet is DefaultFleet in about a minute: 3 s of warm-up, 30 s
// measured, the vendor down from 10 s to 19 s.
func QuickFleet() FleetOptions {
	o := DefaultFleet()
	o.Warmup, o.Duration, o.FailFrom, o.FailUntil = 3*time.Second, 30*time.Second, 10*time.Second, 19*time.Second
	return o
}

// Validate reports the first invalid field, naming its flag.
func (o FleetOptions) Validate() error {
	switch {
	case o.Clients < 1 || o.Clients > 1_000_000:
		return fmt.Errorf("--fleet-clients: must be between 1 and 1000000, got %d", o.Clients)
	case o.Conns < 1 || o.Conns > 64:
		return fmt.Errorf("--fleet-conns: must be between 1 and 64, got %d", o.Conns)
	case o.Breakers < 1:
		return fmt.Errorf("--fleet-breakers: must be at least 1, got %d", o.Breakers)
	case !(o.Zipf > 1):
		return fmt.Errorf("--fleet-zipf: must be more than 1, got %g", o.Zipf)
	case !(o.Rate > 0):
		return fmt.Errorf("--fleet-rate: must be positive, got %g", o.Rate)
	case o.Warmup < 0:
		return fmt.Errorf("--fleet-warmup: must not be negative, got %s", o.Warmup)
	case o.Duration <= 0 || o.Duration > time.Hour:
		return fmt.Errorf("--fleet-duration: must be positive and at most 1h, got %s", o.Duration)
	case o.FailRank < 0 || o.FailRank >= o.Breakers:
		return fmt.Errorf("--fleet-fail-rank: must be between 0 and --fleet-breakers - 1, got %d", o.FailRank)
	case o.FailFrom < 0 || o.FailUntil <= o.FailFrom || o.FailUntil > o.Duration:
		return fmt.Errorf("--fleet-fail-from, --fleet-fail-until: need 0 <= from < until <= --fleet-duration, got %s to %s", o.FailFrom, o.FailUntil)
	case o.Cooldown < time.Millisecond:
		return fmt.Errorf("--fleet-cooldown: must be at least 1ms, got %s", o.Cooldown)
	case o.RedisAddr != "" && !auth.IsLoopback(o.RedisAddr):
		return fmt.Errorf("--redis-addr: the bench runs on loopback only, got %q", o.RedisAddr)
	}
	return nil
}

// fleetDrivers is how many goroutines make the calls per connection; each
// paces its share of the workers' calls.
const fleetDrivers = 2

// snap is the fleet's counters at one moment.
type snap struct {
	at                    time.Time
	calls, failed, denied int64
	cmds                  int64
	by                    map[string]int64
	rpcs                  int64
}

// callLog is one call to the failing breaker that went out while its
// vendor was down.
type callLog struct {
	at     time.Time
	worker int
}

// fleet is one simulation's state.
type fleet struct {
	o        FleetOptions
	rdb      *redis.Client
	rpcs     rpcCounter
	conns    []*client.Client   // one fast client per connection (its id is the connection's observer)
	workers  [][]*client.Client // [conn] the ForWorker handles on it
	names    []string           // by popularity rank
	failing  string
	down     atomic.Bool
	calls    atomic.Int64 // tool calls asked
	failed   atomic.Int64 // calls made that failed
	denied   atomic.Int64 // calls denied
	errs     atomic.Int64 // other errors
	lastErr  atomic.Value // error
	start    time.Time    // the measured run's start
	logs     [][]callLog  // per driver (each writes its own, read after they end): calls that failed
	closers  []func()
	policyFn string
}

// Fleet runs the fleet simulation and writes its report to w.
func Fleet(ctx context.Context, o FleetOptions, w io.Writer) error {
	f := &fleet{o: o}
	defer f.close()
	res, err := f.run(ctx, w)
	if err != nil {
		return err
	}
	f.report(w, res)
	return nil
}

func (f *fleet) close() {
	for i := len(f.closers) - 1; i >= 0; i-- {
		f.closers[i]()
	}
}

// run sets the fleet up, writes the setup's lines to w, and runs it.
func (f *fleet) run(ctx context.Context, w io.Writer) (fleetResult, error) {
	o := f.o
	if err := o.Validate(); err != nil {
		return fleetResult{}, err
	}
	r, err := useRedis(ctx, o.RedisAddr, o.RedisServer, &f.closers)
	if err != nil {
		return fleetResult{}, err
	}
	f.rdb = r.rdb
	redisAddr, owned, version := r.addr, r.owned, r.version
	if err := f.writePolicy(); err != nil {
		return fleetResult{}, err
	}
	var daemons [2]string
	for i := range daemons {
		addr, stop, err := startDaemon(ctx, redisAddr, f.policyFn)
		if err != nil {
			return fleetResult{}, err
		}
		f.closers = append(f.closers, stop)
		daemons[i] = addr
	}
	prefix := fmt.Sprintf("fleet-%08x/", rand.Uint32())
	for k := 0; k < o.Breakers; k++ {
		f.names = append(f.names, fmt.Sprintf("%sb%04d", prefix, k))
	}
	f.failing = f.names[o.FailRank]
	if err := f.connect(daemons); err != nil {
		return fleetResult{}, err
	}
	fmt.Fprintf(w, "breakerbench --fleet: redis %s at %s (%s); 2 daemons (in this process) with cooldown_base %s, cooldown_cap %s, no jitter\n",
		version, redisAddr, map[bool]string{true: "started by the bench", false: "given; commands count every client of it"}[owned], o.Cooldown, 2*o.Cooldown)
	fmt.Fprintf(w, "  %d fast-mode workers (client.ForWorker) on %d connections (one Watch stream each), %.3g calls/s each = %.0f calls/s offered\n",
		o.Clients, o.Conns, o.Rate, o.Rate*float64(o.Clients))
	fmt.Fprintf(w, "  %d breakers, popularity Zipf s=%.2f (the top breaker takes %.1f%% of the calls); the vendor of rank %d fails every call from %s to %s of a %s run (after %s of warm-up)\n",
		o.Breakers, o.Zipf, 100*zipfShare(o.Zipf, o.Breakers, 0), o.FailRank, o.FailFrom, o.FailUntil, o.Duration, o.Warmup)

	// Warm-up: every view learns every breaker, then the load runs untimed.
	if err := learnAll(ctx, f.conns, f.names); err != nil {
		return fleetResult{}, fmt.Errorf("fleet warm-up: %w", err)
	}
	lctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var load sync.WaitGroup
	f.logs = make([][]callLog, o.Conns*fleetDrivers)
	for d := 0; d < o.Conns*fleetDrivers; d++ {
		load.Add(1)
		go func() { defer load.Done(); f.drive(lctx, d) }()
	}
	select {
	case <-ctx.Done():
		stopLoad()
		load.Wait()
		return fleetResult{}, ctx.Err()
	case <-time.After(o.Warmup):
	}
	for _, c := range f.conns {
		if err := c.Flush(ctx); err != nil {
			stopLoad()
			load.Wait()
			return fleetResult{}, err
		}
	}
	res, err := f.measure(ctx)
	stopLoad()
	load.Wait()
	for _, l := range f.logs {
		res.logs = append(res.logs, l...)
	}
	return res, err
}

// writePolicy writes the daemons' policy file: short cooldowns, no jitter.
func (f *fleet) writePolicy() error {
	dir, err := os.MkdirTemp("", "breakerbench-fleet-")
	if err != nil {
		return err
	}
	f.closers = append(f.closers, func() { _ = os.RemoveAll(dir) })
	f.policyFn = filepath.Join(dir, "policy.yaml")
	yaml := fmt.Sprintf("defaults:\n  cooldown_base: %s\n  cooldown_cap: %s\n  jitter: 0\n", f.o.Cooldown, 2*f.o.Cooldown)
	return os.WriteFile(f.policyFn, []byte(yaml), 0o600)
}

// connect dials o.Conns connections, alternately to each daemon, each
// with one fast client and its share of the workers as ForWorker handles.
func (f *fleet) connect(daemons [2]string) error {
	f.workers = make([][]*client.Client, f.o.Conns)
	for i := 0; i < f.o.Conns; i++ {
		conn, err := grpc.NewClient(daemons[i%2], grpc.WithTransportCredentials(insecure.NewCredentials()), f.rpcs.dialOption())
		if err != nil {
			return err
		}
		c := client.New(conn, clientOptions(fmt.Sprintf("fleet-observer-%d", i), client.WithFastMode())...)
		f.closers = append(f.closers, func() { _ = c.Close(); _ = conn.Close() })
		f.conns = append(f.conns, c)
	}
	for k := 0; k < f.o.Clients; k++ {
		i := k % f.o.Conns
		f.workers[i] = append(f.workers[i], f.conns[i].ForWorker(fmt.Sprintf("fleet-w%05d", k)))
	}
	return nil
}

// zipfShare is the share of the calls that rank k gets at skew s over n.
func zipfShare(s float64, n, k int) float64 {
	var h float64
	for i := 1; i <= n; i++ {
		h += 1 / math.Pow(float64(i), s)
	}
	return 1 / math.Pow(float64(k+1), s) / h
}

// drive is one driver: it paces the calls of its share of the workers
// (the workers of connection d % Conns whose index is d / Conns modulo
// fleetDrivers) at their total rate, each to a breaker drawn by
// popularity, until ctx ends.
func (f *fleet) drive(ctx context.Context, d int) {
	conn := d % f.o.Conns
	var mine []*client.Client
	var ids []int
	for j, h := range f.workers[conn] {
		if j%fleetDrivers == d/f.o.Conns {
			mine = append(mine, h)
			ids = append(ids, j*f.o.Conns+conn)
		}
	}
	if len(mine) == 0 {
		return
	}
	rng := rand.New(rand.NewPCG(uint64(d), 0x5eed))
	zipf := rand.NewZipf(rng, f.o.Zipf, 1, uint64(f.o.Breakers-1))
	perSec := f.o.Rate * float64(len(mine))
	start := time.Now()
	var done int64
	next := 0
	var log []callLog
	defer func() { f.logs[d] = log }()
	for ctx.Err() == nil {
		due := int64(time.Since(start).Seconds() * perSec)
		for ; done < due && ctx.Err() == nil; done++ {
			w := next
			next = (next + 1) % len(mine)
			name := f.names[zipf.Uint64()]
			f.calls.Add(1)
			err := mine[w].Call(ctx, name, func(context.Context) error {
				if name == f.failing && f.down.Load() {
					log = append(log, callLog{at: time.Now(), worker: ids[w]})
					f.failed.Add(1)
					return &client.OutcomeError{Outcome: pb.Outcome_OUTCOME_SERVER_ERROR, Message: "HTTP 503"}
				}
				return nil
			})
			switch {
			case err == nil:
			case errors.As(err, new(*client.OutcomeError)):
			default:
				if _, ok := client.AsDenial(err, name); ok {
					f.denied.Add(1)
					continue
				}
				if ctx.Err() == nil {
					f.errs.Add(1)
					f.lastErr.Store(err)
				}
			}
		}
		time.Sleep(time.Millisecond)
	}
}

func (f *fleet) snap(ctx context.Context) (snap, error) {
	cmds, by, err := commandCalls(ctx, f.rdb)
	if err != nil {
		return snap{}, err
	}
	return snap{at: time.Now(), calls: f.calls.Load(), failed: f.failed.Load(), denied: f.denied.Load(),
		cmds: cmds, by: by, rpcs: f.rpcs.n.Load()}, nil
}

// fleetResult is what one measured run saw.
type fleetResult struct {
	timeline []snap // one a second from the start
	// phases: healthy [0, FailFrom), failing [FailFrom, FailUntil),
	// recovered [FailUntil, Duration); storm from FailFrom until every
	// view denied, plus stormTail for the queued outcomes.
	healthy, failing, recovered, storm [2]snap
	trips                              []tripSeen // transitions of the failing breaker to OPEN
	denyAt                             []time.Time
	stats                              []client.Stats
	logs                               []callLog
}

// tripSeen is one transition of the failing breaker to OPEN: its time in
// Redis (the event's at_ms) and when the observer stream received it.
type tripSeen struct {
	atMs int64
	got  time.Time
}

// stormTail is how long after the last view denied the storm window
// still counts Redis commands: the outcomes queued before the trip.
const stormTail = 500 * time.Millisecond

func (f *fleet) measure(ctx context.Context) (fleetResult, error) {
	var res fleetResult
	o := f.o
	// The observer stream: every transition of the failing breaker.
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	stream, err := f.conns[0].API().Watch(wctx, &pb.WatchRequest{Breakers: []string{f.failing}})
	if err != nil {
		return res, err
	}
	if _, err := stream.Header(); err != nil {
		return res, err
	}
	var tripMu sync.Mutex
	tripped := make(chan struct{})
	go func() {
		first := true
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			e := m.GetEvent()
			if e == nil {
				continue // a heartbeat
			}
			if e.GetKind() == pb.EventKind_EVENT_KIND_TRANSITION && e.GetTo() == pb.State_STATE_OPEN {
				tripMu.Lock()
				res.trips = append(res.trips, tripSeen{atMs: e.GetAtMs(), got: time.Now()})
				tripMu.Unlock()
				if first {
					first = false
					close(tripped)
				}
			}
		}
	}()

	f.start = time.Now()
	at := func(d time.Duration) <-chan time.Time { return time.After(time.Until(f.start.Add(d))) }
	s0, err := f.snap(ctx)
	if err != nil {
		return res, err
	}
	res.timeline = append(res.timeline, s0)
	res.healthy[0] = s0
	// The timeline: one snapshot a second.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	failAt, upAt, endAt := at(o.FailFrom), at(o.FailUntil), at(o.Duration)
	var stormEnd <-chan time.Time
	denied := make(chan []time.Time, 1)
	for {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-tick.C:
			s, err := f.snap(ctx)
			if err != nil {
				return res, err
			}
			res.timeline = append(res.timeline, s)
		case <-failAt:
			failAt = nil
			s, err := f.snap(ctx)
			if err != nil {
				return res, err
			}
			res.healthy[1], res.failing[0], res.storm[0] = s, s, s
			go func() { denied <- f.observe(ctx, tripped) }()
			f.down.Store(true)
		case d := <-denied:
			res.denyAt = d
			stormEnd = time.After(stormTail)
		case <-stormEnd:
			stormEnd = nil
			s, err := f.snap(ctx)
			if err != nil {
				return res, err
			}
			res.storm[1] = s
		case <-upAt:
			upAt = nil
			f.down.Store(false)
			s, err := f.snap(ctx)
			if err != nil {
				return res, err
			}
			res.failing[1], res.recovered[0] = s, s
		case <-endAt:
			s, err := f.snap(ctx)
			if err != nil {
				return res, err
			}
			res.recovered[1] = s
			res.timeline = append(res.timeline, s)
			for _, c := range f.conns {
				res.stats = append(res.stats, c.Stats())
			}
			stopWatch()
			tripMu.Lock()
			defer tripMu.Unlock()
			if res.storm[1].at.IsZero() {
				return res, errors.New("fleet: the run ended before every connection's view denied the failing breaker (raise --fleet-duration)")
			}
			return res, nil
		}
	}
}

// observe polls, on each connection, the view's answer for the failing
// breaker (Allow by the connection's own observer id; no RPC while the
// view knows the breaker closed or open) every fastPoll until it denies,
// and returns when each connection's view denied.
func (f *fleet) observe(ctx context.Context, tripped <-chan struct{}) []time.Time {
	out := make([]time.Time, len(f.conns))
	ctx, cancel := context.WithTimeout(ctx, settle(ctx, tripWait))
	defer cancel()
	var wg sync.WaitGroup
	for i, c := range f.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				p, err := c.Allow(ctx, f.failing)
				if err == nil && !p.Allowed() {
					out[i] = time.Now()
					return
				}
				if err == nil && p.Decision == pb.Decision_DECISION_PROBE { // never hold the fleet's probe
					_, _ = c.Record(ctx, p, client.Result{Outcome: pb.Outcome_OUTCOME_CANCELED})
				}
				time.Sleep(fastPoll)
			}
		}()
	}
	wg.Wait()
	select {
	case <-tripped:
	case <-ctx.Done():
	}
	return out
}

func (f *fleet) report(w io.Writer, r fleetResult) {
	o := f.o
	fmt.Fprintln(w)
	fmt.Fprintln(w, "phase                 seconds  tool calls/s  Redis cmds/s  cmds per 1,000 calls  RPCs/s  top Redis commands")
	row := func(label string, p [2]snap) {
		secs := p[1].at.Sub(p[0].at).Seconds()
		calls, cmds, rpcs := p[1].calls-p[0].calls, p[1].cmds-p[0].cmds, p[1].rpcs-p[0].rpcs
		per := 0.0
		if calls > 0 {
			per = float64(cmds) * 1000 / float64(calls)
		}
		fmt.Fprintf(w, "%-20s %8.1f  %12.0f  %12.1f  %20.2f  %6.1f  %s\n", label, secs, float64(calls)/secs, float64(cmds)/secs, per,
			float64(rpcs)/secs, topCommands(p[0].by, p[1].by, 4))
	}
	row("healthy", r.healthy)
	row("storm (to all views)", r.storm)
	row("vendor down", r.failing)
	row("recovered", r.recovered)
	all := [2]snap{r.healthy[0], r.recovered[1]}
	row("whole run", all)
	sw := r.storm
	fmt.Fprintf(w, "storm: %d calls to the failing tool went out and failed between its vendor's failure and every view denying; %d Redis commands, %d RPCs in the %.2f s from the failure to %s after the last view denied\n",
		sw[1].failed-sw[0].failed, sw[1].cmds-sw[0].cmds, sw[1].rpcs-sw[0].rpcs, sw[1].at.Sub(sw[0].at).Seconds(), stormTail)

	fmt.Fprintln(w)
	fmt.Fprintln(w, "timeline (per second): tool calls, made and failing, denied; Redis commands, of which scripts (EVALSHA)")
	for i := 1; i < len(r.timeline); i++ {
		a, b := r.timeline[i-1], r.timeline[i]
		secs := b.at.Sub(a.at).Seconds()
		if secs <= 0 {
			continue
		}
		fmt.Fprintf(w, "  t=%5.1fs  calls %7.0f/s  failed %6.0f/s  denied %6.0f/s  redis %8.1f cmds/s  scripts %6.1f/s\n",
			b.at.Sub(f.start).Seconds(), float64(b.calls-a.calls)/secs, float64(b.failed-a.failed)/secs, float64(b.denied-a.denied)/secs,
			float64(b.cmds-a.cmds)/secs, float64(b.by["evalsha"]-a.by["evalsha"])/secs)
	}

	fmt.Fprintln(w)
	if len(r.trips) == 0 {
		fmt.Fprintln(w, "the failing breaker never tripped")
		return
	}
	trip := time.UnixMilli(r.trips[0].atMs)
	// Redis's at_ms is whole milliseconds: a call counts as after the trip
	// from the next millisecond on (conservative by up to 1 ms).
	after := trip.Add(time.Millisecond)
	var prop []time.Duration
	for _, d := range r.denyAt {
		if !d.IsZero() {
			prop = append(prop, d.Sub(trip))
		}
	}
	slices.Sort(prop)
	fmt.Fprintf(w, "trip: the failing breaker opened %d times (the first %s after the vendor failed; then each failed probe)\n",
		len(r.trips), trip.Sub(f.start.Add(o.FailFrom)).Round(100*time.Microsecond))
	if len(prop) > 0 {
		// Every worker's view is its connection's: the distribution over
		// the workers is that over the connections, each weighted by its
		// workers (equal shares).
		fmt.Fprintf(w, "  propagation, from the trip in Redis (at_ms) to each worker's view denying: p50 %s ms, p99 %s ms, max %s ms over %d workers (%d views; every worker's view is its connection's)\n",
			ms(quantile(prop, 0.5)), ms(quantile(prop, 0.99)), ms(prop[len(prop)-1]), o.Clients, len(prop))
	}
	fmt.Fprintf(w, "  the observer's own Watch stream (connection 0, breaker named) received the trip %s ms after it was in Redis\n",
		ms(r.trips[0].got.Sub(trip)))
	var late []time.Duration
	lateWorkers := map[int]bool{}
	for _, c := range r.logs {
		// Until the cooldown ends: the calls after it are probes.
		if !c.at.Before(after) && c.at.Before(trip.Add(o.Cooldown)) {
			late = append(late, c.at.Sub(trip))
			lateWorkers[c.worker] = true
		}
	}
	sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
	if len(late) == 0 {
		fmt.Fprintln(w, "  staleness: no call to the failing breaker went out after the trip was in Redis")
	} else {
		fmt.Fprintf(w, "  staleness: %d calls to the failing breaker went out after the trip was in Redis (from %d workers), the last %s ms after it (p50 %s ms)\n",
			len(late), len(lateWorkers), ms(late[len(late)-1]), ms(quantile(late, 0.5)))
	}
	var st client.Stats
	for _, s := range r.stats {
		st.SuccessesSkipped += s.SuccessesSkipped
		st.OutcomesSent += s.OutcomesSent
		st.Batches += s.Batches
		st.StaleNotSent += s.StaleNotSent
		st.SuccessesDropped += s.SuccessesDropped
		st.Resyncs += s.Resyncs
	}
	fmt.Fprintf(w, "clients (all connections, warm-up included): %d successes not sent, %d outcomes sent in %d RecordBatch calls, %d stale not sent, %d dropped, %d resyncs\n",
		st.SuccessesSkipped, st.OutcomesSent, st.Batches, st.StaleNotSent, st.SuccessesDropped, st.Resyncs)
	if n := f.errs.Load(); n > 0 {
		fmt.Fprintf(w, "errors: %d calls ended in an error that was neither the tool's nor a denial; the last: %v\n", n, f.lastErr.Load())
	}
}

// topCommands names the n commands that ran most between a and b.
func topCommands(a, b map[string]int64, n int) string {
	type kv struct {
		k string
		v int64
	}
	var out []kv
	for k, v := range b {
		if d := v - a[k]; d > 0 {
			out = append(out, kv{k, d})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].v > out[j].v || out[i].v == out[j].v && out[i].k < out[j].k })
	s := ""
	for i, x := range out {
		if i == n {
			break
		}
		if s != "" {
			s += " "
		}
		s += fmt.Sprintf("%s=%d", x.k, x.v)
	}
	if s == "" {
		return "-"
	}
	return s
}
