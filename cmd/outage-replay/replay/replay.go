package replay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// The arms, in table order: the five of every replay, then those a
// Config asks for.
const (
	ArmNoBreaker = iota + 1
	ArmPerRunFailFast
	ArmPerRunRemove
	ArmFleetRemove
	ArmFleetFailFast
	// ArmFleetRemoveCheck is ArmFleetRemove with a recovery check
	// (Config.RecoveryCheck; only then).
	ArmFleetRemoveCheck
	// ArmFleetWindow is ArmFleetRemove counting by the failure rate over a
	// window (Config.Window; only then).
	ArmFleetWindow
	// ArmFleetSlow is ArmFleetRemove counting slow calls (a slow outage,
	// Config.SlowOutage; only then).
	ArmFleetSlow
)

var armNames = map[int]string{
	ArmNoBreaker:      "no breaker",
	ArmPerRunFailFast: "per-run breaker, fail fast",
	ArmPerRunRemove:   "per-run breaker, tool removed + notice",
	ArmFleetRemove:    "breakerd fleet-wide, tool removed + notice",
	ArmFleetFailFast:  "breakerd fleet-wide, fail fast",
	// The name fits the table's 45 columns.
	ArmFleetRemoveCheck: "arm 4 + recovery check of a status endpoint",
	ArmFleetWindow:      "arm 4 counting the failure rate in a window",
	ArmFleetSlow:        "arm 4 counting slow calls",
}

func fleet(arm int) bool {
	return arm == ArmFleetRemove || arm == ArmFleetFailFast || arm == ArmFleetRemoveCheck || arm == ArmFleetWindow || arm == ArmFleetSlow
}

// armBreakerPrefix starts the names of arm's breakers in replay id.
func armBreakerPrefix(id string, arm int) string {
	return NamePrefix + id + ":" + armTag(arm) + ":"
}

// armTag is arm's part of its breakers' names.
func armTag(arm int) string { return fmt.Sprintf("arm%d", arm) }

// runs reports whether cfg runs arm.
func (c Config) runs(arm int) bool {
	if arm == ArmFleetRemoveCheck && c.RecoveryCheck <= 0 || arm == ArmFleetWindow && c.Window <= 0 ||
		arm == ArmFleetSlow && c.SlowOutage <= 0 {
		return false
	}
	return !c.sweep || arm == ArmFleetRemove || arm == ArmFleetRemoveCheck
}

// Row is one arm's line of the table, over the Runs runs that arrived
// during the outage.
type Row struct {
	Arm  int
	Name string
	Runs int
	// Calls is the web_search calls that reached the vendor (distinct
	// calls among the requests it received); Attempts the HTTP requests it
	// received. Both are the vendor's own counts.
	Calls, Attempts int
	// Steps is the model steps taken; Spend is Steps × StepPrice.
	Steps int
	Spend float64
	// Median and P95 are run wall times, arrival to answer, incident time.
	Median, P95 time.Duration
	// Probes is the probe calls let out: for the fleet arms, the PROBE
	// decisions breakerd gave for the arm's breaker over the whole replay
	// (tail included); for the per-run arms, the runs' own.
	Probes int
	// Lacked is the runs the vendor never served results to; Admitted is
	// how many of their answers said the search was missing.
	Lacked, Admitted int

	// Cross-checks, from the model's side of the wire.
	ToolCalls   int // calls the tool's HTTP code ran, as the model counted
	Denials     int // calls the guard refused
	Results     int // runs whose model got results
	Served      int // runs the vendor served a 200 to
	FalseAdmits int // answers that said the search was missing though it was not
	// Without is the runs that went without web_search: their model was
	// given its tools without it (or, in an arm that removes a refused
	// tool, a call at the run's last step was refused); StartedWithout
	// of them from their first step.
	Without, StartedWithout int

	// Fleet arms only.
	Breaker string
	// Wire is breakerd's RPCs for the arm's breaker, counted at the daemon
	// (in-process) or, with an external daemon, at the replay's clients.
	Wire breakerWire
	// ClientWire is the same, counted at the replay's clients.
	ClientWire breakerWire
	// Recovery is what happened after the vendor recovered.
	Recovery *Recovery

	runs []runOut // by run id
	// policy is the daemon's policy for Breaker, read before the replay
	// started (nil when it could not be read).
	policy *pb.Policy
}

