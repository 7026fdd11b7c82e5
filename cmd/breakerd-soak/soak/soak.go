// Package soak runs breakerd under a bounded, scheduled load and checks it
// throughout: cmd/breakerd-soak is its command. A run starts its own Redis
// (a master, a replica and 3 sentinels on free loopback ports, through
// scripts/redis-sentinel.sh), two breakerd daemons (the soak binary
// re-executed in its daemon mode, each a process of its own with its own
// /metrics), and simulated workers calling Allow and Record on breakers
// whose dependencies fail and recover on a schedule. Part-way through it
// kills a daemon and starts it again, stalls the Redis master (SIGSTOP,
// then SIGCONT: stall.go), kills the master (SIGKILL) so that Sentinel
// promotes the replica, and later restarts the master without persistence
// (faults.go). An Observer judges what the workers
// were answered, what Redis holds and what the daemons logged.
package soak

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/probe"
	"github.com/breakerd/breakerd/internal/store"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Config is one soak run.
type Config struct {
	// Topology is the Redis the run starts: TopologySentinel (the
	// default, "" too) or TopologyCluster.
	Topology string
	Duration time.Duration // the whole run
	Workers  int           // simulated workers, spread over the daemons
	Breakers int           // breakers; the last tenth are "cold" (see ColdUntil)
	Daemons  int
	// CallEvery is each worker's pause between two calls (±50%).
	CallEvery time.Duration
	// StallAt is when a master stalls (SIGSTOP, then SIGCONT before its
	// replica would take over: stall.go), as a fraction of Duration.
	// Negative: never.
	StallAt float64
	// StallFault is the stall's fault: StallSIGSTOP (the default, ""
	// too), StallBlackhole or StallLatency (stall.go).
	StallFault string
	// FailoverAt is when a master is killed (its replica takes over), as
	// a fraction of Duration. Negative: no failover.
	FailoverAt float64
	// DaemonKillAt is when the last daemon is killed (SIGKILL) and
	// started again 3 s later, as a fraction of Duration. Negative: never.
	DaemonKillAt float64
	// RestartAt is when a master (on Sentinel, the promoted replica after
	// the failover; on a Cluster, another master than the one killed) is
	// killed and started again at once without persistence (every key it
	// held gone), as a fraction of Duration. Negative: never.
	RestartAt float64
	// Seed makes the dependency schedule and the workers' choices
	// repeatable (timing still varies).
	Seed uint64
	// Scripts is the directory holding redis-sentinel.sh and
	// redis-cluster.sh.
	Scripts string
	// Self is the executable to run daemons with ("<Self> daemon <breakerd
	// flags>"); DaemonArgs adds flags.
	Self       string
	DaemonArgs []string
	// Dir holds Redis's files and the daemons' logs. Default: a temporary
	// directory, removed afterwards.
	Dir string
	// Ports is the range (first, last) the soak takes its Redis and
	// daemon ports from. Default (zero): free ephemeral ones, of which
	// the host's outgoing connections may take one before it is used.
	Ports [2]int
	// Progress, when set, gets a line every 10 s.
	Progress io.Writer
}

// The soak's policy: short, so that cooldowns, leases and retention pass
// many times within a run.
const (
	Threshold    = 3
	MinWorkers   = 2
	CooldownBase = time.Second
	CooldownCap  = 4 * time.Second
	ProbeTimeout = 2 * time.Second
	Jitter       = 0.2
	Retention    = CooldownCap + ProbeTimeout // policy.Policy.Retention
	// EventRetention is the daemons' --event-retention (its minimum).
	EventRetention = time.Minute
)

var policyYAML = fmt.Sprintf(`defaults:
  threshold: %d
  min_workers: %d
  cooldown_base: %v
  cooldown_cap: %v
  jitter: %v
  probe_timeout: %v
`, Threshold, MinWorkers, CooldownBase, CooldownCap, Jitter, ProbeTimeout)

// KeyLife is the longest a breaker's state keys outlive their last write
// (breaker.State.TTL): the retention plus the longest due time, which is
// the backoff level a probe's success keeps, probe.BackoffKept open
// periods of at most the cap, jittered.
var KeyLife = Retention + probe.BackoffKept*time.Duration(probe.Jitter(CooldownCap.Milliseconds(), Jitter))*time.Millisecond

