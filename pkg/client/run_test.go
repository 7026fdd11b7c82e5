package client

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

func names(tools []Tool) string {
	var n []string
	for _, t := range tools {
		n = append(n, t.Name)
	}
	return strings.Join(n, ",")
}

func TestRunAvailableAsksOnceAndRemovalsStick(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testRunAvailableAsksOnceAndRemovalsStick(t, m) })
}

func testRunAvailableAsksOnceAndRemovalsStick(t *testing.T, m *clientMode) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := start(t, b, withAlternatives("issue_refund_manually"))
		// The workers that move the breakers are strict in both modes: a
		// fast one may read a breaker again in the background (a BatchGet),
		// and the agent's RPCs are counted at the daemon.
		w1, w2 := dial(t, d.Addr, "w1"), dial(t, d.Addr, "w2")
		clock := m.clk
		agent := m.dial(t, d.Addr, "agent", WithClock(clock))
		ctx := context.Background()
		payments, search, maps, kb := b.Breaker("payments"), b.Breaker("search"), b.Breaker("maps"), b.Breaker("kb")
		schema := json.RawMessage(`{"type":"object","properties":{"charge_id":{"type":"string"}}}`)
		tools := []Tool{
			{Name: "refund_charge", Breaker: payments, Description: "Refund a charge", Schema: schema},
			{Name: "get_charge", Breaker: payments},
			{Name: "web_search", Breaker: search},
			{Name: "directions", Breaker: maps},
			{Name: "lookup", Breaker: kb},
		}
		trip(t, w1, w2, kb) // then half-open with a probe in flight
		m.advance(b, 31*time.Second)
		if p, err := w1.Allow(ctx, kb); err != nil || p.Decision != pb.Decision_DECISION_PROBE {
			t.Fatalf("kb after its cooldown: %v, %v; want PROBE", p, err)
		}
		trip(t, w1, w2, payments)
		if _, err := w1.API().Force(ctx, &pb.ForceRequest{Breaker: maps, Mode: pb.ForceMode_FORCE_MODE_OPEN, Reason: "vendor maintenance", Operator: "alice"}); err != nil {
			t.Fatal(err)
		}

		run := NewRun(agent)
		if n := run.Notice(); n != "" {
			t.Errorf("Notice before anything is missing: %q, want empty", n)
		}
		before, gets := d.Calls.Total(), d.Calls.Get("BatchGet")
		got, err := run.Available(ctx, tools)
		if err != nil {
			t.Fatal(err)
		}
		if names(got) != "web_search" {
			t.Errorf("Available = %s, want web_search (payments open, maps forced open, kb probing)", names(got))
		}
		if n, g := d.Calls.Total()-before, d.Calls.Get("BatchGet")-gets; n != 1 || g != 1 {
			t.Errorf("Available cost %d RPCs (%d BatchGet), want exactly one BatchGet", n, g)
		}

		// Mid-run, everything recovers. The plan was rebuilt without the
		// removed tools: they stay removed for this run.
		for _, n := range []string{payments, maps, kb} {
			if _, err := w1.API().Force(ctx, &pb.ForceRequest{Breaker: n, Mode: pb.ForceMode_FORCE_MODE_AUTO}); err != nil {
				t.Fatal(err)
			}
		}
		got, err = run.Available(ctx, tools)
		if err != nil || names(got) != "web_search" {
			t.Errorf("Available after recovery = %s, %v; want web_search only (removals stick)", names(got), err)
		}
		allows := d.Calls.Get("Allow")
		ran := false
		err = run.Call(ctx, tools[0], func(context.Context) error { ran = true; return nil })
		var open *CircuitOpenError
		if !errors.As(err, &open) || ran || d.Calls.Get("Allow") != allows {
			t.Errorf("Run.Call on a removed tool: %v (ran %v, %d Allows); want a denial with no call and no RPC", err, ran, d.Calls.Get("Allow")-allows)
		}
		// A new run sees the recovered fleet.
		fresh, _ := NewRun(agent).Available(ctx, tools)
		if len(fresh) != len(tools) {
			t.Fatalf("a new run after recovery: %s, want every tool", names(fresh))
		}
		if fresh[0].Description != "Refund a charge" || string(fresh[0].Schema) != string(schema) {
			t.Errorf("tool data did not pass through: %+v", fresh[0])
		}

		// What the run's result must carry.
		lost := run.Degraded()
		if len(lost) != 4 {
			t.Fatalf("Degraded = %+v, want 4 tools", lost)
		}
		byTool := map[string]Unavailable{}
		for _, u := range lost {
			byTool[u.Tool] = u
		}
		rc := byTool["refund_charge"]
		if rc.Breaker != payments || rc.Status != StatusCircuitOpen || rc.Reason != "it is failing: 5 failed calls in a row, last: server error (5xx)" ||
			rc.Since.IsZero() || !rc.RemovedAt.Equal(clock.Now()) || rc.MayReturnAt.Sub(clock.Now()) < 29*time.Second ||
			len(rc.Alternatives) != 1 || rc.Degraded {
			t.Errorf("refund_charge: %+v", rc)
		}
		if u := byTool["directions"]; !u.Forced || !u.MayReturnAt.IsZero() || u.Reason != "forced open by an operator: vendor maintenance" ||
			u.Status != StatusForcedOpen {
			t.Errorf("directions: %+v", u)
		}
		if u := byTool["lookup"]; u.Status != StatusProbeInFlight {
			t.Errorf("lookup: %+v, want probe_in_flight", u)
		}
		if _, ok := byTool["get_charge"]; !ok {
			t.Errorf("get_charge shares payments' breaker and must be removed too")
		}
		js, _ := json.Marshal(rc)
		for _, k := range []string{`"tool":"refund_charge"`, `"since":`, `"reason":`, `"may_return_at":`} {
			if !strings.Contains(string(js), k) {
				t.Errorf("Unavailable JSON %s lacks %s", js, k)
			}
		}

		notice := run.Notice()
		for _, want := range []string{
			"- refund_charge: it is failing: 5 failed calls in a row, last: server error (5xx). It may be back in about 30s, but not during this task. Instead you can use: issue_refund_manually.",
			"- directions: forced open by an operator: vendor maintenance. No return time is known.",
			"- lookup: it failed and is being tested with a single call; its recovery is not confirmed yet. It will not come back during this task.",
			"Continue the task with the tools you still have",
			"In your final answer, say which parts of the task could not be done",
		} {
			if !strings.Contains(notice, want) {
				t.Errorf("Notice lacks %q:\n%s", want, notice)
			}
		}
		if strings.Contains(notice, "web_search") || strings.Contains(notice, payments) || strings.Contains(notice, maps) || strings.Contains(notice, kb) {
			t.Errorf("Notice names an available tool or a breaker:\n%s", notice)
		}
	})
}

