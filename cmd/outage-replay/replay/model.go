package replay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/quorum"
	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// searchTool is the one tool the scripted model uses.
const searchTool = "web_search"

// guard is how an arm guards the model's web_search calls: what toolset
// and notice the model gets before each step, and what happens to a call.
type guard interface {
	// toolset returns whether web_search is in the model's tools for the
	// next step, and the notice the model is given ("" for none).
	toolset(ctx context.Context) (available bool, notice string, err error)
	// call runs one web_search call through the guard. denied is true
	// when the guard refused it without calling the vendor; err is then
	// the denial, or else the call's failure.
	call(ctx context.Context, fn func(ctx context.Context) error) (denied bool, err error)
	// probes is how many probe calls the guard itself let out (per-run
	// breakers; the fleet's are counted at breakerd).
	probes() int
}

// runResult is one finished run, as the model and its tool saw it.
type runResult struct {
	steps     int
	wall      time.Duration // arrival to answer, on the run's schedule (incident time)
	lag       time.Duration // the most the machine fell behind the schedule at a step
	results   bool          // a search returned results
	toolCalls int           // web_search calls that reached the tool's HTTP code
	denials   int           // web_search calls the guard refused
	probes    int
	noticeAt  int // the step at which the tool was gone and a notice given; 0 if never
	answer    string
	// goneAt is the first step whose toolset lacked web_search (1: the run
	// started without it); 0 if none did. refusedLast: a call at the run's
	// last step was refused, after which no toolset was asked for.
	goneAt      int
	refusedLast bool
}

// The scripted fake model. One run:
//
//   - Before every step it is given its toolset and any notice (the
//     guard's toolset), and the step costs one step's price and StepTime.
//   - Steps before SearchStep are planning.
//   - Once a search has returned results, it writes its answer in 2 more
//     steps and stops.
//   - With web_search absent and a notice present, it finishes with a
//     degraded answer that says so within 2 steps (the step that saw the
//     notice and the next).
//   - Otherwise, from SearchStep through LastSearchStep, it calls
//     web_search at each step, with a new phrasing each time; a failure
//     or a circuit-open denial (the tool still listed) is just another
//     result to rephrase after.
//   - After LastSearchStep without results it writes around the gap until
//     its step budget runs out, and apologises that the search failed.
//
// With the incident's figures, a run that never gets results makes 11
// calls (steps 4 to 14) and 20 steps: 11 × 31 s + 20 × 3.35 s = 6.8 min
// and $1.20.
//
// The run keeps its own schedule from its arrival (incident time): each
// step ends StepTime after the previous step or call ended, and a call
// ends when its schedule says (search returns it). Breakerd's answers
// (well under a millisecond, a fraction of a scaled step) happen inside
// that schedule, and a busy machine's late timer delays one step, not
// every step after it. Run times are read from the schedule; how far the
// machine fell behind it is kept apart (lag).
func runModel(ctx context.Context, cfg Config, clk *clock, g guard, sched *schedule,
	search func(ctx context.Context, call int, start time.Duration) (end time.Duration, err error)) (runResult, error) {
	start := sched.t
	var r runResult
	resultsAt := 0
	lastFailure := ""
	notice := ""
	finish := func(answer string) (runResult, error) {
		r.answer, r.wall, r.probes = answer, sched.t-start, g.probes()
		return r, nil
	}
	for step := 1; step <= cfg.Steps; step++ {
		avail, n, err := g.toolset(ctx)
		if err != nil {
			return r, err
		}
		if n != "" {
			notice = n
		}
		if !avail && r.goneAt == 0 {
			r.goneAt = step
		}
		r.steps = step
		sched.t += cfg.StepTime
		if err := clk.sleepUntil(ctx, sched.t); err != nil {
			return r, err
		}
		r.lag = max(r.lag, clk.now()-sched.t)
		switch {
		case r.results:
			if step >= resultsAt+2 {
				return finish("Here is what I found, with sources from web_search.")
			}
		case !avail && notice != "":
			if r.noticeAt == 0 {
				r.noticeAt = step
			}
			if step >= r.noticeAt+1 {
				return finish("Partial answer: web_search was out of service (" + firstReason(notice) +
					"), so the parts of the task that needed a search are missing.")
			}
		case step < cfg.SearchStep || step > cfg.LastSearchStep || !avail:
			// planning; or writing around the missing results
		default:
			call := r.toolCalls + r.denials + 1
			denied, err := g.call(ctx, func(ctx context.Context) error {
				r.toolCalls++
				end, err := search(ctx, call, sched.t)
				sched.t = end
				return err
			})
			switch {
			case ctx.Err() != nil:
				return r, ctx.Err()
			case errors.Is(err, errBreakerd):
				return r, err
			case denied:
				r.denials++
				r.refusedLast = step == cfg.Steps
				lastFailure = "the circuit is open"
			case err != nil:
				lastFailure = err.Error()
			default:
				r.results, resultsAt = true, step
			}
		}
	}
	if r.results {
		return finish("Here is what I found, with sources from web_search.")
	}
	why := lastFailure
	if why == "" {
		why = "it was never reached"
	}
	return finish("I'm sorry: web_search failed every time I tried it (" + why +
		"), so I could not complete the research.")
}