// Recovery is a fleet arm's breaker after the vendor recovered.
type Recovery struct {
	// Opened is false when the breaker never opened (a partial outage,
	// Config.FailRate, that its counting did not trip on).
	Opened bool
	// Closed is false when no probe succeeded, after the vendor
	// recovered, before the tail ended (or none was needed: see Tail).
	Closed bool
	// After is from the vendor's recovery to the Record of the first
	// successful probe, incident time.
	After time.Duration
	// TailRuns arrived after the outage, until the breaker closed (none
	// when it was closed at the recovery: never opened, or closed again by
	// a probe during a partial outage);
	// TailLacked of them answered without search results; TailCalls of
	// their calls reached the vendor.
	TailRuns, TailLacked, TailCalls int
	// TailToolCalls and TailDenials are the tail runs' calls as their
	// model counted them: made, and refused by breakerd.
	TailToolCalls, TailDenials int
	// TailWithout is the tail runs that went without web_search (as
	// Row.Without).
	TailWithout int

	// With a recovery check (arm 6) only:
	// Checked is true; HalfOpened is false when the breaker was never
	// half-open (or closed) after the vendor recovered, else HalfOpenAfter
	// is from the recovery to the first time it was, at the daemon (its
	// event's time; 0 when it already was at the recovery), and ByCheck
	// says a recovery check moved it (rather than its cooldown).
	Checked, HalfOpened, ByCheck bool
	HalfOpenAfter                time.Duration
	// CheckRequests is the status requests the vendor received over the
	// whole replay; MaxPerMinute the most in any 60 s (incident time).
	CheckRequests, MaxPerMinute int
}

// Report is a finished replay.
type Report struct {
	Config Config
	// Daemon says which breakerd the fleet arms used.
	Daemon string
	// countedAt says where the breakerd RPCs were counted.
	countedAt string
	// virtual: the replay ran on a virtual clock (an in-process daemon),
	// so Lag is 0 whatever the machine's load.
	virtual bool
	// policyOff: a warning says the daemon's policy is not the replay's.
	policyOff bool
	Rows      []Row
	// Elapsed is the replay's wall-clock time.
	Elapsed time.Duration
	// Lag is the most any run fell behind its schedule (incident time): a
	// machine too busy for the scale, against an external daemon (on the
	// virtual clock of an in-process one it is 0). Rows 1 to 3 do not
	// depend on it (the vendor judges attempts by their schedule); the
	// fleet rows do, since an external breakerd decides on its Redis's
	// real clock.
	Lag time.Duration
	// Warnings are reasons to distrust the fleet rows (a daemon whose
	// policy is not the replay's, decisions a client's fallback made).
	Warnings []string
	// Savings are breakerd's savings counts for the fleet arms' breakers,
	// checked against the replay's own counts.
	Savings []SavingsCheck
}

// runOut is one finished run of one arm.
type runOut struct {
	id int
	runResult
}

// Replay runs every arm cfg asks for concurrently, each with its own fake vendor
// and breaker names, and returns the table. Errors: an invalid Config, no
// breakerd at Addr, a Redis the in-process daemon cannot use, breakerd
// refusing a request, and ctx ending.
func Replay(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := newReplayRun(cfg)
	defer r.close()
	if err := r.startDaemon(ctx); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	r.onClose(cancel)
	if err := r.startArms(ctx); err != nil {
		return nil, err
	}
	if err := r.runArms(ctx, cancel); err != nil {
		return nil, err
	}
	rep := r.rep
	for _, a := range r.arms {
		rep.Rows = append(rep.Rows, r.row(a))
	}
	if err := rep.checkSavings(ctx, r.fleetClients); err != nil {
		return nil, err
	}
	if rep.Lag > cfg.StepTime {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("the machine fell up to %s (incident time) behind the replay's schedule; "+
			"the fleet rows, decided on breakerd's real clock, are distorted: try a smaller --scale", rep.Lag.Round(time.Second)))
	}
	return rep, nil
}

