package server_test

import (
	"context"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/render"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	"github.com/breakerd/breakerd/pkg/client"
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
		list, err := client.ListEvery(ctx, api, &pb.ListRequest{PageSize: store.MaxPageSize}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		listed := false
		for _, st := range list {
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

// TestStatelessChildIsReadWithItsParentsDenial: a child breaker that
// holds no state, under an open parent, is read (Get, BatchGet with and
// without a worker) with the parent's denial (scope parent, parent_open,
// the parent's words and return time) as its Allow answers, and so is a
// child that holds state in List; once the parent's probe is due, none
// of them denies (a call finds out), and while a child's call probes the
// parent, they carry the parent's probe in flight.
func TestStatelessChildIsReadWithItsParentsDenial(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		parent, web, news := b.Breaker("vendor"), b.Breaker("web_search"), b.Breaker("news_search")
		set, err := policy.Parse([]byte(`
defaults:
  jitter: 0
breakers:
  - match: "` + parent + `"
    threshold: 2
    min_workers: 2
    cooldown_base: 10s
  - match: "` + b.Prefix + `*_search"
    parent: "` + parent + `"
`))
		if err != nil {
			t.Fatal(err)
		}
		d := daemontest.Start(t, b, store.Options{Policies: set})
		api := dial(t, d, "w1").API()
		ctx := context.Background()
		record(t, api, news, "w1", 0, &pb.CallEvidence{HttpStatus: 503}, 0) // news holds state: List shows it
		record(t, api, parent, "w2", 0, &pb.CallEvidence{HttpStatus: 503}, 0)
		p, err := api.Get(ctx, &pb.GetRequest{Breaker: parent})
		if err != nil || p.GetState().GetState() != pb.State_STATE_OPEN {
			t.Fatalf("parent: %v (%v), want OPEN", p.GetState(), err)
		}
		reads := func() map[string]*pb.BreakerState {
			t.Helper()
			out := map[string]*pb.BreakerState{}
			g, err := api.Get(ctx, &pb.GetRequest{Breaker: web})
			if err != nil {
				t.Fatal(err)
			}
			out["Get"] = g.GetState()
			for _, w := range []string{"", "w3"} {
				bg, err := api.BatchGet(ctx, &pb.BatchGetRequest{Breakers: []string{web}, WorkerId: w})
				if err != nil {
					t.Fatal(err)
				}
				out["BatchGet(worker "+w+")"] = bg.GetStates()[0]
			}
			list, err := client.ListEvery(ctx, api, &pb.ListRequest{PageSize: store.MaxPageSize}, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			for _, st := range list {
				if st.GetBreaker() == news {
					out["List"] = st
				}
			}
			return out
		}
		want := childDenial(p.GetState().GetDenial())
		for how, st := range reads() {
			if st.GetBreaker() == web && st.GetAsOfMs() < p.GetState().GetAsOfMs() {
				t.Errorf("%s: as_of_ms %d, want the parent's clock (at least %d)", how, st.GetAsOfMs(), p.GetState().GetAsOfMs())
			}
			if got := st.GetDenial(); !proto.Equal(got, want) {
				t.Errorf("%s under an open parent: denial %v, want the parent's %v", how, got, want)
			}
		}
		a, err := api.Allow(ctx, &pb.AllowRequest{Breaker: web, WorkerId: "w3"})
		if err != nil || !proto.Equal(a.GetDenial(), want) {
			t.Errorf("Allow(web) under an open parent: denial %v (%v), want %v", a.GetDenial(), err, want)
		}

		b.Advance(10 * time.Second) // the parent's cooldown: its probe is due
		for how, st := range reads() {
			if st.GetDenial() != nil || st.GetDenyUntilMs() > st.GetAsOfMs() {
				t.Errorf("%s with the parent's probe due: denial %v, deny_until_ms %d at %d; want none", how,
					st.GetDenial(), st.GetDenyUntilMs(), st.GetAsOfMs())
			}
		}
		if probe, err := api.Allow(ctx, &pb.AllowRequest{Breaker: web, WorkerId: "w1"}); err != nil || probe.GetTicket().GetParentLeaseToken() == "" {
			t.Fatalf("Allow(web) with the parent's probe due: %v (%v), want the parent's probe", probe, err)
		}
		a, err = api.Allow(ctx, &pb.AllowRequest{Breaker: news, WorkerId: "w2"})
		if err != nil || a.GetDenial().GetStatus() != "parent_open" || a.GetDenial().GetReason() != "it failed and is being tested with a single call; its recovery is not confirmed yet" {
			t.Fatalf("Allow(news) while the parent is probed: %v (%v), want parent_open, the probe in flight", a.GetDenial(), err)
		}
		for how, st := range reads() {
			if got := st.GetDenial(); got.GetScope() != pb.DenialScope_DENIAL_SCOPE_PARENT || got.GetStatus() != "parent_open" ||
				got.GetReason() != a.GetDenial().GetReason() || got.GetMayReturnAtMs() != 0 {
				t.Errorf("%s while the parent is probed: denial %v, want Allow's %v", how, got, a.GetDenial())
			}
		}
	})
}

// childDenial is the denial a child carries under a parent whose own
// denial is d (breaker.ParentDenial): the parent's words, forced and
// times, in scope parent.
func childDenial(d *pb.Denial) *pb.Denial {
	return &pb.Denial{Decision: pb.Decision_DECISION_DENIED_PARENT_OPEN, Scope: pb.DenialScope_DENIAL_SCOPE_PARENT,
		Status: "parent_open", Reason: d.GetReason(), Forced: d.GetForced(), MayReturnAtMs: d.GetMayReturnAtMs(), DenyUntilMs: d.GetDenyUntilMs()}
}
