package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// A parent scope through the client, in both modes: a success through
// one child ends the parent's failure run (fast mode sends it: a child's
// successes are never skipped), and once the children's failures from
// two workers open the parent, every Allow on either child is denied with
// the parent's scope and reason, asked of breakerd (never the fast view),
// and no request reaches the vendor.
func TestParentScopeDeniesThroughTheClient(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testParentScope(t, m) })
}

func testParentScope(t *testing.T, m *clientMode) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		parent, web, news := b.Breaker("search-vendor"), b.Breaker("web_search"), b.Breaker("news_search")
		set, err := policy.Parse([]byte(fmt.Sprintf(`
defaults:
  jitter: 0
breakers:
  - match: %q
    threshold: 2
    min_workers: 2
  - match: %q
    parent: %q
  - match: %q
    parent: %q
`, parent, web, parent, news, parent)))
		if err != nil {
			t.Fatal(err)
		}
		d := start(t, b, store.Options{Policies: set})
		c1, c2 := m.dial(t, d.Addr, "w1"), m.dial(t, d.Addr, "w2")
		v := newVendor(t, http.StatusServiceUnavailable)
		ctx := context.Background()

		_ = c1.Call(ctx, web, v.call)
		m.settle(t, d, web, c1)
		if p := state(t, d, parent); p.Failures != 1 {
			t.Fatalf("parent failures %d after a failure through web_search, want 1", p.Failures)
		}
		v.status.Store(http.StatusOK)
		if err := c2.Call(ctx, news, v.call); err != nil {
			t.Fatal(err)
		}
		m.settle(t, d, news, c2)
		if p := state(t, d, parent); p.Failures != 0 {
			t.Fatalf("parent failures %d after a success through news_search, want 0 (the success ends its run)", p.Failures)
		}

		v.status.Store(http.StatusServiceUnavailable)
		_ = c1.Call(ctx, web, v.call)
		_ = c2.Call(ctx, news, v.call)
		m.settle(t, d, web, c1, c2)
		if p := state(t, d, parent); p.State != pb.State_STATE_OPEN {
			t.Fatalf("parent %v after failures from 2 workers through its children, want OPEN", p.State)
		}
		hits, allows := v.hits.Load(), d.Calls.Get("Allow")
		for _, c := range []*Client{c1, c2} {
			for _, child := range []string{web, news} {
				err := c.Call(ctx, child, v.call)
				var open *CircuitOpenError
				if !errors.As(err, &open) || open.Decision != pb.Decision_DECISION_DENIED_PARENT_OPEN || open.Scope != parent ||
					open.Reason != "it is failing: 2 failed calls in a row, last: server error (5xx)" || open.Denial.GetStatus() != StatusParentOpen {
					t.Fatalf("Call(%s) through %s = %v; want a CircuitOpenError DENIED_PARENT_OPEN by %s with its reason", child, c.WorkerID(), err, parent)
				}
			}
		}
		if n := v.hits.Load() - hits; n != 0 {
			t.Errorf("%d requests reached the vendor while its parent scope was open, want 0", n)
		}
		if n := d.Calls.Get("Allow") - allows; n != 4 {
			t.Errorf("%d Allow RPCs for 4 calls on children, want 4 (a child is always asked of breakerd)", n)
		}
	})
}

// parentPolicies is a policy set where parent is the parent scope of each
// of children, and every other breaker has none.
func parentPolicies(t *testing.T, parent string, children ...string) store.Options {
	t.Helper()
	y := "defaults:\n  jitter: 0\nbreakers:\n"
	for _, c := range children {
		y += fmt.Sprintf("  - match: %q\n    parent: %q\n", c, parent)
	}
	set, err := policy.Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return store.Options{Policies: set}
}

func force(t *testing.T, c *Client, name string, mode pb.ForceMode, reason string) {
	t.Helper()
	if _, err := c.API().Force(context.Background(), &pb.ForceRequest{Breaker: name, Mode: mode, Reason: reason, Operator: "alice"}); err != nil {
		t.Fatal(err)
	}
}

