package client

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestShadowModeAllowsInBothModes: a breaker whose policy says shadow
// trips at breakerd (a shadow transition), yet strict and fast clients
// both let every call out; the shadow probe is handed out by breakerd to
// the first call after the cooldown, and its success closes the shadow
// state.
func TestShadowModeAllowsInBothModes(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) {
		testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
			p := policy.Default()
			p.Jitter, p.Shadow = 0, true
			d := start(t, b, store.Options{Policies: policy.NewSet(p)})
			c1, c2 := m.dial(t, d.Addr, "w1"), m.dial(t, d.Addr, "w2")
			name := b.Breaker("search")
			ctx := context.Background()
			var reached atomic.Int64
			fail := func(context.Context) error {
				reached.Add(1)
				return &OutcomeError{Outcome: pb.Outcome_OUTCOME_SERVER_ERROR, Message: "HTTP 503"}
			}
			ok := func(context.Context) error { reached.Add(1); return nil }
			for i := range 5 {
				c := c1
				if i == 4 {
					c = c2
				}
				if err := c.Call(ctx, name, fail); err == nil {
					t.Fatal("a failing call returned nil")
				}
			}
			m.settle(t, d, name, c1, c2)
			if st := state(t, d, name); st.State != pb.State_STATE_CLOSED || !st.Shadow || st.ShadowState != pb.State_STATE_OPEN {
				t.Fatalf("after 5 failures from 2 workers: %v, shadow %v, shadow_state %v; want CLOSED, shadow, OPEN", st.State, st.Shadow, st.ShadowState)
			}
			// Every call goes out, from both clients, however often asked.
			for range 5 {
				for _, c := range []*Client{c1, c2} {
					if err := c.Call(ctx, name, ok); err != nil {
						t.Fatalf("a call on a shadow-open breaker: %v, want it let through", err)
					}
				}
			}
			if n := reached.Load(); n != 15 {
				t.Fatalf("%d calls reached the vendor, want all 15", n)
			}
			m.settle(t, d, name, c1, c2)
			if st := state(t, d, name); st.ShadowState != pb.State_STATE_OPEN {
				t.Fatalf("successes during the shadow cooldown moved it: shadow_state %v, want OPEN (they are not counted)", st.ShadowState)
			}

			// The shadow probe: the first call after the cooldown, from
			// breakerd, with the lease; the next caller is let through
			// without it.
			m.advance(b, 30*time.Second)
			probe, err := c2.Allow(ctx, name)
			if err != nil || !probe.Allowed() || probe.ShadowDecision != pb.Decision_DECISION_PROBE || probe.Ticket.GetLeaseToken() == "" {
				t.Fatalf("the first Allow after the cooldown: %+v, %v; want ALLOWED with shadow decision PROBE and the lease", probe, err)
			}
			other, err := c1.Allow(ctx, name)
			if err != nil || !other.Allowed() || other.ShadowDecision != pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT || !other.Ticket.GetShadowDenied() {
				t.Fatalf("a second Allow during the shadow probe: %+v, %v; want ALLOWED, shadow DENIED_PROBE_IN_FLIGHT, ticket marked", other, err)
			}
			if _, err := c1.Record(ctx, other, Result{Outcome: pb.Outcome_OUTCOME_SUCCESS}); err != nil {
				t.Fatal(err)
			}
			if _, err := c2.Record(ctx, probe, Result{Outcome: pb.Outcome_OUTCOME_SUCCESS}); err != nil {
				t.Fatal(err)
			}
			m.settle(t, d, name, c1, c2)
			if st := state(t, d, name); st.State != pb.State_STATE_CLOSED || st.ShadowState != pb.State_STATE_CLOSED {
				t.Errorf("after the shadow probe's success: %v, shadow_state %v; want CLOSED, CLOSED", st.State, st.ShadowState)
			}
		})
	})
}

// TestFastShadowTripEventDoesNotDeny: the fast view hears the shadow trip
// (an event marked shadow, to OPEN) and keeps allowing, answering from
// memory once it has read the breaker again, with no RPC per call.
func TestFastShadowTripEventDoesNotDeny(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		p := policy.Default()
		p.Jitter, p.Shadow = 0, true
		d := start(t, b, store.Options{Policies: policy.NewSet(p)})
		clk := newFakeClock()
		c := fastDial(t, d.Addr, "w1", clk)
		strict := dial(t, d.Addr, "w2")
		name := b.Breaker("search")
		ctx := context.Background()
		if _, err := c.Allow(ctx, name); err != nil {
			t.Fatal(err)
		}
		known(t, d, c, name)
		w := watchFor(t, c, name)
		for range 5 { // a shadow trip by others: w2, 3 workers' worth of failures
			_ = strict.Call(ctx, name, func(context.Context) error {
				return &OutcomeError{Outcome: pb.Outcome_OUTCOME_TIMEOUT}
			})
		}
		// Needs 2 workers: one more failure from w1's peer.
		w3 := dial(t, d.Addr, "w3")
		_ = w3.Call(ctx, name, func(context.Context) error { return &OutcomeError{Outcome: pb.Outcome_OUTCOME_TIMEOUT} })
		w.await(t, pb.State_STATE_OPEN)
		eventually(t, "the fast view forgets the breaker on the shadow trip", func() bool {
			e := c.view.get(name)
			return e == nil || e.v.State == string(breaker.Open)
		})
		// An event that reaches the view after an Allow learned the
		// breaker (an alert, a notice of the run, a resync on a busy host)
		// makes it forget it again: the next Allow asks and learns it.
		// Once none comes, ten Allows are answered from the view, allowed
		// and marked shadow_denied, with no RPC.
		eventually(t, "ten Allows answered from the view with no RPC, once it learned the breaker again", func() bool {
			before := d.Calls.Get("Allow")
			cached := 0
			for range 10 {
				pm, err := c.Allow(ctx, name)
				if err != nil || !pm.Allowed() || !pm.Ticket.GetShadowDenied() || pm.ShadowDecision != pb.Decision_DECISION_DENIED_OPEN {
					t.Fatalf("fast Allow during the shadow cooldown: %+v, %v; want allowed, ticket marked shadow_denied", pm, err)
				}
				if pm.Cached {
					cached++
				}
			}
			return cached == 10 && d.Calls.Get("Allow") == before
		})
		// Once the shadow probe may be due, the view asks breakerd.
		advanceAll(b, 30*time.Second, clk)
		pm, err := c.Allow(ctx, name)
		if err != nil || pm.Cached || pm.ShadowDecision != pb.Decision_DECISION_PROBE {
			t.Fatalf("fast Allow after the shadow cooldown: %+v, %v; want breakerd's answer, shadow PROBE", pm, err)
		}
	})
}