// schedule is one run's own time line, incident time: where its steps
// and calls are due. Only the run's goroutine touches it.
type schedule struct{ t time.Duration }

// firstReason is the notice's reason for web_search, for the answer.
func firstReason(notice string) string {
	for line := range strings.SplitSeq(notice, "\n") {
		if r, ok := strings.CutPrefix(line, "- "+searchTool+": "); ok {
			if i := strings.Index(r, "."); i > 0 {
				return r[:i]
			}
			return r
		}
	}
	return "see the notice"
}

// admitsDegraded reports whether an answer tells its reader that the
// search was missing: what the "admitted" column counts.
func admitsDegraded(answer string) bool {
	return strings.Contains(answer, searchTool+" was out of service") || strings.Contains(answer, searchTool+" failed")
}

// noGuard is arm 1: every call goes to the vendor.
type noGuard struct{}

func (noGuard) toolset(context.Context) (bool, string, error) { return true, "", nil }
func (noGuard) call(ctx context.Context, fn func(context.Context) error) (bool, error) {
	return false, fn(ctx)
}
func (noGuard) probes() int { return 0 }

// runBreaker is a breaker that lives for one run (arms 2 and 3):
// breakerd's own machine (internal/breaker) in a table of its own, with
// the fleet's threshold and cooldowns but a quorum of one worker (the
// run), no jitter and no memory beyond the run. A run is one goroutine,
// so it needs no lock; the table keeps its time on the run's schedule.
type runBreaker struct {
	now     func() time.Duration
	t       *breaker.Table
	p       breaker.Params
	nProbes int
}

// runEpoch is the run schedule's start on the table's clock (ms): the
// machine reads 0 as "never".
const runEpoch = int64(1_000_000)

func newRunBreaker(cfg Config, now func() time.Duration) *runBreaker {
	return &runBreaker{now: now, t: breaker.NewTable(), p: breaker.Params{
		Rule:         quorum.Rule{Threshold: int64(cfg.Threshold), MinWorkers: 1, RateLimitTrips: int64(cfg.Threshold)},
		CooldownBase: cfg.CooldownBase.Milliseconds(), CooldownCap: cfg.CooldownCap.Milliseconds(),
		ProbeTimeout: cfg.ProbeTimeout.Milliseconds(), Retention: (24 * time.Hour).Milliseconds()}}
}

// ms is the run's time on the table's clock.
func (b *runBreaker) ms() int64 { return runEpoch + b.now().Milliseconds() }

// verdict is the machine's read rule for the run now.
func (b *runBreaker) verdict() breaker.Verdict {
	return b.t.Read(searchTool, b.ms()).Verdict(breaker.Query{Now: b.ms()})
}

// unavailable reports an open circuit whose probe is not yet due (what
// Run.Available leaves out).
func (b *runBreaker) unavailable() bool {
	vd := b.verdict()
	return vd.Denied() && !vd.Due
}

