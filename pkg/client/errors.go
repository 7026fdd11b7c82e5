package client

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/render"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// CircuitOpenError is returned, without calling the dependency, when its
// circuit is open or forced open.
type CircuitOpenError struct {
	Breaker string
	// Forced is true when an operator forced the circuit open.
	Forced bool
	// Reason says why, in breakerd's words for a model (Denial.reason).
	Reason string
	// RetryAfter is how long until a probe is due (0 when forced with no
	// end).
	RetryAfter time.Duration
	// Alternatives are routes the breaker's policy offers instead.
	Alternatives []string
	// Degraded is true when a fallback judged the call: breakerd could not
	// be reached and the answer came from this worker's local fallback, or
	// breakerd answered from its own memory (Permit.DaemonDegraded).
	Degraded bool
	// OpenedAt is when the circuit opened (breakerd's clock); zero when
	// unknown.
	OpenedAt time.Time
	// Decision is breakerd's answer: DENIED_OPEN, DENIED_FORCED_OPEN,
	// DENIED_PAUSED (a revoked credential: only an operator lifts it) or
	// DENIED_SUSPECT_WORKER (this worker alone, while the fleet is fine)
	// or DENIED_PARENT_OPEN (the breaker's parent scope denies: Scope).
	Decision pb.Decision
	// Scope names the parent scope that denied (DENIED_PARENT_OPEN; the
	// reason is the parent's); empty when the breaker itself denied.
	Scope string
	// Denial is breakerd's denial (or the local fallback's own), its
	// times on this client's clock: what AsDenial renders.
	Denial *pb.Denial
	// At is when the denial was answered (this client's clock).
	At time.Time
}

func (e *CircuitOpenError) Error() string {
	return fmt.Sprintf("circuit open for %s: %s (retry after %s)", e.Breaker, e.Reason, e.RetryAfter)
}

// ProbeInFlightError is returned, without calling the dependency, while
// another caller's probe is testing it.
type ProbeInFlightError struct {
	Breaker string
	Reason  string
	// RetryAfter is what is left of the probe's lease: how long the
	// denial holds, not a time the tool is expected back.
	RetryAfter time.Duration
	// Alternatives are routes the breaker's policy offers instead.
	Alternatives []string
	// Degraded: see CircuitOpenError.Degraded.
	Degraded bool
	// Denial and At: see CircuitOpenError.
	Denial *pb.Denial
	At     time.Time
}

func (e *ProbeInFlightError) Error() string {
	return fmt.Sprintf("probe in flight for %s: %s (denied for %s more)", e.Breaker, e.Reason, e.RetryAfter)
}

// DeniedError returns the typed error for a denied permit, or nil when p
// allows the call: *ProbeInFlightError for DENIED_PROBE_IN_FLIGHT, and
// *CircuitOpenError for every other denial.
func DeniedError(p *Permit) error {
	if p.Allowed() {
		return nil
	}
	den, degraded := p.Denial, p.Degraded || p.DaemonDegraded
	if den == nil { // a daemon that sends no denial: the fallback's words
		den = fallbackDenial(p.Decision, breaker.Forever, 0)
	}
	if p.Decision == pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT {
		return &ProbeInFlightError{Breaker: p.Breaker, Reason: den.GetReason(), RetryAfter: p.RetryAfter,
			Alternatives: p.State.GetAlternatives(), Degraded: degraded, Denial: den, At: p.at}
	}
	// DENIED_OPEN, DENIED_FORCED_OPEN, DENIED_PAUSED, DENIED_SUSPECT_WORKER,
	// and any denial a newer daemon adds: the call must not go out.
	e := &CircuitOpenError{
		Breaker: p.Breaker, Forced: den.GetForced(), Reason: den.GetReason(), RetryAfter: p.RetryAfter,
		Alternatives: p.State.GetAlternatives(), Degraded: degraded, Decision: p.Decision, Scope: p.Scope,
		Denial: den, At: p.at,
	}
	if ms := p.State.GetOpenedAtMs(); ms > 0 {
		e.OpenedAt = time.UnixMilli(ms)
	}
	return e
}

// The status words of a denial (Denial.Status), breakerd's.
const (
	StatusCircuitOpen    = breaker.StatusCircuitOpen
	StatusProbeInFlight  = breaker.StatusProbeInFlight
	StatusForcedOpen     = breaker.StatusForcedOpen
	StatusPaused         = breaker.StatusPaused
	StatusWorkerIsolated = breaker.StatusWorkerIsolated
	StatusParentOpen     = breaker.StatusParentOpen
)