func TestRunCallDenialRemovesTheToolMidRun(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testRunCallDenialRemovesTheToolMidRun(t, m) })
}

func testRunCallDenialRemovesTheToolMidRun(t *testing.T, m *clientMode) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := start(t, b, withAlternatives())
		w1, w2 := m.dial(t, d.Addr, "w1"), m.dial(t, d.Addr, "w2")
		agent := m.dial(t, d.Addr, "agent")
		ctx := context.Background()
		name := b.Breaker("payments")
		tools := []Tool{{Name: "refund_charge", Breaker: name}, {Name: "get_charge", Breaker: name}, {Name: "web_search", Breaker: b.Breaker("search")}}
		run := NewRun(agent)
		if got, _ := run.Available(ctx, tools); len(got) != 3 {
			t.Fatalf("Available = %s, want all three", names(got))
		}
		trip(t, w1, w2, name) // the vendor goes down after the plan was made
		m.settle(t, d, name, agent)
		err := run.Call(ctx, tools[0], func(context.Context) error { t.Error("fn ran on an open circuit"); return nil })
		if _, ok := AsDenial(err, "refund_charge"); !ok {
			t.Fatalf("Run.Call: %v, want a denial", err)
		}
		if got, _ := run.Available(ctx, tools); names(got) != "web_search" {
			t.Errorf("Available after the denial = %s, want web_search", names(got))
		}
		if lost := run.Degraded(); len(lost) != 2 || lost[0].Tool != "refund_charge" || lost[1].Tool != "get_charge" {
			t.Errorf("Degraded = %+v, want refund_charge then get_charge", lost)
		}
	})
}

func TestRunProbeDueIsAvailable(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testRunProbeDueIsAvailable(t, m) })
}

func testRunProbeDueIsAvailable(t *testing.T, m *clientMode) {
	b := testredis.Mini(t)
	d := start(t, b, withAlternatives())
	w1, w2 := m.dial(t, d.Addr, "w1"), m.dial(t, d.Addr, "w2")
	name := b.Breaker("search")
	trip(t, w1, w2, name)
	m.settle(t, d, name, w1, w2)
	m.advance(b, 31*time.Second) // the probe is due, nobody asked yet
	got, err := NewRun(w1).Available(context.Background(), []Tool{{Name: "web_search", Breaker: name}})
	if err != nil || len(got) != 1 {
		t.Errorf("Available with a probe due: %s, %v; want web_search (a call is how the fleet finds out)", names(got), err)
	}
	if st := state(t, d, name); st.State != pb.State_STATE_OPEN || st.ProbeInFlight {
		t.Errorf("Available moved the breaker: %v probe %v; it must take no lease", st.State, st.ProbeInFlight)
	}
}
