package client

import (
	"errors"
	"fmt"
	"time"

	"github.com/breakerd/breakerd/internal/render"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// CircuitOpenError is returned, without calling the dependency, when its
// circuit is open or forced open.
type CircuitOpenError struct {
	Breaker string
	// Forced is true when an operator forced the circuit open.
	Forced bool
	// Reason says why in plain words.
	Reason string
	// RetryAfter is how long until a probe is due (0 when forced with no
	// end).
	RetryAfter time.Duration
	// Alternatives are routes the breaker's policy offers instead.
	Alternatives []string
	// Degraded is true when breakerd could not be reached and the answer
	// came from this worker's local fallback.
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
}

func (e *CircuitOpenError) Error() string {
	return fmt.Sprintf("circuit open for %s: %s (retry after %s)", e.Breaker, e.Reason, e.RetryAfter)
}

// ProbeInFlightError is returned, without calling the dependency, while
// another caller's probe is testing it.
type ProbeInFlightError struct {
	Breaker    string
	Reason     string
	RetryAfter time.Duration
	// Alternatives are routes the breaker's policy offers instead.
	Alternatives []string
	// Degraded: see CircuitOpenError.Degraded.
	Degraded bool
}

func (e *ProbeInFlightError) Error() string {
	return fmt.Sprintf("probe in flight for %s: %s (retry after %s)", e.Breaker, e.Reason, e.RetryAfter)
}

// DeniedError returns the typed error for a denied permit, or nil when p
// allows the call: *ProbeInFlightError for DENIED_PROBE_IN_FLIGHT, and
// *CircuitOpenError for every other denial.
func DeniedError(p *Permit) error {
	switch p.Decision {
	case pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT:
		return &ProbeInFlightError{Breaker: p.Breaker, Reason: p.Reason, RetryAfter: p.RetryAfter,
			Alternatives: p.State.GetAlternatives(), Degraded: p.Degraded}
	case pb.Decision_DECISION_ALLOWED, pb.Decision_DECISION_PROBE:
		return nil
	}
	// DENIED_OPEN, DENIED_FORCED_OPEN, DENIED_PAUSED, DENIED_SUSPECT_WORKER,
	// and any denial a newer daemon adds: the call must not go out.
	e := &CircuitOpenError{
		Breaker: p.Breaker, Forced: p.Decision == pb.Decision_DECISION_DENIED_FORCED_OPEN,
		Reason: p.Reason, RetryAfter: p.RetryAfter, Alternatives: p.State.GetAlternatives(),
		Degraded: p.Degraded, Decision: p.Decision, Scope: p.Scope,
	}
	if ms := p.State.GetOpenedAtMs(); ms > 0 {
		e.OpenedAt = time.UnixMilli(ms)
	}
	return e
}

// The Status values of a Denial.
const (
	StatusCircuitOpen   = render.StatusCircuitOpen
	StatusProbeInFlight = render.StatusProbeInFlight
)

// Denial is the structured tool result a model sees in place of a denied
// call's output: what it cannot use, why, when asking again may help, and
// what to use instead. Its JSON form is
//
//	{"status":"circuit_open","tool":"refund_charge","breaker":"payments",
//	 "reason":"payments failing: 5 consecutive failures from 3 workers, last: timeout after 30s",
//	 "retry_after_ms":120000,"alternatives":["issue_refund_manually"]}
//
// with "forced":true for an operator's force, "degraded":true when the
// answer came from this worker's local fallback, and
// "scope":"search-vendor" when the breaker's parent scope denied (the
// reason and retry are then the parent's).
type Denial struct {
	// Status is StatusCircuitOpen (open or forced open) or
	// StatusProbeInFlight.
	Status  string `json:"status"`
	Tool    string `json:"tool"`
	Breaker string `json:"breaker"`
	Reason  string `json:"reason"`
	// RetryAfterMs is how long until asking again may help, in
	// milliseconds; 0 when unknown (a force with no end).
	RetryAfterMs int64 `json:"retry_after_ms"`
	// Alternatives is never null: [] when the policy names none.
	Alternatives []string `json:"alternatives"`
	Forced       bool     `json:"forced,omitempty"`
	Degraded     bool     `json:"degraded,omitempty"`
	// Scope names the breaker's parent scope when the parent denied
	// (DENIED_PARENT_OPEN: reason and retry are the parent's), so the
	// model can tell the vendor is down rather than the tool; omitted
	// when the breaker itself denied.
	Scope string `json:"scope,omitempty"`
}

// AsDenial reads err (as returned by Call) as the Denial for tool; ok is
// false when err is not a denial.
func AsDenial(err error, tool string) (d Denial, ok bool) {
	var open *CircuitOpenError
	var probe *ProbeInFlightError
	switch {
	case errors.As(err, &open):
		d = Denial{Status: StatusCircuitOpen, Breaker: open.Breaker, Reason: open.Reason,
			RetryAfterMs: open.RetryAfter.Milliseconds(), Alternatives: open.Alternatives,
			Forced: open.Forced, Degraded: open.Degraded, Scope: open.Scope}
	case errors.As(err, &probe):
		d = Denial{Status: StatusProbeInFlight, Breaker: probe.Breaker, Reason: probe.Reason,
			RetryAfterMs: probe.RetryAfter.Milliseconds(), Alternatives: probe.Alternatives,
			Degraded: probe.Degraded}
	default:
		return Denial{}, false
	}
	d.Tool = tool
	if d.Alternatives == nil {
		d.Alternatives = []string{}
	}
	return d, true
}

// JSON returns d as the JSON text of a tool result, rendered from the
// conformance template (conformance/templates/tool_result.tmpl) that
// breakerd's AllowResponse.tool_result and every other client render too.
func (d Denial) JSON() []byte {
	return []byte(render.ToolResult(render.Denial{Status: d.Status, Tool: d.Tool, Breaker: d.Breaker,
		Reason: d.Reason, RetryAfterMs: d.RetryAfterMs, Alternatives: d.Alternatives, Forced: d.Forced,
		Degraded: d.Degraded, Scope: d.Scope}))
}
