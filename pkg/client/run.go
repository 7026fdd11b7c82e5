package client

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/limits"
	"github.com/breakerd/breakerd/internal/render"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Tool describes one tool the model may call, as plain data that fits any
// model provider's tools array.
type Tool struct {
	// Name is the tool's name as the model sees it ("refund_charge").
	Name string `json:"name"`
	// Breaker is the dependency the tool calls ("payments"); empty means
	// the breaker is named like the tool. Tools that share a vendor and a
	// credential share a breaker.
	Breaker string `json:"breaker,omitempty"`
	// Description is the tool's description for the model.
	Description string `json:"description,omitempty"`
	// Schema is the tool's input JSON schema, as raw bytes.
	Schema json.RawMessage `json:"input_schema,omitempty"`
}

// BreakerName returns the breaker the tool's calls go through.
func (t Tool) BreakerName() string {
	if t.Breaker != "" {
		return t.Breaker
	}
	return t.Name
}

// Unavailable says why a tool left a run's toolset. Its JSON form is
// what a run's terminal result carries, so that a reader can tell a
// recovered answer from a substituted one.
type Unavailable struct {
	Tool    string `json:"tool"`
	Breaker string `json:"breaker"`
	// Scope names the breaker's parent scope when the parent, not the
	// breaker itself, made the tool unavailable (then Status, Reason,
	// Forced, Since and MayReturnAt are the parent's); empty otherwise.
	Scope string `json:"scope,omitempty"`
	// Status is breakerd's status word for the denial (StatusCircuitOpen,
	// StatusProbeInFlight, StatusForcedOpen, StatusPaused,
	// StatusWorkerIsolated, StatusParentOpen).
	Status string `json:"status"`
	// Reason says why, in breakerd's words for a model.
	Reason string `json:"reason"`
	// Forced is true when an operator forced the circuit open.
	Forced bool `json:"forced,omitempty"`
	// Since is when the circuit opened (breakerd's clock), or when the run
	// found it unavailable when that is unknown.
	Since time.Time `json:"since"`
	// RemovedAt is when the run removed the tool (the client's clock).
	RemovedAt time.Time `json:"removed_at"`
	// MayReturnAt is when the circuit's next probe is due or its force
	// ends; zero when unknown.
	MayReturnAt time.Time `json:"may_return_at,omitzero"`
	// Alternatives are routes the breaker's policy offers instead.
	Alternatives []string `json:"alternatives,omitempty"`
	// Degraded is true when breakerd was unreachable and this worker's
	// local fallback judged the tool.
	Degraded bool `json:"degraded,omitempty"`

	// denial is the Denial the run keeps (its times on this client's
	// clock): every later denial of the tool and the notice render it.
	denial *pb.Denial
}

// Run scopes one agent run: the tools it lost stay lost for the run, even
// if their circuits close mid-run, because the model's plan has already
// been rebuilt around their absence. It is safe for concurrent use.
type Run struct {
	c *Client

	mu      sync.Mutex
	tools   []Tool // the last toolset given to Available
	removed map[string]int
	lost    []Unavailable // in the order they were removed
	// parents maps a breaker to its parent scope, as Available last read
	// it: a denial by that parent removes every tool under it.
	parents map[string]string
}

// now is the run's clock reading, to the millisecond (what results carry).
func (r *Run) now() time.Time { return r.c.o.clock.Now().Truncate(time.Millisecond) }

// NewRun starts a run on c.
func NewRun(c *Client) *Run {
	return &Run{c: c, removed: map[string]int{}}
}

