package client

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// ForWorker: many workers on one connection, one Watch stream and one
// fast view, each its own worker to breakerd.

func TestForWorkerSharesOneStreamAndCountsAsDistinctWorkers(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := start(t, b, store.Options{})
		clk := newFakeClock()
		w1 := fastDial(t, d.Addr, "w1", clk)
		w2 := w1.ForWorker("w2")
		if got := w2.WorkerID(); got != "w2" {
			t.Fatalf("ForWorker(w2).WorkerID() = %q", got)
		}
		if err := w2.Close(); err != nil { // a handle's Close leaves the shared core running
			t.Fatal(err)
		}
		ctx := context.Background()
		name := b.Breaker("search")

		// Both workers trip it: the quorum (2 distinct workers) holds only
		// if breakerd sees two ids on the one connection.
		trip(t, w1, w2, name)
		st := state(t, d, name)
		if st.GetState() != pb.State_STATE_OPEN || st.GetDistinctWorkers() != 2 {
			t.Fatalf("after 4 failures from w1 and 1 from w2: %v with %d distinct workers, want OPEN with 2", st.GetState(), st.GetDistinctWorkers())
		}
		// The trip reaches the handle through the one view: denied, no RPC.
		allows := d.Calls.Get("Allow")
		p, err := w2.Allow(ctx, name)
		if err != nil || p.Decision != pb.Decision_DECISION_DENIED_OPEN || !p.Cached {
			t.Fatalf("w2 after the trip: %+v, %v; want a cached DENIED_OPEN", p, err)
		}
		if got := d.Calls.Get("Allow") - allows; got != 0 {
			t.Errorf("w2's Allow after the trip: %d Allow RPCs, want 0 (the shared view answers)", got)
		}

		// A suspect denial answers only the worker it names, though the
		// view is shared: w1 fails alone past the threshold.
		crm := b.Breaker("crm")
		fail := func(context.Context) error {
			return &OutcomeError{Outcome: pb.Outcome_OUTCOME_SERVER_ERROR, Message: "HTTP 503"}
		}
		for range 5 {
			_ = w1.Call(ctx, crm, fail)
		}
		if err := w1.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if st := state(t, d, crm); st.GetSuspectWorker() != "w1" {
			t.Fatalf("after 5 failures from w1 alone: suspect %q, want w1", st.GetSuspectWorker())
		}
		eventually(t, "the view denies w1 alone and allows w2", func() bool {
			p1, err1 := w1.Allow(ctx, crm)
			p2, err2 := w2.Allow(ctx, crm)
			return err1 == nil && err2 == nil && p1.Cached && p2.Cached &&
				p1.Decision == pb.Decision_DECISION_DENIED_SUSPECT_WORKER && p2.Decision == pb.Decision_DECISION_ALLOWED
		})

		if got := d.Calls.Get("Watch"); got != 1 {
			t.Errorf("two workers on one fast client: %d Watch RPCs served, want 1", got)
		}
		if got := w1.Stats().Resyncs; got != 1 {
			t.Errorf("Resyncs = %d, want 1 (one stream, never broken)", got)
		}
	})
}

func TestForWorkerRefusesABadWorkerID(t *testing.T) {
	t.Parallel()
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := start(t, b, store.Options{})
		w1 := fastDial(t, d.Addr, "w1", newFakeClock())
		bad := w1.ForWorker("")
		if _, err := bad.Allow(context.Background(), b.Breaker("search")); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("Allow on a handle with an empty worker id: %v, want InvalidArgument", err)
		}
		if got := d.Calls.Get("Allow"); got != 0 {
			t.Errorf("a refused worker id: %d Allow RPCs, want 0 (checked before any round trip)", got)
		}
	})
}