// replayRun is one Replay's shared state: its clock, its daemon, its arms
// and what is closed at its end.
type replayRun struct {
	cfg   Config
	id    string
	clk   *clock
	waits wireWaits
	rep   *Report
	// addr is breakerd's address: Config.Addr, or the in-process daemon's.
	addr string
	// checkVendor is the recovery check's vendor (nil without one): the
	// status endpoint ArmFleetRemoveCheck's arm shares.
	checkVendor *vendor
	// emb is the in-process daemon (nil with Config.Addr) and daemonWire
	// what it counted.
	emb          *embedded
	daemonWire   *tally
	arms         []*armRun
	fleetClients []*client.Client
	closers      []func()
}

// armRun is one arm of a replay: its breaker and vendor, its clients, and
// its runs' outcomes (outs within the outage's arrivals, tail after).
type armRun struct {
	arm     int
	breaker string
	vendor  *vendor
	clients []*client.Client
	wire    *tally // client side
	policy  *pb.Policy
	mu      sync.Mutex
	outs    []runOut
	tail    []runOut
}

// newReplayRun picks the replay's id and clock: an in-process daemon
// decides on the replay's own virtual clock; an external one on its
// Redis's, which the replay can only follow on the wall clock.
func newReplayRun(cfg Config) *replayRun {
	var idb [4]byte
	_, _ = rand.Read(idb[:])
	r := &replayRun{cfg: cfg, id: hex.EncodeToString(idb[:]), addr: cfg.Addr}
	r.clk = newClock(cfg.Scale) // started again in runArms, when all is ready
	if r.addr == "" {
		r.clk = newVirtualClock(cfg.Scale)
	}
	r.waits = wireWaitsFor(r.clk.virtual)
	r.rep = &Report{Config: cfg, virtual: r.clk.virtual}
	return r
}

// onClose has f run at the replay's end, after what was added before it.
func (r *replayRun) onClose(f func()) { r.closers = append(r.closers, f) }

// close runs the closers, the last added first.
func (r *replayRun) close() {
	for i := len(r.closers) - 1; i >= 0; i-- {
		r.closers[i]()
	}
}

// startDaemon starts the recovery check's vendor (if any) and the
// in-process daemon, or checks that the external one answers.
func (r *replayRun) startDaemon(ctx context.Context) error {
	statusURL := ""
	if r.cfg.RecoveryCheck > 0 {
		r.checkVendor = newVendor(r.clk, r.cfg)
		r.onClose(r.checkVendor.close)
		statusURL = r.checkVendor.srv.URL + "/status"
	}
	if r.addr != "" {
		if err := reachable(ctx, r.addr, r.waits); err != nil {
			return err
		}
		r.rep.Daemon = "breakerd at " + r.addr + " (its policy for " + NamePrefix + "* must be --print-policy's)"
		r.rep.countedAt = "counted at the replay's clients: the daemon is not ours to instrument"
		return nil
	}
	d, err := startEmbedded(r.cfg, r.clk, r.id, statusURL, r.waits)
	if err != nil {
		return err
	}
	r.onClose(d.stop)
	r.emb = d
	r.addr, r.rep.Daemon, r.daemonWire = d.addr, "breakerd "+d.desc, d.calls
	r.rep.countedAt = "counted at the daemon"
	return nil
}

// startArms sets up every arm the Config runs: its vendor (the recovery
// check's arm shares the check's) and, for a fleet arm, its clients.
func (r *replayRun) startArms(ctx context.Context) error {
	for arm := ArmNoBreaker; arm <= ArmFleetSlow; arm++ {
		if !r.cfg.runs(arm) {
			continue
		}
		a := &armRun{arm: arm, vendor: r.checkVendor}
		if arm != ArmFleetRemoveCheck {
			a.vendor = newVendor(r.clk, r.cfg)
			r.onClose(a.vendor.close)
		}
		if fleet(arm) {
			if err := r.dialFleet(ctx, a); err != nil {
				return err
			}
		}
		r.arms = append(r.arms, a)
	}
	return nil
}