// Report is what a run saw.
type Report struct {
	Config     Config
	Machine    string
	Started    time.Time
	Took       time.Duration
	Counts     Counts
	Errors     map[string]int64 // RPC errors by code
	Failover   string           // what happened to the master, in words
	DaemonKill string           // what happened to the killed daemon, in words
	Restart    string           // what happened at the restart without persistence
	Stall      string           // what happened at the stall
	Stalls     string           // the stall rules' figures
	Flips      string           // outage flips per daemon log and node, and the faults on each node
	FlipLines  []string         // each flip to memory: DaemonLog.FlipLines
	// Masters counts the breakers per master at the start (a Cluster).
	Masters map[string]int
	// Late is the pulse's late spans (pulse.go).
	Late       Late
	Daemons    []DaemonReport
	Violations []Violation
	FlatRule   string
}

// DaemonReport is one daemon's process over the run.
type DaemonReport struct {
	Addr                          string
	Samples                       int
	HeapFirst, HeapPeak, HeapLast float64 // bytes, after the warm-up
	GorFirst, GorPeak, GorLast    float64
}

// maxFlipLines bounds the flips the report lists one by one.
const maxFlipLines = 20

// String renders the report as plain text.
func (r *Report) String() string {
	var b strings.Builder
	c := r.Counts
	fmt.Fprintf(&b, "breakerd soak: %s, %s topology, %d workers, %d breakers, %d daemons, seed %d\n",
		r.Config.Duration, r.Config.Topology, r.Config.Workers, r.Config.Breakers, r.Config.Daemons, r.Config.Seed)
	fmt.Fprintf(&b, "machine: %s\n", r.Machine)
	fmt.Fprintf(&b, "started %s, took %s\n", r.Started.UTC().Format(time.RFC3339), r.Took.Round(time.Second))
	fmt.Fprintf(&b, "calls: %d Allow, %d Record answered; %d answers degraded (from a daemon's memory)\n", c.Allows, c.Records, c.Degraded)
	fmt.Fprintf(&b, "errors: %v\n", r.Errors)
	fmt.Fprintf(&b, "probes granted %d; denied with a probe in flight %d (%d not judged: an unanswered Allow was near)\n", c.Grants, c.Denials, c.Unjudged)
	fmt.Fprintf(&b, "transitions: %d read from the log (%d restarts at generation 1 after retention); %d seen by workers, %d of them found in the log\n",
		c.Events, c.Restarts, c.Observed, c.Verified)
	fmt.Fprintf(&b, "cold breakers: %d checks found no state key past its life (KeyLife), %d found every key gone past the event retention\n", c.StateExpired, c.Expired)
	if c.StateExpired == 0 && c.Expired == 0 {
		fmt.Fprintf(&b, "cold breakers: NOT CHECKED: the run ended before their retention passed (run at least a minute)\n")
	}
	fmt.Fprintf(&b, "stall: %s\n", r.Stall)
	fmt.Fprintf(&b, "stall figures: %s\n", r.Stalls)
	fmt.Fprintf(&b, "failover: %s\n", r.Failover)
	fmt.Fprintf(&b, "daemon kill: %s\n", r.DaemonKill)
	fmt.Fprintf(&b, "restart without persistence: %s\n", r.Restart)
	fmt.Fprintf(&b, "lost to the restart without persistence: %d transitions and worker-seen states\n", c.Wiped)
	fmt.Fprintf(&b, "counted once: %d trips from closed judged, each after at least the threshold's timeout Records\n", c.Trips)
	fmt.Fprintf(&b, "answered CLOSED inside a cooldown a worker had been told: %d (%d with a loss logged, %d lost with the killed master)\n",
		c.Forgotten, c.ForgottenLogged, c.ForgottenFailover)
	fmt.Fprintf(&b, "losses the daemons logged: %d (%d of them with no fault injected on the breaker's master by then)\n", c.Losses, c.FalseLosses)
	fmt.Fprintf(&b, "outage flips (daemon log, node: times sent to memory): %s\n", r.Flips)
	for i, l := range r.FlipLines {
		if i == maxFlipLines {
			fmt.Fprintf(&b, "  ... and %d more flips\n", len(r.FlipLines)-i)
			break
		}
		fmt.Fprintf(&b, "  flip to memory: %s\n", l)
	}
	if r.Masters != nil {
		fmt.Fprintf(&b, "breakers per master at the start: %v\n", r.Masters)
		fmt.Fprintf(&b, "breakers on masters with no fault injected: %d answers, %d of them degraded (%d of those, and %d flips past the flapping limit, while the pulse saw the host or that node late: not judged)\n",
			c.LiveAnswers, c.LiveDegraded, c.LiveExcused, c.FlipsExcused)
	}
	fmt.Fprintf(&b, "pulse (answers or wake-ups %s or more late): %s\n", PulseLate, r.Late)
	fmt.Fprintf(&b, "lost to the killed master: %d transitions read from its log were gone after the failover (on %d breakers), %d of them (or never logged) answered to a worker; %d probe leases granted again\n",
		c.LostEntries, c.LostBreakers, c.LostObserved, c.LostLeases)
	for _, d := range r.Daemons {
		fmt.Fprintf(&b, "daemon %s: %d samples; live heap %.1f MiB first, %.1f peak, %.1f last; goroutines %.0f first, %.0f peak, %.0f last\n",
			d.Addr, d.Samples, d.HeapFirst/(1<<20), d.HeapPeak/(1<<20), d.HeapLast/(1<<20), d.GorFirst, d.GorPeak, d.GorLast)
	}
	fmt.Fprintf(&b, "flat rule: %s\n", r.FlatRule)
	byRule := map[string]int{}
	for _, v := range r.Violations {
		byRule[v.Rule]++
	}
	fmt.Fprintf(&b, "violations: %d %v\n", len(r.Violations), byRule)
	shown := map[string]int{} // at most 10 of each rule
	for _, v := range r.Violations {
		if shown[v.Rule]++; shown[v.Rule] <= 10 {
			fmt.Fprintf(&b, "  %s\n", v)
		}
	}
	for rule, n := range byRule {
		if n > 10 {
			fmt.Fprintf(&b, "  ... and %d more %s\n", n-10, rule)
		}
	}
	return b.String()
}

