package server

import (
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"

	"github.com/breakerd/breakerd/internal/render"
)

// withToolResult fills a denial's tool_result: the JSON a model receives
// in place of the call's output, rendered from the answer's denial (its
// words are the daemon's, breaker.WithDenial) with the tool's name (the
// breaker's when the call names none), the policy's alternatives and the
// answer's clock (the state's as_of_ms), by the conformance template. A
// breaker denied by its parent also reports the parent's end in
// deny_until_ms.
func withToolResult(res *pb.AllowResponse, breaker, tool string) *pb.AllowResponse {
	d := res.GetDenial()
	if d == nil {
		return res
	}
	if tool == "" {
		tool = breaker
	}
	st := res.GetState()
	res.ToolResult = render.ToolResult(st.GetAsOfMs(), render.Of(tool, d, st.GetAlternatives(), res.GetDegraded()))
	if d.GetScope() == pb.DenialScope_DENIAL_SCOPE_PARENT && st != nil && st.GetAsOfMs() > 0 && res.GetRetryAfterMs() > 0 {
		st.DenyUntilMs = max(st.GetDenyUntilMs(), st.GetAsOfMs()+res.GetRetryAfterMs())
	}
	return res
}

// forWorker makes states the asking worker's (Get and BatchGet with a
// worker_id): on a breaker whose suspect worker it is, deny_until_ms
// runs at least to the suspect's end and the denial is its own; no state
// carries a suspect's denial.
func forWorker(states []*pb.BreakerState, worker string) {
	if worker == "" {
		return
	}
	for _, st := range states {
		if st.GetSuspectWorker() == worker && st.GetSuspectUntilMs() > st.GetAsOfMs() && !st.GetShadow() {
			st.DenyUntilMs = max(st.GetDenyUntilMs(), st.GetSuspectUntilMs())
		}
		if st.GetSuspectWorker() == worker && st.GetSuspectDenial() != nil {
			st.Denial = st.GetSuspectDenial()
		}
		st.SuspectDenial = nil
	}
}