// A tool whose breaker's parent scope is forced open leaves the run in
// Available, before any call: the notice names the parent, the denial
// the model sees carries its scope, the vendor sees no request, and
// Available costs one BatchGet (breakerd reads each tool's breaker with
// its parent's denial).
func TestRunAvailableLeavesOutAToolWhoseParentDenies(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testRunAvailableParentDenies(t, m) })
}

func testRunAvailableParentDenies(t *testing.T, m *clientMode) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		parent, web, news, maps := b.Breaker("search-vendor"), b.Breaker("web_search"), b.Breaker("news_search"), b.Breaker("maps")
		d := start(t, b, parentPolicies(t, parent, web, news))
		op := dial(t, d.Addr, "op") // strict: the agent's RPCs are counted at the daemon
		force(t, op, parent, pb.ForceMode_FORCE_MODE_OPEN, "vendor maintenance")
		// Dialed after the force: a fast agent's view has no event to
		// read again in the background while its RPCs are counted.
		agent := m.dial(t, d.Addr, "agent", WithClock(m.clk))
		v := newVendor(t, http.StatusOK)
		ctx := context.Background()
		tools := []Tool{{Name: "web_search", Breaker: web}, {Name: "news_search", Breaker: news}, {Name: "directions", Breaker: maps}}

		run := NewRun(agent)
		before, gets := d.Calls.Total(), d.Calls.Get("BatchGet")
		got, err := run.Available(ctx, tools)
		if err != nil {
			t.Fatal(err)
		}
		if names(got) != "directions" {
			t.Errorf("Available = %s, want directions (web_search and news_search are under %s, forced open)", names(got), parent)
		}
		if n, g := d.Calls.Total()-before, d.Calls.Get("BatchGet")-gets; n != 1 || g != 1 {
			t.Errorf("Available cost %d RPCs (%d BatchGet), want exactly 1 BatchGet (the breakers, with their parent's denial)", n, g)
		}
		want := "- web_search: a service it depends on is out of service: forced open by an operator: vendor maintenance. No return time is known.\n" +
			"- news_search: a service it depends on is out of service: forced open by an operator: vendor maintenance. No return time is known.\n"
		if n := run.Notice(); !strings.Contains(n, want) || strings.Contains(n, parent) {
			t.Errorf("Notice = %q, want it to say a service both tools depend on is out, without its name:\n%s", n, want)
		}
		lost := run.Degraded()
		if len(lost) != 2 || lost[0].Tool != "web_search" || lost[0].Breaker != web || lost[0].Scope != parent ||
			!lost[0].Forced || lost[0].Status != StatusParentOpen || lost[0].Degraded || lost[1].Scope != parent {
			t.Fatalf("Degraded = %+v, want web_search and news_search removed by scope %s, forced", lost, parent)
		}

		// The model's view of a removed tool: no RPC, no request, and the
		// denial names the parent.
		allows := d.Calls.Get("Allow")
		err = run.Call(ctx, tools[0], v.call)
		var open *CircuitOpenError
		if !errors.As(err, &open) || open.Scope != parent || open.Decision != pb.Decision_DECISION_DENIED_PARENT_OPEN || open.Breaker != web {
			t.Fatalf("Run.Call on web_search = %v, want a CircuitOpenError DENIED_PARENT_OPEN by %s", err, parent)
		}
		den, ok := AsDenial(err, "web_search")
		var j map[string]any
		if !ok || json.Unmarshal(den.JSON(), &j) != nil || j["scope"] != "parent" || j["status"] != StatusParentOpen ||
			j["tool"] != "web_search" || j["forced"] != true || strings.Contains(string(den.JSON()), parent) {
			t.Errorf("denial JSON %s, want status parent_open, forced, scope parent, no breaker name", den.JSON())
		}
		if n := d.Calls.Get("Allow") - allows; n != 0 {
			t.Errorf("%d Allow RPCs for a tool Available removed, want 0", n)
		}
		if h := v.hits.Load(); h != 0 {
			t.Errorf("the vendor saw %d requests, want 0", h)
		}
	})
}