// Available returns the tools, in order, whose breakers are neither open,
// forced open, paused nor being probed, and whose breakers' parent scopes
// (BreakerState.parent) are none of these either, and removes the others
// from the run for good. It asks breakerd about every breaker of the
// tools not yet removed in one BatchGet round trip (which never takes a
// probe lease), within the Allow budget; when some breaker it keeps names
// a parent that was not among them, it asks about all those parents in a
// second BatchGet (so a toolset with no parent costs one round trip, and
// one with parents two). A breaker forced closed is kept whatever its
// parent says, and a parent's suspect worker is not judged here (breakerd
// denies a parent's suspect only on calls made on the parent itself).
// A tool left out for its parent carries the parent's name in Scope and
// the parent's reason and return time. When breakerd does not answer,
// the client's fallback judges (see Client.Allow) and the removals are
// marked Degraded; the fallback knows no parents. A circuit (or parent)
// whose probe is due counts as available: calling it is how the fleet
// finds out it recovered. Errors: the caller's context ending, and
// breakerd's InvalidArgument (a bad breaker name).
func (r *Run) Available(ctx context.Context, tools []Tool) ([]Tool, error) {
	r.mu.Lock()
	r.tools = append([]Tool(nil), tools...)
	var names []string
	seen := map[string]bool{}
	for _, t := range tools {
		if _, gone := r.removed[t.Name]; !gone && !seen[t.BreakerName()] {
			seen[t.BreakerName()] = true
			names = append(names, t.BreakerName())
		}
	}
	r.mu.Unlock()

	states, degraded, err := r.c.states(ctx, names)
	if err != nil {
		return nil, err
	}
	now := r.now()
	byName := make(map[string]*pb.BreakerState, len(states))
	for _, st := range states {
		byName[st.GetBreaker()] = st
	}
	// The parents of the breakers their own state keeps, in one more
	// BatchGet (those already read are not asked again).
	var parents []string
	parentDegraded := degraded
	for _, n := range names {
		st := byName[n]
		p := deciding(st)
		if p == "" || seen[p] {
			continue
		}
		if _, out := verdict(Tool{Name: n}, st, now); !out {
			seen[p] = true
			parents = append(parents, p)
		}
	}
	if len(parents) > 0 {
		pstates, pdeg, err := r.c.states(ctx, parents)
		if err != nil {
			return nil, err
		}
		parentDegraded = pdeg
		for _, st := range pstates {
			byName[st.GetBreaker()] = st
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.parents == nil {
		r.parents = map[string]string{}
	}
	var out []Tool
	for _, t := range tools {
		if _, gone := r.removed[t.Name]; gone {
			continue
		}
		st := byName[t.BreakerName()]
		p := deciding(st)
		if p != "" {
			r.parents[t.BreakerName()] = p
		} else if !degraded { // the fallback knows no parents
			delete(r.parents, t.BreakerName()) // no parent, or pinned closed: the parent does not decide
		}
		if u, gone := verdict(t, st, now); gone {
			u.Degraded = degraded
			r.removeLocked(ctx, u)
			continue
		}
		if p != "" {
			if u, gone := parentVerdict(t, st, byName[p], now); gone {
				u.Degraded = parentDegraded
				r.removeLocked(ctx, u)
				continue
			}
		}
		out = append(out, t)
	}
	return out, nil
}

// Call runs fn for tool through Client.Call. A tool already removed from
// the run is denied without a round trip; a denial removes the tool (and
// every tool of the last toolset that shares its breaker, and, for a
// parent's denial, every tool whose breaker the last Available saw under
// that parent) from the run.
// It returns what Client.Call returns; AsDenial renders a denial for the
// model.
func (r *Run) Call(ctx context.Context, tool Tool, fn func(ctx context.Context) error) error {
	r.mu.Lock()
	i, gone := r.removed[tool.Name]
	var lost Unavailable
	if gone {
		lost = r.lost[i]
	}
	r.mu.Unlock()
	ctx, end := toolSpan(ctx, tool.Name)
	defer end()
	if gone { // denied as the run removed it, with no round trip; its span says so
		traceDecision(ctx, &Permit{Breaker: lost.Breaker, Decision: lost.denial.GetDecision(), Denial: lost.denial,
			Degraded: lost.Degraded, Cached: true})
		return lost.err(r.now())
	}
	err := r.c.Call(ctx, tool.BreakerName(), fn)
	now := r.now()
	var open *CircuitOpenError
	var probe *ProbeInFlightError
	var u Unavailable
	switch {
	case errors.As(err, &open):
		u = Unavailable{Breaker: open.Breaker, Scope: open.Scope, Since: open.OpenedAt, Alternatives: open.Alternatives,
			Degraded: open.Degraded, denial: open.Denial}
	case errors.As(err, &probe):
		u = Unavailable{Breaker: probe.Breaker, Alternatives: probe.Alternatives, Degraded: probe.Degraded, denial: probe.Denial}
	default:
		return err
	}
	u.withDenial(now)
	if len(u.Alternatives) == 0 {
		u.Alternatives = nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	u.Tool = tool.Name
	r.removeLocked(ctx, u)
	for _, t := range r.tools {
		if t.Name == tool.Name {
			continue
		}
		switch {
		case t.BreakerName() == tool.BreakerName():
			u.Tool = t.Name
			r.removeLocked(ctx, u)
		case u.Scope != "" && r.parents[t.BreakerName()] == u.Scope:
			// Another breaker under the parent that denied: its own state
			// and alternatives are not known here, the parent's verdict is.
			v := u
			v.Tool, v.Breaker, v.Alternatives = t.Name, t.BreakerName(), nil
			r.removeLocked(ctx, v)
		}
	}
	return err
}

// removeLocked removes u's tool from the run (once), counts it, and
// records it as an event on ctx's span.
func (r *Run) removeLocked(ctx context.Context, u Unavailable) {
	if _, gone := r.removed[u.Tool]; gone {
		return
	}
	r.removed[u.Tool] = len(r.lost)
	r.lost = append(r.lost, u)
	r.c.removedTool(u)
	traceRemoved(ctx, u)
}

// Degraded returns what the run's terminal result must carry: every tool
// the run lost, since when and why, in the order they were removed; nil
// when none was.
func (r *Run) Degraded() []Unavailable {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lost) == 0 {
		return nil
	}
	out := make([]Unavailable, len(r.lost))
	copy(out, r.lost)
	for i := range out {
		out[i].Alternatives = append([]string(nil), out[i].Alternatives...)
	}
	return out
}

// Notice returns the text to give the model: which tools are out of
// service, why, when they may return, to continue with the rest and to
// say in its final answer what could not be done. Empty when the run lost
// no tool.
func (r *Run) Notice() string {
	lost := r.Degraded()
	if len(lost) == 0 {
		return ""
	}
	out := make([]render.Denial, len(lost))
	for i, u := range lost {
		out[i] = render.Of(u.Tool, u.denial, u.Alternatives, u.Degraded)
	}
	return render.Notice(r.now().UnixMilli(), out)
}

// verdict reads a breaker's state for tool: out is true when the tool
// must leave the run.
func verdict(t Tool, st *pb.BreakerState, now time.Time) (u Unavailable, out bool) {
	return judge(t, st.GetDenial(), st, now)
}

// deciding is the parent scope that has a say over the breaker in state
// st: its parent, unless it has none or is pinned closed (a pin wins over
// the parent, as in breakerd); "" otherwise.
func deciding(st *pb.BreakerState) string {
	if st.GetState() == pb.State_STATE_FORCED_CLOSED {
		return ""
	}
	return st.GetParent()
}

// parentVerdict reads the state of the parent scope of tool's breaker
// (child, whose own verdict keeps the tool): out is true when the
// parent's denial for any worker denies the tool (a parent's suspect
// worker is denied only on calls to the parent).
func parentVerdict(t Tool, child, parent *pb.BreakerState, now time.Time) (u Unavailable, out bool) {
	d := parent.GetDenial()
	if d == nil || d.GetScope() == pb.DenialScope_DENIAL_SCOPE_WORKER {
		return Unavailable{}, false
	}
	if u, out = judge(t, breaker.ParentDenial(d.GetDenyUntilMs(), d), parent, now); !out {
		return Unavailable{}, false
	}
	u.Scope = parent.GetBreaker()
	u.Alternatives = append([]string(nil), child.GetAlternatives()...) // the tool's routes, not the parent's
	return u, true
}

// judge reads the denial d that the state st (breakerd's, for this
// worker) carries for tool: out is true when there is one (the next
// Allow would deny, not when a probe is due: a call finds out).
func judge(t Tool, d *pb.Denial, st *pb.BreakerState, now time.Time) (u Unavailable, out bool) {
	if d == nil {
		return Unavailable{}, false
	}
	u = Unavailable{Tool: t.Name, Breaker: t.BreakerName(), RemovedAt: now,
		Alternatives: append([]string(nil), st.GetAlternatives()...), denial: onClientClock(d, st.GetAsOfMs(), now)}
	if ms := st.GetOpenedAtMs(); ms > 0 {
		u.Since = time.UnixMilli(ms)
	}
	if d.GetScope() == pb.DenialScope_DENIAL_SCOPE_PARENT {
		u.Scope = st.GetParent()
	}
	u.withDenial(now)
	return u, true
}

// withDenial fills u's words and times from its denial: Since is now
// when not known.
func (u *Unavailable) withDenial(now time.Time) {
	u.Status, u.Reason, u.Forced = u.denial.GetStatus(), u.denial.GetReason(), u.denial.GetForced()
	if u.Since.IsZero() {
		u.Since = now
	}
	u.RemovedAt = now
	if m := u.denial.GetMayReturnAtMs(); m > 0 {
		u.MayReturnAt = time.UnixMilli(m)
	}
}

// err is the denial a removed tool answers with for the rest of the run,
// the one it was removed with: for a tool its parent scope removed, a
// *CircuitOpenError with DENIED_PARENT_OPEN and Scope (as breakerd
// answers it).
func (u Unavailable) err(now time.Time) error {
	var retry time.Duration
	if !u.MayReturnAt.IsZero() {
		retry = max(0, u.MayReturnAt.Sub(now))
	}
	d := u.denial.GetDecision()
	if d == pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT {
		return &ProbeInFlightError{Breaker: u.Breaker, Reason: u.Reason, Alternatives: u.Alternatives,
			Degraded: u.Degraded, Denial: u.denial, At: now}
	}
	return &CircuitOpenError{Breaker: u.Breaker, Forced: u.Forced, Reason: u.Reason, RetryAfter: retry,
		Alternatives: u.Alternatives, Degraded: u.Degraded, OpenedAt: u.Since, Decision: d, Scope: u.Scope,
		Denial: u.denial, At: now}
}

// states returns the named breakers' states: from breakerd in one
// BatchGet per limits.MaxBatch names, each within the Allow budget, or
// from the fallback (degraded true) when breakerd is unreachable or misses
// the budget. Names are checked as breakerd checks them, before any round
// trip.
func (c *Client) states(ctx context.Context, names []string) (states []*pb.BreakerState, degraded bool, err error) {
	// A toolset past one BatchGet's bound is read in several: refusing it
	// would leave a large toolset unfiltered.
	for len(names) > limits.MaxBatch {
		part, deg, err := c.batchStates(ctx, names[:limits.MaxBatch])
		if err != nil {
			return nil, false, err
		}
		states, degraded, names = append(states, part...), degraded || deg, names[limits.MaxBatch:]
	}
	part, deg, err := c.batchStates(ctx, names)
	if err != nil {
		return nil, false, err
	}
	return append(states, part...), degraded || deg, nil
}

// batchStates is states for at most limits.MaxBatch names: one BatchGet.
func (c *Client) batchStates(ctx context.Context, names []string) (states []*pb.BreakerState, degraded bool, err error) {
	if len(names) == 0 {
		return nil, false, nil
	}
	if err := limits.Names("breakers", names); err != nil {
		return nil, false, status.Error(codes.InvalidArgument, err.Error())
	}
	if !c.down.Load() {
		req := &pb.BatchGetRequest{Breakers: names, WorkerId: c.worker()}
		res, err, inTime := ask(ctx, c, names[0], c.budget(),
			func(ctx context.Context) (*pb.BatchGetResponse, error) { return c.api.BatchGet(ctx, req) }, nil)
		switch {
		case !inTime && ctx.Err() != nil:
			return nil, false, ctx.Err()
		case !inTime:
			c.stats.budgetMisses.Add(1)
		case err == nil:
			return res.GetStates(), false, nil
		case !reachFailure(err):
			return nil, false, err
		}
	}
	now := c.o.clock.Now()
	if c.o.fallback == FailClosed {
		out := make([]*pb.BreakerState, len(names))
		for i, n := range names {
			out[i] = &pb.BreakerState{Breaker: n, State: pb.State_STATE_FORCED_OPEN, AsOfMs: now.UnixMilli(),
				Reason: "breakerd did not answer and this worker fails closed", DenyUntilMs: breaker.Forever,
				Denial: fallbackDenial(pb.Decision_DECISION_DENIED_OPEN, breaker.Forever, 0)}
		}
		return out, true, nil
	}
	out := c.local.states(names)
	if c.cache != nil { // what breakerd said last still holds until its retry_after
		for i, n := range names {
			if p := c.cache.lookup(n, c.worker(), now, c.hearing); p != nil {
				out[i] = stateOfDenial(p, now)
			}
		}
	}
	return out, true, nil
}

// stateOfDenial renders a cached denial as a state snapshot taken now.
func stateOfDenial(p *Permit, now time.Time) *pb.BreakerState {
	st := &pb.BreakerState{Breaker: p.Breaker, Reason: p.Reason, AsOfMs: now.UnixMilli(),
		OpenedAtMs: p.State.GetOpenedAtMs(), Alternatives: p.State.GetAlternatives(),
		LastFailure: p.State.GetLastFailure(), Denial: p.Denial}
	at := now.Add(p.RetryAfter).UnixMilli()
	switch p.Decision {
	case pb.Decision_DECISION_DENIED_FORCED_OPEN:
		st.State, st.Reason, st.ForcedBy = pb.State_STATE_FORCED_OPEN, p.State.GetReason(), p.State.GetForcedBy()
		if p.RetryAfter > 0 {
			st.ForcedUntilMs = at
		}
	case pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT:
		st.State, st.ProbeInFlight = pb.State_STATE_HALF_OPEN, true
	case pb.Decision_DECISION_DENIED_PAUSED:
		st.State = pb.State_STATE_PAUSED
	default:
		st.State, st.NextProbeAtMs = pb.State_STATE_OPEN, at
	}
	return st
}
