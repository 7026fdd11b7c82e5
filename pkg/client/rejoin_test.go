package client

import (
	"context"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestRejoinIsAsQuietAsALoss: a client given two daemons loses one (its
// proxy refuses) and goes on through the other; the lost daemon comes
// back cold (its answers 1.2 s late, past the 1 s Allow budget, as a
// daemon busy with its start: the delay is a floor, so any margin over
// the budget makes an Allow it answered miss it). Neither the loss nor the rejoin costs an
// Allow its budget: no answer comes from the fallback. The rejoined
// daemon gets Records meanwhile (counted there), and Allows again once
// it answers in time.
func TestRejoinIsAsQuietAsALoss(t *testing.T) {
	t.Parallel()
	b := testredis.Mini(t)
	d1, d2 := start(t, b, store.Options{}), start(t, b, store.Options{})
	px := testredis.NewProxy(t, d1.Addr)
	c := dial(t, px.Addr()+","+d2.Addr, "w", WithAllowBudget(time.Second))
	name := b.Breaker("search")
	degraded := 0
	allow := func() *Permit {
		t.Helper()
		p, err := c.Allow(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if p.Degraded {
			degraded++
		}
		return p
	}
	round := func() { // three calls: the round robin's turns fall on both daemons
		t.Helper()
		allow()
		p := allow()
		if _, err := c.Record(context.Background(), p, Result{Outcome: pb.Outcome_OUTCOME_SUCCESS}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "both daemons to answer", func() bool {
		round()
		return d1.Calls.Get("Allow") > 0 && d2.Calls.Get("Allow") > 0
	})
	degraded = 0

	px.Cut()
	served := d2.Calls.Get("Allow")
	for d2.Calls.Get("Allow") < served+50 {
		round()
	}
	lost := degraded

	px.Restore(t) // (Restore ends a Delay: set after it)
	px.Delay(1200 * time.Millisecond)
	records, allows := d1.Calls.Get("Record"), d1.Calls.Get("Allow")
	eventually(t, "the rejoined daemon to get two Records", func() bool {
		round()
		return d1.Calls.Get("Record") >= records+2
	})
	rejoin := degraded - lost
	t.Logf("fallbacks: %d at the loss, %d at the rejoin; the cold daemon got %d Allows, %d Records",
		lost, rejoin, d1.Calls.Get("Allow")-allows, d1.Calls.Get("Record")-records)
	if lost != 0 || rejoin != 0 {
		t.Errorf("%d Allows answered by the fallback at the loss, %d at the rejoin; want 0 and 0", lost, rejoin)
	}

	px.Delay(0)
	eventually(t, "the rejoined daemon to get Allows again once it answers in time", func() bool {
		round()
		return d1.Calls.Get("Allow") > allows
	})
}