// A run that kept its tools while the parent was closed loses every tool
// under the parent at the first denial breakerd gives one of them, and
// the denial names the parent.
func TestRunCallParentDenialRemovesEveryToolUnderIt(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testRunCallParentDenial(t, m) })
}

func testRunCallParentDenial(t *testing.T, m *clientMode) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		parent, web, news, maps := b.Breaker("search-vendor"), b.Breaker("web_search"), b.Breaker("news_search"), b.Breaker("maps")
		d := start(t, b, parentPolicies(t, parent, web, news))
		op := dial(t, d.Addr, "op")
		agent := m.dial(t, d.Addr, "agent", WithClock(m.clk))
		v := newVendor(t, http.StatusOK)
		ctx := context.Background()
		tools := []Tool{{Name: "web_search", Breaker: web}, {Name: "news_search", Breaker: news}, {Name: "directions", Breaker: maps}}
		run := NewRun(agent)
		if got, err := run.Available(ctx, tools); err != nil || names(got) != "web_search,news_search,directions" {
			t.Fatalf("Available with the parent closed = %s, %v; want every tool", names(got), err)
		}

		force(t, op, parent, pb.ForceMode_FORCE_MODE_OPEN, "vendor maintenance")
		// The daemon's view of the parent follows its events: wait until a
		// child's Allow is denied by it (an Allow alone writes nothing).
		eventually(t, "the daemon's view sees "+parent+" forced open", func() bool {
			p, err := op.Allow(ctx, news)
			return err == nil && p.Decision == pb.Decision_DECISION_DENIED_PARENT_OPEN
		})
		err := run.Call(ctx, tools[0], v.call)
		d1, ok := AsDenial(err, "web_search")
		if !ok || d1.Scope != "parent" || !strings.Contains(string(d1.JSON()), `"scope":"parent"`) {
			t.Fatalf("Run.Call(web_search) = %v (denial %s), want a denial with scope %s", err, d1.JSON(), parent)
		}
		allows := d.Calls.Get("Allow")
		err = run.Call(ctx, tools[1], v.call)
		var open *CircuitOpenError
		if !errors.As(err, &open) || open.Scope != parent || open.Breaker != news || d.Calls.Get("Allow") != allows {
			t.Errorf("Run.Call(news_search) after its parent denied web_search = %v (%d Allows); want a denial by %s with no RPC",
				err, d.Calls.Get("Allow")-allows, parent)
		}
		if err := run.Call(ctx, tools[2], v.call); err != nil {
			t.Errorf("directions (no parent) = %v, want it called", err)
		}
		if h := v.hits.Load(); h != 1 {
			t.Errorf("the vendor saw %d requests, want 1 (directions only)", h)
		}
		if lost := run.Degraded(); len(lost) != 2 || lost[1].Tool != "news_search" || lost[1].Scope != parent || lost[1].Breaker != news {
			t.Errorf("Degraded = %+v, want web_search then news_search, by scope %s", lost, parent)
		}
	})
}

// What Available costs, counted at the daemon: one BatchGet for tools
// with no parent, or whose parent is among the tools' own breakers, or
// whose breaker is pinned closed (a pin on the child decides first); two
// when a tool's breaker names a parent not otherwise read. A closed
// parent keeps its children.
func TestRunAvailableParentCost(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testRunAvailableParentCost(t, m) })
}

