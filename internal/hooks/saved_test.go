package hooks_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/breakerd/breakerd/internal/hooks"
	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestCloseSaysWhatTheSpellSaved: the close of a spell carries what the
// breaker saved from its trip to its close (daemon denials, the clients'
// reports, the spend avoided at the policy's cost), and the next spell's
// close counts only its own; the trip carries nothing. The receiver's
// bodies are the witness.
func TestCloseSaysWhatTheSpellSaved(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		r := newReceiver(t)
		name := b.Breaker("web_search")
		set, err := policy.Parse([]byte("breakers:\n  - match: \"" + name + "\"\n    cost_per_call: {amount: 0.1, currency: USD}\n    cooldown_cap: 1h\n"))
		if err != nil {
			t.Fatal(err)
		}
		// The savings buckets are named on the daemon's clock, the events
		// dated on Redis's: one clock here, as in a fleet whose clocks agree.
		d := daemontest.StartWith(t, b, daemontest.Options{Store: store.Options{Policies: set, Now: b.Now},
			Hooks: hookOptions(b, r, nil, func(h *hooks.Hook) { h.Events = []string{hooks.EventOpened, hooks.EventClosed} })})
		conn, err := grpc.NewClient(d.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		api := pb.NewBreakerServiceClient(conn)
		ctx := context.Background()

		// The first spell: 5 denials here, 3 in a client and a tool left
		// out of a run, over 22 minutes (the cooldown cap keeps the open
		// state that long without a probe).
		trip(t, d.Store, name)
		deny(t, api, name, 5)
		if _, err := api.ReportSavings(ctx, &pb.ReportSavingsRequest{WorkerId: "w1",
			Reports: []*pb.SavingsReport{{Breaker: name, LocalDenials: 3, ToolsRemoved: 1}}}); err != nil {
			t.Fatal(err)
		}
		b.Advance(22 * time.Minute)
		closeByProbe(t, d.Store, name)
		first := savedOf(t, r, 2)

		// The second spell, five minutes later: 2 denials over 2 minutes.
		b.Advance(5 * time.Minute)
		trip(t, d.Store, name)
		deny(t, api, name, 2)
		b.Advance(2 * time.Minute)
		closeByProbe(t, d.Store, name)
		second := savedOf(t, r, 4)

		want := []*hooks.Saved{nil,
			{Summary: "open 22m: 9 calls refused, ≈ 0.90 USD (estimate)", OpenMs: (22 * time.Minute).Milliseconds(),
				CallsRefused: 9, DaemonDenials: 5, ClientDenials: 3, ToolsRemoved: 1, SpendAvoidedEstimate: 0.9, Currency: "USD", Estimate: true},
			nil,
			{Summary: "open 2m: 2 calls refused, ≈ 0.20 USD (estimate)", OpenMs: (2 * time.Minute).Milliseconds(),
				CallsRefused: 2, DaemonDenials: 2, SpendAvoidedEstimate: 0.2, Currency: "USD", Estimate: true}}
		got := append(first, second[2:]...)
		for i, s := range got {
			if s != nil {
				s.OpenedAtMs = 0 // the Redis clock's, checked through OpenMs
			}
			if diff := cmp.Diff(want[i], s); diff != "" {
				t.Errorf("delivery %d: saved (-want +got):\n%s", i, diff)
			}
		}
	})
}

// deny asks Allow n times of the open breaker through the daemon, each
// answered with a denial (and counted by it).
func deny(t *testing.T, api pb.BreakerServiceClient, name string, n int) {
	t.Helper()
	for range n {
		res, err := api.Allow(context.Background(), &pb.AllowRequest{Breaker: name, WorkerId: "w9"})
		if err != nil || res.GetDecision() != pb.Decision_DECISION_DENIED_OPEN {
			t.Fatalf("Allow(%q) = %v, %v; want DENIED_OPEN", name, res.GetDecision(), err)
		}
	}
}

// closeByProbe closes an open breaker whose cooldown has passed: a probe
// that succeeds.
func closeByProbe(t *testing.T, st *store.Store, name string) {
	t.Helper()
	ctx := context.Background()
	a, err := st.Allow(ctx, name, "w3")
	if err != nil || a.Decision != pb.Decision_DECISION_PROBE {
		t.Fatalf("Allow(%q) after the cooldown = %v, %v; want PROBE", name, a.GetDecision(), err)
	}
	if _, err := st.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: "w3", Ticket: a.Ticket, Outcome: pb.Outcome_OUTCOME_SUCCESS}); err != nil {
		t.Fatal(err)
	}
}

// savedOf waits for n accepted deliveries, trips and closes in turn (each
// with its cause), and returns their saved fields, oldest event first.
func savedOf(t *testing.T, r *receiver, n int) []*hooks.Saved {
	t.Helper()
	waitFor(t, "the deliveries", func() bool { return len(r.accepted()) == n })
	var ps []hooks.Payload
	for _, rqs := range r.accepted() {
		var p hooks.Payload
		if err := json.Unmarshal(rqs[0].body, &p); err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	out := make([]*hooks.Saved, len(ps))
	for _, p := range ps {
		i := 0
		for _, q := range ps {
			if store.CompareIDs(q.ID, p.ID) < 0 {
				i++
			}
		}
		if want, cause := []string{hooks.EventOpened, hooks.EventClosed}[i%2], []string{"trip", "probe_succeeded"}[i%2]; p.Event != want || p.Cause != cause {
			t.Errorf("delivery %d is %q caused by %q, want %q by %q", i, p.Event, p.Cause, want, cause)
		}
		out[i] = p.Saved
	}
	return out
}