// dialFleet dials a fleet arm's workers, each connected before the clock
// starts, and reads its breaker's policy.
func (r *replayRun) dialFleet(ctx context.Context, a *armRun) error {
	a.breaker = armBreakerPrefix(r.id, a.arm) + "web_search"
	a.wire = newTally(r.clk, r.cfg.Outage)
	for w := range r.cfg.Workers {
		opts := []client.Option{client.WithWorkerID(fmt.Sprintf("replay-%s-arm%d-w%d", r.id, a.arm, w+1)),
			client.WithDialOptions(a.wire.dialOption()), client.WithSavingsInterval(reportAtEnd)}
		opts = append(opts, r.waits.clientOptions()...)
		if a.arm == ArmFleetSlow {
			// Latencies on the clock breakerd decides by (replay time).
			opts = append(opts, client.WithClock(replayClock{r.clk}))
		}
		c, err := client.Dial(r.addr, opts...)
		if err != nil {
			return err
		}
		r.onClose(func() { _ = c.Close() })
		// Connect before the clock starts; the name is not the arm's.
		if _, err := c.API().BatchGet(ctx, &pb.BatchGetRequest{Breakers: []string{NamePrefix + r.id + ":warmup"}}); err != nil {
			return fmt.Errorf("breakerd at %s: %w", r.addr, err)
		}
		a.clients = append(a.clients, c)
		r.fleetClients = append(r.fleetClients, c)
	}
	a.policy = daemonPolicy(ctx, a.clients[0], a.breaker, r.waits)
	return nil
}

// authority is the tally that counts a fleet arm's breaker: the
// in-process daemon's, else the arm's clients'.
func (r *replayRun) authority(a *armRun) *tally {
	if r.daemonWire != nil {
		return r.daemonWire
	}
	return a.wire
}

// guard is the breaker run number run of arm a answers through.
func (r *replayRun) guard(a *armRun, run int, sched *schedule) guard {
	switch a.arm {
	case ArmPerRunFailFast, ArmPerRunRemove:
		b := newRunBreaker(r.cfg, func() time.Duration { return sched.t })
		return &perRunGuard{b: b, remove: a.arm == ArmPerRunRemove}
	case ArmFleetRemove, ArmFleetRemoveCheck, ArmFleetWindow, ArmFleetSlow:
		return &fleetRunGuard{run: client.NewRun(a.clients[run%len(a.clients)]),
			tool: client.Tool{Name: searchTool, Breaker: a.breaker, Description: "Search the web."}}
	case ArmFleetFailFast:
		return &fleetCallGuard{c: a.clients[run%len(a.clients)], breaker: a.breaker}
	}
	return noGuard{}
}

// runner runs a replay's arms: the runs of every arm, concurrently, on
// the replay's clock; the first error cancels them all.
type runner struct {
	r       *replayRun
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	errOnce sync.Once
	err     error
}

func (u *runner) fail(err error) {
	u.errOnce.Do(func() { u.err = err; u.cancel() })
}

// runArms starts the clock (the outage begins now, for the vendors, the
// runs and the tallies alike), runs every arm's arrivals and the in-process
// daemon's recovery checks, and waits for every run to end.
func (r *replayRun) runArms(ctx context.Context, cancel context.CancelFunc) error {
	r.clk.start()
	u := &runner{r: r, ctx: ctx, cancel: cancel}
	began := time.Now()
	for range r.arms {
		r.clk.join() // every arm's arrivals, before any of them sleeps
	}
	// The checks' actor joins after them: alone, it would move a virtual
	// clock ahead of runs not yet arrived.
	stopChecks := func() {}
	if r.emb != nil {
		stopChecks = r.emb.runChecks(ctx, r.cfg, r.clk)
	}
	for _, a := range r.arms {
		u.wg.Add(1)
		go u.arrivals(a)
	}
	u.wg.Wait()
	stopChecks()
	r.rep.Elapsed = time.Since(began)
	if u.err != nil {
		return u.err
	}
	return ctx.Err()
}