// schedule says when each dependency fails: dependency d fails for
// fail[d] out of every period[d], starting at offset[d].
type schedule struct {
	start                time.Time
	period, fail, offset []time.Duration
}

func newSchedule(r *rand.Rand, deps int, start time.Time) *schedule {
	s := &schedule{start: start}
	for range deps {
		p := time.Duration(20+r.IntN(21)) * time.Second
		s.period = append(s.period, p)
		s.fail = append(s.fail, time.Duration(4+r.IntN(7))*time.Second)
		s.offset = append(s.offset, time.Duration(r.Int64N(int64(p))))
	}
	return s
}

func (s *schedule) failing(dep int, at time.Time) bool {
	return (at.Sub(s.start)+s.offset[dep])%s.period[dep] < s.fail[dep]
}

// Run runs one soak and returns its report; err is for a run that could
// not be carried out (Redis or a daemon did not start), not for
// violations, which are in the report.
func Run(ctx context.Context, c Config) (*Report, error) {
	if c.Topology == "" {
		c.Topology = TopologySentinel
	}
	nRedis, err := redisPorts(c.Topology)
	if err != nil {
		return nil, err
	}
	if c.Dir == "" {
		d, err := os.MkdirTemp("", "breakerd-soak-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		c.Dir = d
	}
	r := &soakRun{c: c, rep: &Report{Config: c, Started: time.Now(), Errors: map[string]int64{}, FlatRule: FlatRule, Machine: machine(),
		Failover: "none", DaemonKill: "none", Restart: "none", Stall: "none"}}
	ports, err := freePorts(nRedis+2*c.Daemons, c.Ports)
	if err != nil {
		return nil, err
	}
	if r.redis, err = startRedis(c, ports[:nRedis]); err != nil {
		return nil, err
	}
	defer r.redis.stop()
	defer func() {
		for _, d := range r.daemons {
			d.stop()
		}
	}()
	if err := r.startDaemons(ctx, ports[nRedis:]); err != nil {
		return nil, err
	}
	if err := r.prepare(ctx); err != nil {
		return nil, err
	}
	p := startPulse(r.nodes)
	defer p.stop()
	wctx, stopWorkers := context.WithDeadline(ctx, r.end)
	defer stopWorkers()
	conns, wg, err := r.startWorkers(wctx)
	defer func() {
		for _, cc := range conns {
			_ = cc.Close()
		}
	}()
	if err == nil {
		err = r.observe(ctx)
	}
	stopWorkers()
	wg.Wait()
	if err != nil {
		return nil, err
	}
	r.late = p.stop()
	r.judge(ctx)
	return r.rep, nil
}

// soakRun is one run's state.
type soakRun struct {
	c          Config
	rep        *Report
	redis      *redisSetup
	daemons    []*daemonProc
	policyFile string
	obs        *Observer
	start, end time.Time
	sched      *schedule
	names      []string
	// hot is how many breakers are called all along; the others are
	// called only until coldUntil, then must expire.
	hot       int
	coldUntil time.Time
	lastCall  []atomic.Int64 // unix ms of the end of each breaker's last call, answered or failed
	samples   [][]Sample     // each daemon's process samples
	sampleErr []error        // each daemon's last failed scrape
	faults    *faultClock
	// forced are breakers forced open at the start: every worker calls
	// one now and then (1 call in ForcedEvery), and none may be let
	// through (stall.go).
	forced []string
	// nodes are the Cluster's nodes (the masters as the daemons reach
	// them, and every replica), late what the pulse saw of them and of
	// the host (pulse.go).
	nodes []string
	late  Late
}

// Forced is how many breakers a run forces open; ForcedEvery makes a
// worker's call one at a forced breaker 1 time in ForcedEvery.
const (
	Forced      = 10
	ForcedEvery = 10
)

// startDaemons starts c.Daemons daemons on ports (gRPC and metrics each)
// and waits for them to serve.
func (r *soakRun) startDaemons(ctx context.Context, ports []int) error {
	r.policyFile = filepath.Join(r.c.Dir, "policy.yaml")
	if err := os.WriteFile(r.policyFile, []byte(policyYAML), 0o600); err != nil {
		return err
	}
	for i := range r.c.Daemons {
		d, err := startDaemon(r.c, i, addr(ports[2*i]), addr(ports[2*i+1]), r.redis, r.policyFile)
		if err != nil {
			return err
		}
		r.daemons = append(r.daemons, d)
	}
	for _, d := range r.daemons {
		if err := d.waitServing(ctx); err != nil {
			return err
		}
	}
	return nil
}

// prepare names the breakers, reads their masters (a Cluster) and makes
// the observer, the dependency schedule and the fault clock.
func (r *soakRun) prepare(ctx context.Context) error {
	c := r.c
	r.obs = NewObserver(ProbeTimeout, Retention)
	r.start = time.Now()
	r.end = r.start.Add(c.Duration)
	r.sched = newSchedule(rand.New(rand.NewPCG(c.Seed, 1)), 50, r.start)
	r.names = make([]string, c.Breakers)
	run := strconv.FormatInt(r.start.UnixMilli(), 36)
	for i := range r.names {
		r.names[i] = fmt.Sprintf("soak-%s-%04d", run, i)
	}
	r.forced = make([]string, Forced)
	for i := range r.forced {
		r.forced[i] = fmt.Sprintf("soak-%s-forced-%02d", run, i)
	}
	if r.redis.masters != nil {
		m, err := r.redis.masters(ctx, append(slices.Clip(r.names), r.forced...))
		if err != nil {
			return err
		}
		r.obs.SetMasters(m)
		r.nodes = slices.Compact(slices.Sorted(slices.Values(append(mastersOf(m), r.redis.nodes...))))
		r.rep.Masters = map[string]int{}
		for _, a := range m {
			r.rep.Masters[a]++
		}
	}
	r.hot = c.Breakers - c.Breakers/10
	// The cold breakers are called only during the first quarter (at
	// most 60 s), then never again: their keys must expire.
	r.coldUntil = r.start.Add(min(c.Duration/4, time.Minute))
	r.lastCall = make([]atomic.Int64, c.Breakers)
	r.samples = make([][]Sample, len(r.daemons))
	r.sampleErr = make([]error, len(r.daemons))
	r.faults = newFaultClock(c, r.start)
	r.obs.SetForced(r.forced)
	return r.force(ctx)
}

// force forces the breakers of r.forced open (no end), through the first
// daemon.
func (r *soakRun) force(ctx context.Context) error {
	cc, err := grpc.NewClient(r.daemons[0].addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	api := pb.NewBreakerServiceClient(cc)
	for _, b := range r.forced {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := api.Force(cctx, &pb.ForceRequest{Breaker: b, Mode: pb.ForceMode_FORCE_MODE_OPEN, Reason: "soak: forced open", Operator: "breakerd-soak"})
		cancel()
		if err != nil {
			return fmt.Errorf("force %s open: %w", b, err)
		}
	}
	return nil
}

// startWorkers starts c.Workers workers, spread over the daemons, until
// ctx ends.
func (r *soakRun) startWorkers(ctx context.Context) ([]*grpc.ClientConn, *sync.WaitGroup, error) {
	var wg sync.WaitGroup
	var errMu sync.Mutex
	countErr := func(ctx context.Context, err error) {
		if ctx.Err() != nil {
			return // the run's end cancelled it
		}
		errMu.Lock()
		r.rep.Errors[status.Code(err).String()]++
		errMu.Unlock()
		switch status.Code(err) {
		case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		default:
			r.obs.Flag("errors", "", "an error the client's fallback policy does not allow: %v", err)
		}
	}
	var conns []*grpc.ClientConn
	for i := range r.c.Workers {
		cc, err := grpc.NewClient(r.daemons[i%len(r.daemons)].addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return conns, &wg, err
		}
		conns = append(conns, cc)
		w := &worker{id: fmt.Sprintf("w%03d", i), daemon: r.daemons[i%len(r.daemons)].addr, api: pb.NewBreakerServiceClient(cc), obs: r.obs, sched: r.sched,
			names: r.names, forced: r.forced, hot: r.hot, coldUntil: r.coldUntil, every: r.c.CallEvery, lastCall: r.lastCall, onErr: countErr,
			r: rand.New(rand.NewPCG(r.c.Seed, uint64(i)+2))}
		wg.Add(1)
		go func() { defer wg.Done(); w.run(ctx) }()
	}
	return conns, &wg, nil
}

// observe is the observer's loop until the run's end: the log every 2 s,
// the daemons' processes every 2 s, the cold breakers' keys every 6 s,
// and the faults at their times.
func (r *soakRun) observe(ctx context.Context) error {
	rdb := r.redis.rdb
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	lastProgress := r.start
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		now := time.Now()
		if now.After(r.end) {
			return nil
		}
		readLog(ctx, rdb, r.obs, r.names)
		r.obs.Sweep(time.Now())
		for i, d := range r.daemons {
			s, err := d.sample(ctx)
			if err != nil {
				r.sampleErr[i] = err
				continue
			}
			r.samples[i] = append(r.samples[i], s)
		}
		if n%3 == 0 && now.After(r.coldUntil) {
			checkCold(ctx, rdb, r.obs, r.names[r.hot:], r.lastCall[r.hot:], now)
		}
		r.faults.step(ctx, now, r)
		if r.c.Progress != nil && now.Sub(lastProgress) >= 10*time.Second {
			lastProgress = now
			k := r.obs.Counts()
			fmt.Fprintf(r.c.Progress, "soak: %s of %s: %d Allow, %d Record, %d degraded, %d transitions logged, %d violations\n",
				now.Sub(r.start).Round(time.Second), r.c.Duration, k.Allows, k.Records, k.Degraded, k.Events, len(r.obs.Violations()))
		}
	}
}

// judge lets the last answers reach the log, then judges everything and
// fills the report.
func (r *soakRun) judge(ctx context.Context) {
	time.Sleep(2 * time.Second)
	obs := r.obs
	readLog(ctx, r.redis.rdb, obs, r.names)
	obs.LogGrace = 0
	obs.Sweep(time.Now().Add(time.Hour))
	checkTTLs(ctx, r.redis.rdb, obs, r.forced)
	logs := readDaemonLogs(r.c.Dir)
	obs.JudgeForgotten(logs.Losses)
	obs.JudgeLosses(logs.Losses)
	obs.JudgeLive(r.late)
	obs.JudgeLate(r.late)
	obs.CheckFlaps(logs.FlipTimes, r.late)
	var through []string // the logs of the daemons that ran through the stall
	for i := range r.daemons {
		if i == len(r.daemons)-1 && r.faults.killedNear(r.faults.stallAt) {
			continue // down or starting during it
		}
		through = append(through, fmt.Sprintf("daemon-%d.log", i))
	}
	obs.CheckStallFlips(through, logs.FlipTimes, logs.BackTimes, r.late)
	r.rep.Stalls, r.rep.Late = obs.FormatStalls(), r.late
	r.rep.Flips, r.rep.FlipLines = obs.FormatFlips(logs.Flips), logs.FlipLines
	for i, d := range r.daemons {
		obs.CheckFlat("daemon "+d.addr, r.samples[i], r.c.Workers, r.sampleErr[i])
		r.rep.Daemons = append(r.rep.Daemons, summarize(d.addr, r.samples[i]))
	}
	r.rep.Took = time.Since(r.rep.Started)
	r.rep.Counts = obs.Counts()
	r.rep.Violations = obs.Violations()
}

// worker is one simulated agent worker.
type worker struct {
	id        string
	api       pb.BreakerServiceClient
	obs       *Observer
	sched     *schedule
	daemon    string // the daemon's address
	names     []string
	forced    []string
	hot       int
	coldUntil time.Time
	every     time.Duration
	lastCall  []atomic.Int64
	onErr     func(context.Context, error) // an RPC error; ctx is the run's
	r         *rand.Rand
}

func (w *worker) run(ctx context.Context) {
	for {
		pause := w.every/2 + time.Duration(w.r.Int64N(int64(w.every)+1))
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		if w.r.IntN(ForcedEvery) == 0 {
			w.callForced(ctx, w.forced[w.r.IntN(len(w.forced))])
			continue
		}
		i := w.r.IntN(w.hot)
		if time.Now().Before(w.coldUntil) {
			i = w.r.IntN(len(w.names))
		}
		w.call(ctx, i)
	}
}

func (w *worker) call(ctx context.Context, i int) {
	name := w.names[i]
	a, sent, got, err := w.allow(ctx, name)
	// A failed call may have written the breaker's keys all the same (a
	// daemon killed after its script ran answers Unavailable): their
	// retention counts from its end either way.
	w.lastCall[i].Store(got.UnixMilli())
	// A call the run's end cancelled is reported all the same: the daemon
	// may have received it and still apply it.
	if err != nil {
		w.failed(ctx, name, "Allow", sent, got, err)
		w.obs.AllowFailed(name, sent)
		return
	}
	w.obs.Allow(name, w.id, sent, got, a)
	d := a.GetDecision()
	if ctx.Err() != nil || d != pb.Decision_DECISION_ALLOWED && d != pb.Decision_DECISION_PROBE {
		return
	}
	outcome := pb.Outcome_OUTCOME_SUCCESS
	if w.sched.failing(i%len(w.sched.period), time.Now()) || w.r.IntN(100) == 0 {
		outcome = pb.Outcome_OUTCOME_TIMEOUT
	}
	if d == pb.Decision_DECISION_PROBE && w.r.IntN(20) == 0 {
		return // a prober that dies before it records: its lease lapses
	}
	rctx, rcancel := context.WithTimeout(ctx, CallDeadline)
	defer rcancel()
	rsent := time.Now()
	rec, err := w.api.Record(rctx, &pb.RecordRequest{Breaker: name, WorkerId: w.id, Ticket: a.GetTicket(), Outcome: outcome, LatencyMs: 50})
	rgot := time.Now()
	w.lastCall[i].Store(rgot.UnixMilli())
	ticket := ""
	if d == pb.Decision_DECISION_PROBE {
		ticket = a.GetTicket().GetLeaseToken()
	}
	if err != nil {
		w.failed(ctx, name, "Record", rsent, rgot, err)
		rec = nil
	}
	w.obs.Record(name, w.id, ticket, rsent, rgot, rec)
	if outcome == pb.Outcome_OUTCOME_TIMEOUT {
		if err != nil {
			rgot = time.Time{}
		}
		w.obs.Failure(name, rsent, rgot)
	}
}

// callForced calls Allow at a breaker forced open (never Record: it
// must not let the call through).
func (w *worker) callForced(ctx context.Context, name string) {
	a, sent, got, err := w.allow(ctx, name)
	if err != nil {
		w.failed(ctx, name, "Allow", sent, got, err)
		return
	}
	w.obs.AllowForced(name, w.id+" via "+w.daemon, sent, got, a)
}

// CallDeadline is each worker call's deadline: a client's RPC timeout.
const CallDeadline = 2 * time.Second

// allow calls Allow at name with the caller's deadline (CallDeadline)
// and says when the request left and its answer (or error) arrived.
func (w *worker) allow(ctx context.Context, name string) (a *pb.AllowResponse, sent, got time.Time, err error) {
	cctx, cancel := context.WithTimeout(ctx, CallDeadline)
	defer cancel()
	sent = time.Now()
	a, err = w.api.Allow(cctx, &pb.AllowRequest{Breaker: name, WorkerId: w.id})
	return a, sent, time.Now(), err
}

// failed reports a call's error (call: "Allow", "Record"): a call that
// outlived the caller's deadline goes to Observer.Late too.
func (w *worker) failed(ctx context.Context, name, call string, sent, got time.Time, err error) {
	w.onErr(ctx, err)
	if ctx.Err() == nil && status.Code(err) == codes.DeadlineExceeded {
		w.obs.Late(name, call, w.id+" via "+w.daemon, sent, got)
	}
}

// readLog reads every breaker's event stream from where the observer left
// it (inclusive, so that a vanished entry shows) and feeds the observer.
func readLog(ctx context.Context, rdb redis.UniversalClient, obs *Observer, names []string) {
	const chunk = 200
	for lo := 0; lo < len(names); lo += chunk {
		part := names[lo:min(lo+chunk, len(names))]
		firsts := make([]string, len(part))
		cmds := make([]*redis.XMessageSliceCmd, len(part))
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, b := range part {
				firsts[i] = obs.Cursor(b)
				from := firsts[i]
				if from == "" {
					from = "-"
				}
				cmds[i] = p.XRange(ctx, store.EventsKey(b), from, "+")
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return // Redis away (the failover): read again next tick
		}
		now := time.Now()
		for i, b := range part {
			var evs []*pb.Event
			for _, m := range cmds[i].Val() {
				if e, err := store.EventFromStream(m); err == nil {
					evs = append(evs, e)
				} else {
					obs.Flag("log-order", b, "entry %s does not parse: %v", m.ID, err)
				}
			}
			obs.Log(b, firsts[i], evs, now)
		}
	}
}

// checkCold checks that the cold breakers' keys expire: EXISTS on each.
func checkCold(ctx context.Context, rdb redis.UniversalClient, obs *Observer, names []string, last []atomic.Int64, now time.Time) {
	type q struct {
		name string
		last int64
		keys []string
		cmds []*redis.IntCmd
	}
	var qs []*q
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, b := range names {
			if last[i].Load() == 0 {
				continue
			}
			k := store.KeysOf(b)
			x := &q{name: b, last: last[i].Load(), keys: []string{k.State, k.Workers, k.Events, k.RL, k.Pause}}
			for _, key := range x.keys {
				x.cmds = append(x.cmds, p.Exists(ctx, key))
			}
			qs = append(qs, x)
		}
		return nil
	})
	if err != nil {
		return
	}
	for _, x := range qs {
		var left []string
		for j, c := range x.cmds {
			if c.Val() > 0 {
				left = append(left, x.keys[j])
			}
		}
		obs.KeysLeft(x.name, left, time.UnixMilli(x.last), now, EventRetention)
	}
}