func testRunAvailableParentCost(t *testing.T, m *clientMode) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		parent, web, news, maps, kb := b.Breaker("search-vendor"), b.Breaker("web_search"), b.Breaker("news_search"), b.Breaker("maps"), b.Breaker("kb")
		other, pinned := b.Breaker("other-vendor"), b.Breaker("pinned_search")
		set, err := policy.Parse([]byte(fmt.Sprintf(`
defaults:
  jitter: 0
breakers:
  - match: %q
    parent: %q
  - match: %q
    parent: %q
  - match: %q
    parent: %q
`, web, parent, news, parent, pinned, other)))
		if err != nil {
			t.Fatal(err)
		}
		d := start(t, b, store.Options{Policies: set})
		op := dial(t, d.Addr, "op")
		force(t, op, other, pb.ForceMode_FORCE_MODE_OPEN, "vendor maintenance")
		force(t, op, pinned, pb.ForceMode_FORCE_MODE_CLOSED, "known good")
		agent := m.dial(t, d.Addr, "agent", WithClock(m.clk))
		ctx := context.Background()

		for _, c := range []struct {
			what  string
			tools []Tool
			want  string
			gets  int
		}{
			{"no parent", []Tool{{Name: "directions", Breaker: maps}, {Name: "lookup", Breaker: kb}}, "directions,lookup", 1},
			{"a closed parent", []Tool{{Name: "web_search", Breaker: web}, {Name: "news_search", Breaker: news}, {Name: "directions", Breaker: maps}},
				"web_search,news_search,directions", 2},
			{"the parent is a tool's own breaker", []Tool{{Name: "vendor_status", Breaker: parent}, {Name: "web_search", Breaker: web}},
				"vendor_status,web_search", 1},
			{"a child pinned closed under a forced-open parent", []Tool{{Name: "pinned_search", Breaker: pinned}}, "pinned_search", 1},
		} {
			before, gets := d.Calls.Total(), d.Calls.Get("BatchGet")
			got, err := NewRun(agent).Available(ctx, c.tools)
			if err != nil {
				t.Fatal(err)
			}
			if names(got) != c.want {
				t.Errorf("%s: Available = %s, want %s", c.what, names(got), c.want)
			}
			if n, g := d.Calls.Total()-before, d.Calls.Get("BatchGet")-gets; n != c.gets || g != c.gets {
				t.Errorf("%s: Available cost %d RPCs (%d BatchGet), want exactly %d BatchGet", c.what, n, g, c.gets)
			}
		}
	})
}

// The parent's verdict follows the rule a tool's own breaker follows: an
// open parent leaves its children out until its next probe (the notice
// says when), a parent whose probe is due keeps them (a call finds out),
// and a parent whose probe is in flight leaves them out as recovering.
func TestRunAvailableParentOpenDueProbing(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testRunAvailableParentOpenDueProbing(t, m) })
}