// arrivals starts arm a's runs on schedule and, for a fleet arm, those
// arriving past the outage while its breaker stays open.
func (u *runner) arrivals(a *armRun) {
	defer u.wg.Done()
	defer u.r.clk.leave()
	cfg, clk := u.r.cfg, u.r.clk
	for i := range cfg.Runs {
		at := time.Duration(i) * cfg.interval()
		if clk.sleepUntil(u.ctx, at) != nil {
			return
		}
		u.start(a, i, at, false)
	}
	if !fleet(a.arm) {
		return
	}
	// Past the outage: runs keep arriving while the breaker is open.
	for k := 0; time.Duration(k)*cfg.interval() <= cfg.Tail; k++ {
		at := cfg.Outage + time.Duration(k)*cfg.interval()
		if clk.sleepUntil(u.ctx, at) != nil {
			return
		}
		if !u.r.authority(a).of(a.breaker).Open {
			return // closed: never opened, or closed again
		}
		u.start(a, cfg.Runs+k, at, true)
	}
}

// start runs run number run of arm a, arriving at arrival, in its own
// goroutine; its outcome goes to the arm's outs, or its tail.
func (u *runner) start(a *armRun, run int, arrival time.Duration, tail bool) {
	cfg, clk := u.r.cfg, u.r.clk
	u.wg.Add(1)
	clk.join()
	go func() {
		defer u.wg.Done()
		defer clk.leave()
		sched := &schedule{t: arrival}
		g := u.r.guard(a, run, sched)
		res, err := runModel(u.ctx, cfg, clk, g, sched, func(ctx context.Context, call int, at time.Duration) (time.Duration, error) {
			return a.vendor.search(ctx, run, call, cfg.Attempts, cfg.CallTime, at)
		})
		if err != nil {
			if u.ctx.Err() == nil {
				u.fail(fmt.Errorf("arm %d run %d: %w", a.arm, run, err))
			}
			return
		}
		a.mu.Lock()
		if tail {
			a.tail = append(a.tail, runOut{run, res})
		} else {
			a.outs = append(a.outs, runOut{run, res})
		}
		a.mu.Unlock()
	}()
}

// row is arm a's line of the table, from its runs and, for a fleet arm,
// its breaker's wire and recovery; it adds the arm's policy warnings and
// its runs' lag to the report.
func (r *replayRun) row(a *armRun) Row {
	rep := r.rep
	slices.SortFunc(a.outs, func(x, y runOut) int { return x.id - y.id })
	row := Row{Arm: a.arm, Name: armNames[a.arm], Runs: len(a.outs), Breaker: a.breaker, runs: a.outs}
	var walls []time.Duration
	for _, o := range a.outs {
		calls, attempts, served := a.vendor.seen(o.id)
		row.Calls += calls
		row.Attempts += attempts
		row.Steps += o.steps
		row.ToolCalls += o.toolCalls
		row.Denials += o.denials
		row.Probes += o.probes
		walls = append(walls, o.wall)
		rep.Lag = max(rep.Lag, o.lag)
		if o.results {
			row.Results++
		}
		if went := wentWithout(a.arm, o.runResult); went {
			row.Without++
			if o.goneAt == 1 {
				row.StartedWithout++
			}
		}
		if served {
			row.Served++
		} else {
			row.Lacked++
			if admitsDegraded(o.answer) {
				row.Admitted++
			}
		}
		if served && admitsDegraded(o.answer) {
			row.FalseAdmits++
		}
	}
	row.Spend = float64(row.Steps) * r.cfg.StepPrice
	row.Median, row.P95 = percentile(walls, 0.5), percentile(walls, 0.95)
	if fleet(a.arm) {
		r.fleetRow(a, &row)
	}
	return row
}