// checkTTLs flags any breaker key with no TTL (on every master): every
// key a worker's calls create expires. The keys of the breakers of forced
// (forced open with no end: the pin does not expire) are left out.
func checkTTLs(ctx context.Context, rdb redis.UniversalClient, obs *Observer, forced []string) {
	var n atomic.Int64
	pinned := func(key string) bool {
		for _, b := range forced {
			if strings.HasPrefix(key, strings.TrimSuffix(store.KeysOf(b).State, "state")) {
				return true
			}
		}
		return false
	}
	err := forEachMaster(ctx, rdb, func(ctx context.Context, c redis.UniversalClient) error {
		iter := c.Scan(ctx, 0, store.Prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			key := iter.Val()
			if pinned(key) {
				continue
			}
			if ttl, err := c.PTTL(ctx, key).Result(); err == nil && ttl == -1 && n.Add(1) <= 10 {
				obs.Flag("keys", "", "%s has no TTL", key)
			}
		}
		return iter.Err()
	})
	if err != nil {
		obs.Flag("keys", "", "scanning the keys for their TTLs: %v", err)
	}
}

// resync reads, for every breaker, the newest entry of its stream at or
// before the last one the observer read, and hands it to Observer.Resync:
// what was read after it died with the killed master.
func resync(ctx context.Context, rdb redis.UniversalClient, obs *Observer, names []string) {
	const chunk = 200
	for lo := 0; lo < len(names); lo += chunk {
		part := names[lo:min(lo+chunk, len(names))]
		cmds := make([]*redis.XMessageSliceCmd, len(part))
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, b := range part {
				if c := obs.Cursor(b); c != "" {
					cmds[i] = p.XRevRangeN(ctx, store.EventsKey(b), c, "-", 1)
				}
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			obs.Flag("failover", "", "reading the logs after the failover: %v", err)
			return
		}
		for i, b := range part {
			if cmds[i] == nil {
				continue
			}
			var survivor *pb.Event
			if ms := cmds[i].Val(); len(ms) > 0 {
				if e, err := store.EventFromStream(ms[0]); err == nil {
					survivor = e
				}
			}
			obs.Resync(b, survivor, time.Now())
		}
	}
}