func testRunAvailableParentOpenDueProbing(t *testing.T, m *clientMode) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		parent, web := b.Breaker("search-vendor"), b.Breaker("web_search")
		d := start(t, b, parentPolicies(t, parent, web))
		w1, w2 := dial(t, d.Addr, "w1"), dial(t, d.Addr, "w2")
		trip(t, w1, w2, parent) // open, next probe in 30s
		agent := m.dial(t, d.Addr, "agent", WithClock(m.clk))
		ctx := context.Background()
		tools := []Tool{{Name: "web_search", Breaker: web}}

		run := NewRun(agent)
		if got, err := run.Available(ctx, tools); err != nil || len(got) != 0 {
			t.Fatalf("Available under an open parent = %s, %v; want none", names(got), err)
		}
		u := run.Degraded()[0]
		if u.Scope != parent || u.Status != StatusParentOpen || u.Forced || u.MayReturnAt.Sub(m.clk.Now()) < 29*time.Second ||
			u.MayReturnAt.Sub(m.clk.Now()) > 30*time.Second || u.Reason != "it is failing: 5 failed calls in a row, last: server error (5xx)" {
			t.Errorf("removed under an open parent: %+v, want scope %s, its reason, back within 30s", u, parent)
		}
		if n := run.Notice(); !strings.Contains(n, "- web_search: a service it depends on is out of service: it is failing: 5 failed calls in a row, "+
			"last: server error (5xx). It may be back in about 30s, but not during this task.") {
			t.Errorf("Notice = %q, want the parent's return time", n)
		}
		err := run.Call(ctx, tools[0], func(context.Context) error { return nil })
		var open *CircuitOpenError
		if !errors.As(err, &open) || open.RetryAfter < 29*time.Second || open.Scope != parent {
			t.Errorf("Run.Call = %v, want a denial by %s with its retry", err, parent)
		}

		m.advance(b, 31*time.Second) // the parent's probe is due
		if got, err := NewRun(agent).Available(ctx, tools); err != nil || names(got) != "web_search" {
			t.Errorf("Available with the parent's probe due = %s, %v; want web_search (a call finds out)", names(got), err)
		}
		if p, err := w1.Allow(ctx, parent); err != nil || p.Decision != pb.Decision_DECISION_PROBE {
			t.Fatalf("the parent after its cooldown: %v, %v; want PROBE", p, err)
		}
		run = NewRun(agent)
		if got, err := run.Available(ctx, tools); err != nil || len(got) != 0 {
			t.Fatalf("Available with the parent's probe in flight = %s, %v; want none", names(got), err)
		}
		if u := run.Degraded()[0]; u.Scope != parent || u.Status != StatusParentOpen || !u.MayReturnAt.IsZero() ||
			u.Reason != "it failed and is being tested with a single call; its recovery is not confirmed yet" {
			t.Errorf("removed while the parent is probed: %+v", u)
		}
		if n := run.Notice(); !strings.Contains(n, "- web_search: a service it depends on is out of service: it failed and is being tested "+
			"with a single call; its recovery is not confirmed yet. No return time is known.") {
			t.Errorf("Notice = %q, want the parent being tested", n)
		}
	})
}

// A parent in shadow mode shows its enforced state, closed: a tool under
// it that would be denied if the parent were enforced stays available.
func TestRunAvailableKeepsChildrenOfAShadowedParent(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) {
		testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
			parent, web := b.Breaker("search-vendor"), b.Breaker("web_search")
			set, err := policy.Parse([]byte(fmt.Sprintf(`
defaults:
  jitter: 0
breakers:
  - match: %q
    shadow: true
  - match: %q
    parent: %q
`, parent, web, parent)))
			if err != nil {
				t.Fatal(err)
			}
			d := start(t, b, store.Options{Policies: set})
			w1, w2 := dial(t, d.Addr, "w1"), dial(t, d.Addr, "w2")
			fail := func(context.Context) error {
				return &OutcomeError{Outcome: pb.Outcome_OUTCOME_SERVER_ERROR, Message: "HTTP 503"}
			}
			for i := range 5 {
				c := w1
				if i == 4 {
					c = w2
				}
				_ = c.Call(context.Background(), parent, fail)
			}
			if st := state(t, d, parent); !st.Shadow || st.ShadowState != pb.State_STATE_OPEN || st.State != pb.State_STATE_CLOSED {
				t.Fatalf("parent %v shadow %v shadow_state %v, want CLOSED enforced and shadow-open", st.State, st.Shadow, st.ShadowState)
			}
			agent := m.dial(t, d.Addr, "agent", WithClock(m.clk))
			gets := d.Calls.Get("BatchGet")
			run := NewRun(agent)
			if got, err := run.Available(context.Background(), []Tool{{Name: "web_search", Breaker: web}}); err != nil || names(got) != "web_search" {
				t.Errorf("Available under a shadow-open parent = %s, %v; want web_search", names(got), err)
			}
			if g := d.Calls.Get("BatchGet") - gets; g != 2 || run.Notice() != "" {
				t.Errorf("%d BatchGets, notice %q; want 2 (the child, then its parent) and no notice", g, run.Notice())
			}
		})
	})
}
