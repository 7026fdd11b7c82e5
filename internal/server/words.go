package server

import (
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"

	"github.com/breakerd/breakerd/internal/render"
)

// withToolResult fills a denial's tool_result: the circuit_open JSON a
// model receives in place of the call's output (internal/render, from the
// conformance template), built only from what the daemon holds (the
// names, the state's reason from its fixed vocabulary or an operator's
// word, numbers, the policy's alternatives). A breaker denied by its
// parent also reports the parent's end in deny_until_ms.
func withToolResult(res *pb.AllowResponse, breaker, tool string) *pb.AllowResponse {
	d := res.GetDecision()
	if d == pb.Decision_DECISION_ALLOWED || d == pb.Decision_DECISION_PROBE || d == pb.Decision_DECISION_UNSPECIFIED {
		return res
	}
	if tool == "" {
		tool = breaker
	}
	status := render.StatusCircuitOpen
	if d == pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT {
		status = render.StatusProbeInFlight
	}
	res.ToolResult = render.ToolResult(render.Denial{Status: status, Tool: tool, Breaker: breaker,
		Reason: res.GetReason(), RetryAfterMs: res.GetRetryAfterMs(), Alternatives: res.GetState().GetAlternatives(),
		Forced: d == pb.Decision_DECISION_DENIED_FORCED_OPEN, Degraded: res.GetDegraded(), Scope: res.GetScope()})
	if st := res.GetState(); d == pb.Decision_DECISION_DENIED_PARENT_OPEN && st != nil && st.GetAsOfMs() > 0 && res.GetRetryAfterMs() > 0 {
		st.DenyUntilMs = max(st.GetDenyUntilMs(), st.GetAsOfMs()+res.GetRetryAfterMs())
	}
	return res
}

// forWorker adds worker's own denial to states: on a breaker whose
// suspect worker it is, deny_until_ms runs at least to the suspect's end
// (the read rule for that worker).
func forWorker(states []*pb.BreakerState, worker string) {
	if worker == "" {
		return
	}
	for _, st := range states {
		if st.GetSuspectWorker() == worker && st.GetSuspectUntilMs() > st.GetAsOfMs() && !st.GetShadow() {
			st.DenyUntilMs = max(st.GetDenyUntilMs(), st.GetSuspectUntilMs())
		}
	}
}
