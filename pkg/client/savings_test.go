package client

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// savings reads what name saved over the last hour, as breakerd tells it.
func savings(t *testing.T, c *Client, name string) *pb.BreakerSavings {
	t.Helper()
	res, err := c.API().Savings(context.Background(), &pb.SavingsRequest{Breakers: []string{name}})
	if err != nil {
		t.Fatalf("Savings(%q): %v", name, err)
	}
	for _, r := range res.GetBreakers() {
		if r.GetBreaker() == name {
			return r
		}
	}
	return &pb.BreakerSavings{Breaker: name}
}

// TestLocalDenialsAreReported: the denials a client answers in its own
// process (the open cache in strict mode, the view in fast mode) reach
// breakerd's counts through FlushSavings, and only those: breakerd's own
// denials are its own count.
func TestLocalDenialsAreReported(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) {
		testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
			d := start(t, b, withAlternatives())
			w1, w2 := dial(t, d.Addr, "w1"), dial(t, d.Addr, "w2")
			opts := []Option{WithClock(m.clk)}
			if !m.fast {
				opts = append(opts, WithOpenCache())
			}
			agent := m.dial(t, d.Addr, "agent", opts...)
			ctx := context.Background()
			name := b.Breaker("paid")
			trip(t, w1, w2, name)
			// The first denial may come from breakerd (the client learns the
			// trip from it or from the event); wait until one is local.
			var local int64
			eventually(t, "a denial answered in the agent's process", func() bool {
				p, err := agent.Allow(ctx, name)
				if err != nil || p.Allowed() {
					return false
				}
				if p.Cached {
					local++
				}
				return p.Cached
			})
			allows := d.Calls.Get("Allow")
			for range 9 {
				if p, err := agent.Allow(ctx, name); err != nil || !p.Cached || p.Allowed() {
					t.Fatalf("Allow on the known-open breaker: %+v, %v; want a local denial", p, err)
				}
				local++
			}
			if n := d.Calls.Get("Allow") - allows; n != 0 {
				t.Fatalf("local denials cost %d Allow RPCs, want 0", n)
			}
			daemon := savings(t, w1, name).GetDaemonDenials()
			if err := agent.FlushSavings(ctx); err != nil {
				t.Fatal(err)
			}
			got := savings(t, w1, name)
			if got.GetClientDenials() != local || got.GetDaemonDenials() != daemon {
				t.Errorf("Savings after the report = %d client, %d daemon denials; want %d client (the local ones), %d daemon (unchanged)",
					got.GetClientDenials(), got.GetDaemonDenials(), local, daemon)
			}
			if st := agent.Stats(); st.SavedDenialsReported != local {
				t.Errorf("Stats().SavedDenialsReported = %d, want %d", st.SavedDenialsReported, local)
			}
			// Nothing left: a second flush sends nothing.
			reports := d.Calls.Get("ReportSavings")
			if err := agent.FlushSavings(ctx); err != nil || d.Calls.Get("ReportSavings") != reports {
				t.Errorf("an empty flush: %v, %d calls; want none", err, d.Calls.Get("ReportSavings")-reports)
			}
		})
	})
}

// TestRunRemovalsAreReportedOncePerRunAndTool: each tool a run leaves
// out counts once for the run, however often Available is asked.
func TestRunRemovalsAreReportedOncePerRunAndTool(t *testing.T) {
	t.Parallel()
	b := testredis.Mini(t)
	d := start(t, b, withAlternatives())
	w1, w2 := dial(t, d.Addr, "w1"), dial(t, d.Addr, "w2")
	agent := dial(t, d.Addr, "agent")
	ctx := context.Background()
	pay, search := b.Breaker("pay"), b.Breaker("search")
	trip(t, w1, w2, pay)
	tools := []Tool{{Name: "refund", Breaker: pay}, {Name: "charge", Breaker: pay}, {Name: "web_search", Breaker: search}}
	for range 2 {
		run := NewRun(agent)
		for range 3 {
			if got, err := run.Available(ctx, tools); err != nil || names(got) != "web_search" {
				t.Fatalf("Available = %s, %v; want web_search", names(got), err)
			}
		}
	}
	if err := agent.FlushSavings(ctx); err != nil {
		t.Fatal(err)
	}
	if got := savings(t, w1, pay).GetToolsRemoved(); got != 4 {
		t.Errorf("tools removed from pay = %d, want 4 (2 runs x 2 tools)", got)
	}
	if got := savings(t, w1, search).GetCallsAvoided(); got != 0 {
		t.Errorf("search saved %d, want nothing", got)
	}
}

// TestSavingsReportsWaitOutAnOutage: counts breakerd did not take stay
// for the next report.
func TestSavingsReportsWaitOutAnOutage(t *testing.T) {
	t.Parallel()
	b := testredis.Mini(t)
	d := start(t, b, withAlternatives())
	w1, w2 := dial(t, d.Addr, "w1"), dial(t, d.Addr, "w2")
	agent := dial(t, d.Addr, "agent", WithOpenCache())
	ctx := context.Background()
	name := b.Breaker("flaky")
	trip(t, w1, w2, name)
	agent.tally.add("agent", name, 3, 1)
	b.Mini.SetError("LOADING Redis is loading the dataset in memory")
	if err := agent.FlushSavings(ctx); err == nil {
		t.Fatal("FlushSavings while breakerd cannot reach Redis: nil, want an error")
	}
	b.Mini.SetError("")
	if err := agent.FlushSavings(ctx); err != nil {
		t.Fatal(err)
	}
	if got := savings(t, w1, name); got.GetClientDenials() != 3 || got.GetToolsRemoved() != 1 {
		t.Errorf("Savings after the outage = %d denials, %d removed; want 3 and 1 (kept for the next report)", got.GetClientDenials(), got.GetToolsRemoved())
	}
}