// fleetRow fills a fleet arm's row: its breaker's wire, probes and
// recovery, and the report's warnings about its policy.
func (r *replayRun) fleetRow(a *armRun, row *Row) {
	rep, cfg := r.rep, r.cfg
	row.Wire, row.ClientWire = r.authority(a).of(a.breaker), a.wire.of(a.breaker)
	row.policy = a.policy
	row.Probes = row.Wire.Decisions[pb.Decision_DECISION_PROBE]
	rec := &Recovery{TailRuns: len(a.tail), Opened: row.Wire.Trip != nil}
	if at := row.Wire.ClosedAt; at != 0 {
		rec.Closed, rec.After = true, at-cfg.Outage
	}
	for _, o := range a.tail {
		calls, _, served := a.vendor.seen(o.id)
		rec.TailCalls += calls
		rec.TailToolCalls += o.toolCalls
		rep.Lag = max(rep.Lag, o.lag)
		rec.TailDenials += o.denials
		if wentWithout(a.arm, o.runResult) {
			rec.TailWithout++
		}
		if !served {
			rec.TailLacked++
		}
	}
	if a.arm == ArmFleetRemoveCheck {
		rec.Checked = true
		rec.HalfOpenAfter, rec.ByCheck, rec.HalfOpened = r.emb.halfOpenAfter(a.breaker, cfg.Outage)
		seen := a.vendor.statusSeen()
		rec.CheckRequests, rec.MaxPerMinute = len(seen), maxInWindow(seen, time.Minute)
	}
	row.Recovery = rec
	for _, w := range policyWarnings(cfg, *row) {
		rep.Warnings = append(rep.Warnings, w.Error())
		rep.policyOff = rep.policyOff || errors.Is(w, errPolicy)
	}
}

// policyWarnings says when a fleet arm's breaker did not behave as the
// replay's policy makes it: an external daemon without --print-policy's
// file (those wrap errPolicy), or a client that answered from its
// fallback.
func policyWarnings(cfg Config, row Row) []error {
	var out []error
	if n := row.ClientWire.Errors; n > 0 {
		out = append(out, fmt.Errorf("arm %d: %d breakerd RPCs failed; the client's local fallback decided those calls", row.Arm, n))
	}
	out = append(out, policyMismatch(cfg, row)...)
	trip := row.Wire.Trip
	if trip == nil {
		if cfg.FailRate < 1 || cfg.SlowOutage > 0 {
			return out // a partial or slow outage need not trip every arm
		}
		return append(out, fmt.Errorf("arm %d: the fleet breaker never opened", row.Arm))
	}
	if row.Arm == ArmFleetWindow {
		// A window's trip is judged by its rate: only the quorum shows.
		if trip.GetDistinctWorkers() < int64(cfg.Quorum) {
			out = append(out, fmt.Errorf("arm %d: %w: it opened on failures from %d workers, the replay's quorum is %d (see --print-policy)",
				row.Arm, errPolicy, trip.GetDistinctWorkers(), cfg.Quorum))
		}
	} else if trip.GetFailures() < int64(cfg.Threshold) || trip.GetDistinctWorkers() < int64(cfg.Quorum) {
		out = append(out, fmt.Errorf("arm %d: %w: it opened after %d failures from %d workers, the replay's threshold is %d from %d (see --print-policy)",
			row.Arm, errPolicy, trip.GetFailures(), trip.GetDistinctWorkers(), cfg.Threshold, cfg.Quorum))
	}
	lo := cfg.scaled(cfg.CooldownBase).Milliseconds()
	hi := int64(float64(lo)*(1+cfg.Jitter)) + 2
	if cd := trip.GetCooldownMs(); cd < lo || cd > hi {
		out = append(out, fmt.Errorf("arm %d: %w: its first cooldown was %dms, the replay's is %dms to %dms (see --print-policy)",
			row.Arm, errPolicy, cd, lo, hi))
	}
	return out
}

