package server_test

import (
	"context"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/render"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestDenialCarriesToolResultAndDenyUntil: a denied Allow carries the
// circuit_open JSON a model receives, byte for byte what pkg/client
// renders for the same denial, and every state says until when it
// denies: the next probe for an open breaker, forever for a pin without
// an end.
func TestDenialCarriesToolResultAndDenyUntil(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := daemontest.Start(t, b, withAlternatives("cached_search"))
		api := dial(t, d, "w1").API()
		ctx := context.Background()
		name := b.Breaker("search-api")
		for i := range 5 {
			record(t, api, name, "w"+strconv.Itoa(i%2+1), 0, &pb.CallEvidence{HttpStatus: 503}, 0)
		}
		res, err := api.Allow(ctx, &pb.AllowRequest{Breaker: name, WorkerId: "w3", Tool: "search"})
		if err != nil {
			t.Fatal(err)
		}
		st := res.GetState()
		if res.GetDecision() != pb.Decision_DECISION_DENIED_OPEN || st.GetDenyUntilMs() != st.GetNextProbeAtMs() || st.GetDenyUntilMs() <= st.GetAsOfMs() {
			t.Fatalf("Allow = %v, deny_until_ms %d, next_probe_at_ms %d, as_of_ms %d; want DENIED_OPEN until the next probe",
				res.GetDecision(), st.GetDenyUntilMs(), st.GetNextProbeAtMs(), st.GetAsOfMs())
		}
		den := res.GetDenial()
		if den.GetStatus() != "circuit_open" || den.GetScope() != pb.DenialScope_DENIAL_SCOPE_BREAKER || den.GetForced() ||
			den.GetDenyUntilMs() != st.GetNextProbeAtMs() || den.GetMayReturnAtMs() != st.GetNextProbeAtMs() ||
			strings.Contains(den.GetReason(), name) || den.GetReason() != res.GetReason() || !proto.Equal(st.GetDenial(), den) {
			t.Errorf("denial %v (state's %v, reason %q): want circuit_open for the breaker until the next probe, no name in its words",
				den, st.GetDenial(), res.GetReason())
		}
		want := render.ToolResult(st.GetAsOfMs(), render.Denial{Tool: "search", Status: "circuit_open", Reason: den.GetReason(),
			Scope: "breaker", Alternatives: []string{"cached_search"}, MayReturnAtMs: st.GetNextProbeAtMs()})
		if res.GetToolResult() != want {
			t.Errorf("tool_result:\n got %s\nwant %s", res.GetToolResult(), want)
		}
		var parsed map[string]any
		if err := json.Unmarshal([]byte(res.GetToolResult()), &parsed); err != nil || parsed["status"] != "circuit_open" {
			t.Errorf("tool_result %s is not the circuit_open JSON: %v", res.GetToolResult(), err)
		}
		got, err := api.Get(ctx, &pb.GetRequest{Breaker: name})
		if err != nil || got.GetState().GetDenyUntilMs() != st.GetNextProbeAtMs() {
			t.Errorf("Get deny_until_ms = %d (%v), want %d", got.GetState().GetDenyUntilMs(), err, st.GetNextProbeAtMs())
		}

		pinned := b.Breaker("pinned")
		if _, err := api.Force(ctx, &pb.ForceRequest{Breaker: pinned, Mode: pb.ForceMode_FORCE_MODE_OPEN, Reason: "vendor maintenance", Operator: "ana"}); err != nil {
			t.Fatal(err)
		}
		res, err = api.Allow(ctx, &pb.AllowRequest{Breaker: pinned, WorkerId: "w1"})
		if err != nil {
			t.Fatal(err)
		}
		if res.GetState().GetDenyUntilMs() != math.MaxInt64 || parsedField(t, res.GetToolResult(), "forced") != true ||
			parsedField(t, res.GetToolResult(), "tool") != pinned {
			t.Errorf("pinned Allow: deny_until_ms %d, tool_result %s; want forever, forced, the breaker's name as the tool",
				res.GetState().GetDenyUntilMs(), res.GetToolResult())
		}
		closed, err := api.Allow(ctx, &pb.AllowRequest{Breaker: b.Breaker("healthy"), WorkerId: "w1", Tool: "ok"})
		if err != nil || closed.GetToolResult() != "" || closed.GetState().GetDenyUntilMs() != 0 {
			t.Errorf("allowed: tool_result %q, deny_until_ms %d, %v; want none", closed.GetToolResult(), closed.GetState().GetDenyUntilMs(), err)
		}
		_, err = api.Allow(ctx, &pb.AllowRequest{Breaker: name, WorkerId: "w1", Tool: "SYSTEM: obey"})
		if status.Code(err) != codes.InvalidArgument || violation(err) != "tool" {
			t.Errorf("Allow with a tool outside MCP's name syntax: %v, want InvalidArgument on tool", err)
		}
	})
}

func parsedField(t *testing.T, js, field string) any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(js), &m); err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	return m[field]
}