// Denial is what a model reads in place of a denied call's output: the
// inputs of the conformance template tool_result.tmpl
// (conformance/README.md), rendered by JSON; see docs/model-text.md.
type Denial struct {
	Tool string `json:"tool"`
	// Status is the denial's status word (circuit_open, probe_in_flight,
	// forced_open, paused, worker_isolated, parent_open) and Reason its
	// words, both breakerd's.
	Status string `json:"status"`
	Reason string `json:"reason"`
	// Scope is breaker, parent or worker.
	Scope        string   `json:"scope"`
	Forced       bool     `json:"forced,omitempty"`
	Degraded     bool     `json:"degraded,omitempty"`
	Alternatives []string `json:"alternatives"`
	// MayReturnAt is when the tool may be back (zero when unknown); At is
	// when the denial was answered, both on this client's clock (the JSON
	// form says may_return_in_ms).
	MayReturnAt time.Time `json:"-"`
	At          time.Time `json:"-"`
}

// AsDenial reads err (as returned by Call) as the Denial for tool; ok is
// false when err is not a denial.
func AsDenial(err error, tool string) (d Denial, ok bool) {
	var open *CircuitOpenError
	var probe *ProbeInFlightError
	switch {
	case errors.As(err, &open):
		d = denialFor(tool, open.Denial, open.Alternatives, open.Degraded, open.At)
	case errors.As(err, &probe):
		d = denialFor(tool, probe.Denial, probe.Alternatives, probe.Degraded, probe.At)
	default:
		return Denial{}, false
	}
	return d, true
}

func denialFor(tool string, den *pb.Denial, alternatives []string, degraded bool, at time.Time) Denial {
	in := render.Of(tool, den, alternatives, degraded)
	d := Denial{Tool: tool, Status: in.Status, Reason: in.Reason, Scope: in.Scope, Forced: in.Forced,
		Degraded: degraded, Alternatives: alternatives, At: at}
	if in.MayReturnAtMs > 0 {
		d.MayReturnAt = time.UnixMilli(in.MayReturnAtMs)
	}
	return d
}

// input is d as the templates take it.
func (d Denial) input() render.Denial {
	in := render.Denial{Tool: d.Tool, Status: d.Status, Reason: d.Reason, Forced: d.Forced, Degraded: d.Degraded,
		Scope: d.Scope, Alternatives: d.Alternatives}
	if !d.MayReturnAt.IsZero() {
		in.MayReturnAtMs = d.MayReturnAt.UnixMilli()
	}
	return in
}

// JSON returns d as the JSON text of a tool result, rendered at d.At
// from the conformance template (conformance/templates/tool_result.tmpl)
// that breakerd's AllowResponse.tool_result and every other client render
// too.
func (d Denial) JSON() []byte {
	return []byte(render.ToolResult(d.At.UnixMilli(), d.input()))
}

// fallbackDenial is the local fallback's own denial
// (conformance/fallback_denials.json): probe in flight for
// DENIED_PROBE_IN_FLIGHT, open otherwise, until until (ms, this client's
// clock; breaker.Forever when unknown), back at mayReturnAt (0: unknown).
func fallbackDenial(d pb.Decision, until, mayReturnAt int64) *pb.Denial {
	in := render.Fallback("", d == pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT, mayReturnAt)
	if d == pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT {
		mayReturnAt = 0
	}
	return &pb.Denial{Decision: d, Scope: pb.DenialScope_DENIAL_SCOPE_BREAKER, DenyUntilMs: until,
		MayReturnAtMs: mayReturnAt, Reason: in.Reason, Status: in.Status}
}

// onClientClock returns breakerd's denial d, read from an answer whose
// Redis-clock time was asOfMs and which this client timed at at, with its
// times moved onto this client's clock; nil for nil.
func onClientClock(d *pb.Denial, asOfMs int64, at time.Time) *pb.Denial {
	if d == nil || asOfMs <= 0 {
		return d
	}
	c := proto.Clone(d).(*pb.Denial)
	shift := at.UnixMilli() - asOfMs
	if u := c.GetDenyUntilMs(); u != 0 && u != breaker.Forever {
		c.DenyUntilMs = u + shift
	}
	if m := c.GetMayReturnAtMs(); m != 0 {
		c.MayReturnAtMs = m + shift
	}
	return c
}