// savingsCases is conformance/savings.json (its format is
// conformance/README.md's).
type savingsCases struct {
	Cases []savingsCase `json:"cases"`
}

// TestConformanceSavings holds what the client reports as saved to the
// cases every client is held to.
func TestConformanceSavings(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../conformance/savings.json")
	if err != nil {
		t.Fatal(err)
	}
	var sc savingsCases
	if err := json.Unmarshal(raw, &sc); err != nil {
		t.Fatalf("conformance/savings.json: %v", err)
	}
	if len(sc.Cases) == 0 {
		t.Fatal("conformance/savings.json holds no case")
	}
	for _, c := range sc.Cases {
		t.Run(c.Name, func(t *testing.T) {
			testredis.Each(t, func(t *testing.T, b *testredis.Backend) { runSavingsCase(t, b, c) })
		})
	}
}

// savingsCase is one case of conformance/savings.json.
type savingsCase = struct {
	Name       string   `json:"name"`
	OpenCache  bool     `json:"open_cache"`
	ForcedOpen []string `json:"forced_open"`
	Steps      []struct {
		Op            string   `json:"op"`
		Breaker       string   `json:"breaker"`
		Tools         []Tool   `json:"tools"`
		Tool          Tool     `json:"tool"`
		WantAllowed   bool     `json:"want_allowed"`
		WantAvailable []string `json:"want_available"`
	} `json:"steps"`
	Want []struct {
		Breaker      string `json:"breaker"`
		LocalDenials int64  `json:"local_denials"`
		ToolsRemoved int64  `json:"tools_removed"`
	} `json:"want"`
}

// runSavingsCase runs one case against a daemon on b and checks what
// breakerd counted from the client's report.
func runSavingsCase(t *testing.T, b *testredis.Backend, c savingsCase) {
	d := start(t, b, withAlternatives())
	ops := dial(t, d.Addr, "ops")
	ctx := context.Background()
	for _, n := range c.ForcedOpen {
		if _, err := ops.API().Force(ctx, &pb.ForceRequest{Breaker: b.Breaker(n), Mode: pb.ForceMode_FORCE_MODE_OPEN, Reason: "maintenance", Operator: "ops"}); err != nil {
			t.Fatal(err)
		}
	}
	var opts []Option
	if c.OpenCache {
		opts = append(opts, WithOpenCache())
	}
	agent := dial(t, d.Addr, "agent", opts...)
	if c.OpenCache {
		eventually(t, "every forced breaker in the open cache", func() bool {
			for _, n := range c.ForcedOpen {
				if agent.cache.lookup(b.Breaker(n), agent.WorkerID(), agent.o.clock.Now(), fresh) == nil {
					return false
				}
			}
			return true
		})
	}
	named := func(tl Tool) Tool { return Tool{Name: tl.Name, Breaker: b.Breaker(tl.BreakerName())} }
	var run *Run
	for i, s := range c.Steps {
		switch s.Op {
		case "allow":
			p, err := agent.Allow(ctx, b.Breaker(s.Breaker))
			if err != nil || p.Allowed() != s.WantAllowed {
				t.Fatalf("step %d: Allow(%q) = %+v, %v; want allowed %v", i, s.Breaker, p, err, s.WantAllowed)
			}
		case "run", "available":
			if s.Op == "run" || run == nil {
				run = NewRun(agent)
			}
			var tools []Tool
			for _, tl := range s.Tools {
				tools = append(tools, named(tl))
			}
			got, err := run.Available(ctx, tools)
			if want := strings.Join(s.WantAvailable, ","); err != nil || names(got) != want {
				t.Fatalf("step %d: Available = %s, %v; want %s", i, names(got), err, want)
			}
		case "call":
			ran := false
			_ = run.Call(ctx, named(s.Tool), func(context.Context) error { ran = true; return nil })
			if ran != s.WantAllowed {
				t.Fatalf("step %d: Call(%q) ran %v, want %v", i, s.Tool.Name, ran, s.WantAllowed)
			}
		default:
			t.Fatalf("step %d: unknown op %q", i, s.Op)
		}
	}
	if err := agent.FlushSavings(ctx); err != nil {
		t.Fatal(err)
	}
	for _, w := range c.Want {
		got := savings(t, ops, b.Breaker(w.Breaker))
		if got.GetClientDenials() != w.LocalDenials || got.GetToolsRemoved() != w.ToolsRemoved {
			t.Errorf("Savings(%q) = %d local denials, %d tools removed; want %d, %d",
				w.Breaker, got.GetClientDenials(), got.GetToolsRemoved(), w.LocalDenials, w.ToolsRemoved)
		}
	}
}