// daemonProc is one breakerd daemon process.
type daemonProc struct {
	addr, metrics string
	policyFile    string // to start it again
	cmd           *exec.Cmd
	log           *os.File
}

func startDaemon(c Config, i int, grpcAddr, metricsAddr string, rs *redisSetup, policyFile string) (*daemonProc, error) {
	// Appended to: a daemon killed and started again writes on.
	logf, err := os.OpenFile(filepath.Join(c.Dir, fmt.Sprintf("daemon-%d.log", i)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	args := []string{"daemon", "--listen", grpcAddr, "--metrics-listen", metricsAddr, "--redis-url", rs.url,
		"--config", policyFile, "--events-max-len", "100000", "--event-retention", EventRetention.String(),
		"--health-interval", "1s", "--drain-delay", "0s", "--log-format", "json",
		// Every worker is anonymous on loopback: one token's quotas
		// would refuse the soak's own 1,000 breakers.
		"--new-breakers-per-minute", "0", "--alerts-per-minute", "0"}
	args = append(append(args, "--redis-decision-timeout", DecisionTimeout.String()), c.DaemonArgs...)
	if rs.cluster {
		args = append(args, "--redis-cluster")
	}
	cmd := exec.Command(c.Self, args...)
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "BREAKERD_") {
			env = append(env, e)
		}
	}
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("start daemon %d: %w", i, err)
	}
	return &daemonProc{addr: grpcAddr, metrics: metricsAddr, policyFile: policyFile, cmd: cmd, log: logf}, nil
}

