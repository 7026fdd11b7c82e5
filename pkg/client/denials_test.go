package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

func TestCancelledOrPanickingProbeReleasesTheLease(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testCancelledOrPanickingProbeReleasesTheLease(t, m) })
}

func testCancelledOrPanickingProbeReleasesTheLease(t *testing.T, m *clientMode) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := start(t, b, withAlternatives())
		c1, c2 := m.dial(t, d.Addr, "w1"), m.dial(t, d.Addr, "w2")
		name := b.Breaker("web_search")
		trip(t, c1, c2, name)
		m.settle(t, d, name, c1, c2)
		m.advance(b, 30*time.Second)

		// The caller gives up mid-probe.
		ctx, cancel := context.WithCancel(context.Background())
		err := c1.Call(ctx, name, func(ctx context.Context) error { cancel(); return ctx.Err() })
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled probe: %v, want context.Canceled", err)
		}
		m.settle(t, d, name, c1, c2) // fast mode: the release is sent in the background
		p, err := c2.Allow(context.Background(), name)
		if err != nil || p.Decision != pb.Decision_DECISION_PROBE {
			t.Fatalf("after a cancelled probe: %v, %v; want PROBE at once (lease released)", p, err)
		}
		if _, err := c2.Record(context.Background(), p, Result{Outcome: pb.Outcome_OUTCOME_CANCELED}); err != nil {
			t.Fatal(err)
		}
		m.settle(t, d, name, c1, c2)

		// The tool panics mid-probe.
		sent := records(d)
		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("the panic did not reach the caller")
				}
			}()
			_ = c1.Call(context.Background(), name, func(context.Context) error { panic("tool bug") })
		}()
		m.settle(t, d, name, c1)
		if n := records(d) - sent; n != 1 {
			t.Errorf("the panicking probe sent %d outcome RPCs, want 1 (its release)", n)
		}
		if st := state(t, d, name); st.State != pb.State_STATE_HALF_OPEN || st.ProbeInFlight || st.FailedProbes != 0 {
			t.Fatalf("after a panicking probe: %v in flight %v failed probes %d; want HALF_OPEN, released, no verdict",
				st.State, st.ProbeInFlight, st.FailedProbes)
		}
	})
}

func TestSuspectAndPausedDenialsNeverRunTheCall(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, m *clientMode) { testSuspectAndPausedDenialsNeverRunTheCall(t, m) })
}

func testSuspectAndPausedDenialsNeverRunTheCall(t *testing.T, m *clientMode) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := start(t, b, store.Options{})
		w1, w2 := m.dial(t, d.Addr, "w1"), m.dial(t, d.Addr, "w2")
		ctx := context.Background()
		v := newVendor(t, 503)

		// One worker alone past the threshold: it is the suspect, denied alone.
		suspect := b.Breaker("crm")
		for range 5 {
			_ = w1.Call(ctx, suspect, v.call)
		}
		m.settle(t, d, suspect, w1)
		hits := v.hits.Load()
		var open *CircuitOpenError
		if err := w1.Call(ctx, suspect, v.call); !errors.As(err, &open) || open.Decision != pb.Decision_DECISION_DENIED_SUSPECT_WORKER {
			t.Fatalf("the suspect worker's call: %v, want a CircuitOpenError with DENIED_SUSPECT_WORKER", err)
		}
		if v.hits.Load() != hits {
			t.Errorf("a denied suspect's call reached the vendor")
		}
		crm := []Tool{{Name: "crm_lookup", Breaker: suspect}}
		if tools, err := NewRun(w1).Available(ctx, crm); err != nil || len(tools) != 0 {
			t.Errorf("the suspect's run keeps %v (%v); want the tool gone for it", tools, err)
		}
		if tools, err := NewRun(w2).Available(ctx, crm); err != nil || len(tools) != 1 {
			t.Errorf("another worker's run has %v (%v); want the tool kept", tools, err)
		}
		if err := w2.Call(ctx, suspect, func(context.Context) error { return nil }); err != nil {
			t.Fatalf("another worker was denied: %v", err)
		}

		// A credential that worked, then a 401 from two workers: the
		// breaker pauses (one worker alone only isolates itself).
		paid := b.Breaker("stripe:acct_42")
		revoked := func(context.Context) error {
			return &OutcomeError{Outcome: pb.Outcome_OUTCOME_UNAUTHENTICATED, Message: "HTTP 401"}
		}
		for _, w := range []*Client{w1, w2} {
			if err := w.Call(ctx, paid, func(context.Context) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		_ = w1.Call(ctx, paid, revoked)
		_ = w2.Call(ctx, paid, revoked)
		m.settle(t, d, paid, w1, w2)
		ran := false
		err := w2.Call(ctx, paid, func(context.Context) error { ran = true; return nil })
		if !errors.As(err, &open) || open.Decision != pb.Decision_DECISION_DENIED_PAUSED || ran {
			t.Fatalf("after a 401 on a credential that worked: %v (ran %v), want DENIED_PAUSED without running", err, ran)
		}
		run := NewRun(w2)
		tools, err := run.Available(ctx, []Tool{{Name: "refund_charge", Breaker: paid}, {Name: "lookup"}})
		if err != nil || len(tools) != 1 || tools[0].Name != "lookup" {
			t.Fatalf("Available with a paused breaker = %v, %v; want only lookup", tools, err)
		}
	})
}