// daemonPolicy reads the daemon's policy for breaker, before the replay
// starts, so that whether it is the replay's does not depend on how the
// replay went (an arm whose RPCs all failed on a busy machine answers
// nothing about it). nil when it cannot be read.
func daemonPolicy(ctx context.Context, c *client.Client, breaker string, waits wireWaits) *pb.Policy {
	ctx, cancel := context.WithTimeout(ctx, waits.setup)
	defer cancel()
	res, err := c.API().GetPolicy(ctx, &pb.GetPolicyRequest{Breaker: breaker})
	if err != nil {
		return nil
	}
	return res.GetPolicy()
}

// policyMismatch compares the daemon's policy for a fleet arm's breaker,
// as read before the replay, with the one --print-policy gives it: a
// daemon without that file would make the arms trip late or never,
// silently.
func policyMismatch(cfg Config, row Row) []error {
	got := row.policy
	if got == nil {
		return []error{fmt.Errorf("arm %d: %w: breakerd did not tell its policy for %s (see --print-policy)", row.Arm, errPolicy, row.Breaker)}
	}
	var out []error
	if row.Arm == ArmFleetWindow && got.GetMode() != policy.ModeWindow {
		out = append(out, fmt.Errorf("arm %d: %w: its breaker is not in window mode (see --print-policy)", row.Arm, errPolicy))
	}
	if want := cfg.scaledMs(cfg.SlowCall); row.Arm == ArmFleetSlow && got.GetSlowCallMs() != want {
		out = append(out, fmt.Errorf("arm %d: %w: its breaker's slow_call is %dms, the replay's is %dms (see --print-policy)",
			row.Arm, errPolicy, got.GetSlowCallMs(), want))
	}
	if want := cfg.scaledMs(cfg.CooldownBase); got.GetCooldownBaseMs() != want || int(got.GetMinWorkers()) != cfg.Quorum {
		out = append(out, fmt.Errorf("arm %d: %w: its cooldown is %dms with a quorum of %d, the replay's is %dms with %d (see --print-policy)",
			row.Arm, errPolicy, got.GetCooldownBaseMs(), got.GetMinWorkers(), want, cfg.Quorum))
	}
	return out
}

// maxInWindow is the most of ts (sorted) that fall in any half-open
// window [t, t+w).
func maxInWindow(ts []time.Duration, w time.Duration) int {
	best, lo := 0, 0
	for hi := range ts {
		for ts[hi]-ts[lo] >= w {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

// plural is "1 run", "2 runs".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// percentile is the nearest-rank p-quantile of ds; 0 when empty.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// Print writes the table and what followed the outage.
func (r *Report) Print(w io.Writer) error {
	c := r.Config
	var b strings.Builder
	over := fmt.Sprintf("a %s search outage", c.Outage)
	if c.Arrivals() < c.Outage {
		over = fmt.Sprintf("the first %s of a %s search outage", c.Arrivals(), c.Outage)
	}
	if c.SlowOutage > 0 {
		fmt.Fprintf(&b, "%d runs arriving evenly over %s; every web_search call answers, after %s during the outage; %s and $%.2f per model step\n",
			c.Runs, strings.Replace(over, "search outage", "slow search outage", 1), c.SlowOutage, c.StepTime, c.StepPrice)
	} else {
		fmt.Fprintf(&b, "%d runs arriving evenly over %s; each failing web_search call: %d attempts over %s; %s and $%.2f per model step\n",
			c.Runs, over, c.Attempts, c.CallTime, c.StepTime, c.StepPrice)
	}
	if r.virtual {
		fmt.Fprintf(&b, "replayed on a virtual clock (%s) against %s\n\n", r.Elapsed.Round(100*time.Millisecond), r.Daemon)
	} else {
		fmt.Fprintf(&b, "replayed at 1/%g time (%s) against %s\n\n", c.Scale, r.Elapsed.Round(100*time.Millisecond), r.Daemon)
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	const nameWidth = 45
	fmt.Fprintf(tw, "%-*s\truns\tcalls at vendor\tHTTP attempts\tmodel steps\tspend\tmedian run\tp95 run\tprobes\tadmitted\t\n", nameWidth, "arm")
	for _, row := range r.Rows {
		probes := fmt.Sprint(row.Probes)
		if row.Arm == ArmNoBreaker {
			probes = "-"
		}
		fmt.Fprintf(tw, "%-*s\t%d\t%d\t%d\t%d\t$%.2f\t%s\t%s\t%s\t%d/%d\t\n", nameWidth, fmt.Sprintf("%d %s", row.Arm, row.Name), row.Runs, row.Calls, row.Attempts,
			row.Steps, row.Spend, row.Median.Round(time.Second), row.P95.Round(time.Second), probes, row.Admitted, row.Lacked)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	r.printRecovery(&b)
	for _, row := range r.Rows {
		if row.Recovery == nil {
			continue
		}
		fmt.Fprintf(&b, "breakerd RPCs for arm %d's breaker (%s): Allow %d, Record %d, BatchGet %d\n", row.Arm, r.countedAt, row.Wire.Allow, row.Wire.Record, row.Wire.BatchGet)
	}
	r.printSavings(&b)
	for _, warn := range r.Warnings {
		fmt.Fprintf(&b, "WARNING: %s\n", warn)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// printRecovery writes what followed the outage, for each fleet arm: its
// tail runs, recovery check and probes.
func (r *Report) printRecovery(b *strings.Builder) {
	c := r.Config
	fmt.Fprintf(b, "\nafter the vendor recovered at %s, runs kept arriving until each fleet breaker closed:\n", c.Outage)
	for _, row := range r.Rows {
		if row.Recovery == nil {
			continue
		}
		rec := row.Recovery
		closed := fmt.Sprintf("not closed within the %s tail", c.Tail)
		switch {
		case !rec.Opened:
			closed = "never opened"
		case rec.Closed:
			closed = fmt.Sprintf("first successful probe %s after recovery", rec.After.Round(time.Second))
		case rec.TailRuns == 0:
			closed = "closed again by a probe before the recovery"
		}
		fmt.Fprintf(b, "  arm %d: %s; %s arrived meanwhile, %d of them answered without search, %d of their calls reached the vendor\n",
			row.Arm, closed, plural(rec.TailRuns, "run"), rec.TailLacked, rec.TailCalls)
		if rec.Checked {
			half := "never half-open after the recovery"
			if rec.HalfOpened {
				by := "its cooldown"
				if rec.ByCheck {
					by = "a recovery check"
				}
				half = fmt.Sprintf("half-open %s after recovery (at the daemon), by %s", rec.HalfOpenAfter.Round(time.Second), by)
			}
			fmt.Fprintf(b, "         %s; %d status requests reached the vendor, at most %d in any minute\n",
				half, rec.CheckRequests, rec.MaxPerMinute)
		}
		if row.Wire.Trip != nil {
			fmt.Fprintf(b, "         opened at %s; probes recorded at", row.Wire.TripAt.Round(time.Second))
			for i, p := range row.Wire.Probes {
				sep, verdict := ",", "failed"
				if i == 0 {
					sep = ""
				}
				if p.OK {
					verdict = "ok"
				}
				fmt.Fprintf(b, "%s %s %s", sep, p.At.Round(time.Second), verdict)
			}
			b.WriteString("\n")
		}
	}
}

// ErrPolicy is wrapped by Report.Err when an external daemon's policy is
// not the replay's.
var ErrPolicy = errPolicy

// Err returns an error wrapping ErrPolicy when a warning says the daemon's
// policy is not the replay's, and one wrapping ErrSavings when a savings
// check failed; nil otherwise.
func (r *Report) Err() error {
	var errs []error
	if r.policyOff {
		errs = append(errs, fmt.Errorf("%w: start breakerd with --config and outage-replay --print-policy's file", errPolicy))
	}
	return errors.Join(append(errs, r.savingsErr())...)
}