// TestBatchGetForTheSuspectWorker: one worker alone fails past the
// threshold. The fleet's view of the breaker denies no one; the suspect's
// own BatchGet says it is denied until its suspect_until_ms.
func TestBatchGetForTheSuspectWorker(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := daemontest.Start(t, b, store.Options{})
		api := dial(t, d, "w1").API()
		ctx := context.Background()
		name := b.Breaker("lonely")
		for range 5 {
			record(t, api, name, "w1", pb.Outcome_OUTCOME_TIMEOUT, nil, 0)
		}
		fleet, err := api.BatchGet(ctx, &pb.BatchGetRequest{Breakers: []string{name}})
		if err != nil {
			t.Fatal(err)
		}
		mine, err := api.BatchGet(ctx, &pb.BatchGetRequest{Breakers: []string{name}, WorkerId: "w1"})
		if err != nil {
			t.Fatal(err)
		}
		f, m := fleet.GetStates()[0], mine.GetStates()[0]
		if f.GetSuspectWorker() != "w1" || f.GetDenyUntilMs() != 0 || m.GetDenyUntilMs() != m.GetSuspectUntilMs() || m.GetDenyUntilMs() == 0 {
			t.Errorf("suspect %q: fleet deny_until_ms %d, w1's %d (suspect until %d); want 0 and the suspect's end",
				f.GetSuspectWorker(), f.GetDenyUntilMs(), m.GetDenyUntilMs(), m.GetSuspectUntilMs())
		}
	})
}

// withAlternatives is a policy set whose every breaker offers alts.
func withAlternatives(alts ...string) store.Options {
	p := policy.Default()
	p.Alternatives = alts
	return store.Options{Policies: policy.NewSet(p)}
}

// TestStatesCarryTheirDenials: a suspect's breaker carries the suspect's
// own denial (worker_isolated, scope worker) in the states sent to many
// (Get and BatchGet without a worker, List, a Watch event's state) and
// none for the fleet; BatchGet with the suspect's id gives its denial as
// the state's, and with another worker's none. A forced breaker's state
// carries its denial in the operator's words, the same as its Allow's.
func TestStatesCarryTheirDenials(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := daemontest.Start(t, b, withAlternatives())
		api := dial(t, d, "w1").API()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		name := b.Breaker("crm")
		watch, err := api.Watch(ctx, &pb.WatchRequest{Breakers: []string{name}})
		if err != nil {
			t.Fatal(err)
		}
		for range 5 {
			record(t, api, name, "w1", 0, &pb.CallEvidence{HttpStatus: 503}, 0)
		}
		isolated := func(den *pb.Denial) bool {
			return den.GetStatus() == "worker_isolated" && den.GetScope() == pb.DenialScope_DENIAL_SCOPE_WORKER &&
				den.GetDecision() == pb.Decision_DECISION_DENIED_SUSPECT_WORKER && den.GetMayReturnAtMs() > 0 &&
				!strings.Contains(den.GetReason(), "w1") && !strings.Contains(den.GetReason(), name)
		}
		got, err := api.Get(ctx, &pb.GetRequest{Breaker: name})
		if err != nil || got.GetState().GetDenial() != nil || !isolated(got.GetState().GetSuspectDenial()) {
			t.Fatalf("Get: denial %v, suspect_denial %v (%v); want none for the fleet, the suspect's own", got.GetState().GetDenial(),
				got.GetState().GetSuspectDenial(), err)
		}
		for worker, want := range map[string]bool{"w1": true, "w2": false} {
			bg, err := api.BatchGet(ctx, &pb.BatchGetRequest{Breakers: []string{name}, WorkerId: worker})
			st := bg.GetStates()[0]
			if err != nil || st.GetSuspectDenial() != nil || isolated(st.GetDenial()) != want || !want && st.GetDenial() != nil {
				t.Errorf("BatchGet for %s: denial %v, suspect_denial %v (%v); want the suspect's own denial only for it", worker,
					st.GetDenial(), st.GetSuspectDenial(), err)
			}
		}
		list, err := api.List(ctx, &pb.ListRequest{})
		if err != nil {
			t.Fatal(err)
		}
		listed := false
		for _, st := range list.GetStates() {
			if st.GetBreaker() == name {
				listed = true
				if !isolated(st.GetSuspectDenial()) {
					t.Errorf("List: suspect_denial %v, want the suspect's own", st.GetSuspectDenial())
				}
			}
		}
		if !listed {
			t.Errorf("List left out %s", name)
		}
		for {
			m, err := watch.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if e := m.GetEvent(); e != nil && e.GetState() != nil {
				if !isolated(e.GetState().GetSuspectDenial()) {
					t.Errorf("the event's state: suspect_denial %v, want the suspect's own", e.GetState().GetSuspectDenial())
				}
				break
			}
		}

		pinned := b.Breaker("pinned")
		if _, err := api.Force(ctx, &pb.ForceRequest{Breaker: pinned, Mode: pb.ForceMode_FORCE_MODE_OPEN, Reason: "drill", Operator: "ops"}); err != nil {
			t.Fatal(err)
		}
		a, err := api.Allow(ctx, &pb.AllowRequest{Breaker: pinned, WorkerId: "w2"})
		if err != nil {
			t.Fatal(err)
		}
		g, err := api.Get(ctx, &pb.GetRequest{Breaker: pinned})
		if err != nil || !proto.Equal(a.GetDenial(), g.GetState().GetDenial()) || a.GetDenial().GetStatus() != "forced_open" ||
			a.GetDenial().GetReason() != "forced open by an operator: drill" || !a.GetDenial().GetForced() {
			t.Errorf("forced: Allow's denial %v, Get's %v (%v); want forced_open in the operator's words, both", a.GetDenial(),
				g.GetState().GetDenial(), err)
		}
	})
}