func (b *runBreaker) call(ctx context.Context, fn func(context.Context) error) (bool, error) {
	res, v, _ := b.t.Apply(searchTool, b.p, breaker.Call{Op: breaker.OpAllow, Actor: "run", Token: "probe"}, b.ms())
	switch res.Decision {
	case pb.Decision_DECISION_ALLOWED:
	case pb.Decision_DECISION_PROBE:
		b.nProbes++
	default:
		return true, &client.CircuitOpenError{Breaker: searchTool, Reason: b.reason(),
			RetryAfter: time.Duration(res.RetryAfter) * time.Millisecond}
	}
	err := fn(ctx)
	r, ok := client.DefaultClassifier(ctx, err)
	if !ok { // not an outcome (the run's own context ended): hand the probe back
		r.Outcome = pb.Outcome_OUTCOME_CANCELED
	}
	ev, _ := quorum.EvidenceOf(r.Outcome, r.RetryAfter, r.Deadline, false)
	lease := ""
	if res.Decision == pb.Decision_DECISION_PROBE {
		lease = "probe"
	}
	b.t.Apply(searchTool, b.p, breaker.Call{Op: breaker.OpRecord, Actor: "run", Evidence: ev,
		Ticket: breaker.Ticket{Gen: v.Gen, Lease: lease}, Last: breaker.Describe(r.Outcome, r.Latency, r.RetryAfter, r.Deadline, 0, r.Message)}, b.ms())
	return false, err
}

// reason is the machine's reason for the open circuit, for this run.
func (b *runBreaker) reason() string {
	return breaker.StateReason(searchTool, b.t.Read(searchTool, b.ms())) + " (in this run)"
}

// perRunGuard is arms 2 and 3: a runBreaker; with remove, an open circuit
// also takes web_search out of the run's toolset for good and the model
// gets a notice, as client.Run does with breakerd's verdicts.
type perRunGuard struct {
	b       *runBreaker
	remove  bool
	removed string // the reason, once removed
}

func (g *perRunGuard) toolset(context.Context) (bool, string, error) {
	if g.remove && g.removed == "" && g.b.unavailable() {
		g.removed = g.b.reason()
	}
	if g.removed == "" {
		return true, "", nil
	}
	return false, "Some tools are out of service and have been removed from your tools for the rest of this task:\n" +
		"- " + searchTool + ": " + g.removed + ".\n" +
		"Continue the task with the tools you still have; do not try to call the removed ones. " +
		"In your final answer, say which parts of the task could not be done because of them.", nil
}

func (g *perRunGuard) call(ctx context.Context, fn func(context.Context) error) (bool, error) {
	denied, err := g.b.call(ctx, fn)
	if denied && g.remove && g.removed == "" {
		g.removed = g.b.reason()
	}
	return denied, err
}

func (g *perRunGuard) probes() int { return g.b.nProbes }

// fleetRunGuard is arm 4: breakerd through client.Run. Before each step
// Run.Available filters the toolset (one BatchGet) and Run.Notice is the
// model's notice; Run.Call asks breakerd and records.
type fleetRunGuard struct {
	run  *client.Run
	tool client.Tool
}

func (g *fleetRunGuard) toolset(ctx context.Context) (bool, string, error) {
	tools, err := g.run.Available(ctx, []client.Tool{g.tool})
	if err != nil {
		return false, "", err
	}
	return len(tools) == 1, g.run.Notice(), nil
}

func (g *fleetRunGuard) call(ctx context.Context, fn func(context.Context) error) (bool, error) {
	err := g.run.Call(ctx, g.tool, fn)
	if _, denied := client.AsDenial(err, g.tool.Name); denied {
		return true, err
	}
	return false, unlessAllowError(err)
}

func (g *fleetRunGuard) probes() int { return 0 }

// fleetCallGuard is arm 5: breakerd through Client.Call only; the
// toolset is never touched and the model is never told.
type fleetCallGuard struct {
	c       *client.Client
	breaker string
}

func (g *fleetCallGuard) toolset(context.Context) (bool, string, error) { return true, "", nil }

func (g *fleetCallGuard) call(ctx context.Context, fn func(context.Context) error) (bool, error) {
	err := g.c.Call(ctx, g.breaker, fn)
	if _, denied := client.AsDenial(err, searchTool); denied {
		return true, err
	}
	return false, unlessAllowError(err)
}

func (g *fleetCallGuard) probes() int { return 0 }

// errBreakerd marks a call breakerd refused to decide (a bad request):
// the replay stops rather than count it as the vendor's failure.
var errBreakerd = errors.New("breakerd")

// unlessAllowError passes a call's own error through, and turns an error
// from Allow itself (client.ErrAllow) into errBreakerd.
func unlessAllowError(err error) error {
	if errors.Is(err, client.ErrAllow) {
		return fmt.Errorf("%w: %v", errBreakerd, err)
	}
	return err
}