func (d *daemonProc) waitServing(ctx context.Context) error {
	cc, err := grpc.NewClient(d.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	h := healthpb.NewHealthClient(cc)
	// A daemon serves once Redis answers its health check and, after an
	// outage at start, once it has listed its breakers: on a host running
	// other suites a Cluster's listing can take a while.
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		r, err := h.Check(cctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("daemon %s did not serve within 90s; its log is %s", d.addr, d.log.Name())
}

func (d *daemonProc) stop() {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = d.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		<-done
	}
	_ = d.log.Close()
}

// sample scrapes the daemon's live heap and goroutine count.
func (d *daemonProc) sample(ctx context.Context) (Sample, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(cctx, http.MethodGet, "http://"+d.metrics+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Sample{}, err
	}
	defer resp.Body.Close()
	s := Sample{At: time.Now()}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "go_gc_heap_live_bytes":
			s.LiveHeap = v
		case "go_goroutines":
			s.Goroutines = v
		}
	}
	if s.LiveHeap == 0 || s.Goroutines == 0 {
		return s, errors.New("metrics without go_gc_heap_live_bytes or go_goroutines")
	}
	return s, sc.Err()
}

func summarize(a string, ss []Sample) DaemonReport {
	d := DaemonReport{Addr: a, Samples: len(ss)}
	ss = ss[len(ss)/5:]
	if len(ss) == 0 {
		return d
	}
	d.HeapFirst, d.GorFirst = ss[0].LiveHeap, ss[0].Goroutines
	d.HeapLast, d.GorLast = ss[len(ss)-1].LiveHeap, ss[len(ss)-1].Goroutines
	for _, s := range ss {
		d.HeapPeak, d.GorPeak = max(d.HeapPeak, s.LiveHeap), max(d.GorPeak, s.Goroutines)
	}
	return d
}

func machine() string {
	host, _ := os.Hostname()
	m := fmt.Sprintf("%s, %d CPUs, %s/%s, %s", host, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		m += ", load average at start " + strings.Join(strings.Fields(string(b))[:3], " ")
	}
	return m
}

func runScript(path string, env []string, args ...string) ([]byte, error) {
	cmd := exec.Command(path, args...)
	cmd.Env = env
	return cmd.CombinedOutput()
}

// freePorts returns n ports nobody listens on: from within (first,
// last), beginning at a random one of them, or ephemeral ones when
// within is zero.
func freePorts(n int, within [2]int) ([]int, error) {
	var ls []net.Listener
	var ports []int
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	span := within[1] - within[0] + 1
	start := rand.IntN(max(span, 1))
	for i := 0; len(ports) < n; i++ {
		at := "127.0.0.1:0"
		if within[0] != 0 {
			if i == span {
				return nil, fmt.Errorf("ports %d-%d: fewer than %d free", within[0], within[1], n)
			}
			at = addr(within[0] + (start+i)%span)
		}
		l, err := net.Listen("tcp", at)
		if err != nil && within[0] != 0 {
			continue // taken
		}
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func joinPorts(ps []int) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, " ")
}

func addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }
