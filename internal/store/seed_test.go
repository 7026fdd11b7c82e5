package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestListingSeedsOutageMemory: a daemon started after a breaker was
// forced open (and another tripped) never hears their events; its
// listing of what Redis holds seeds its memory, so once Redis is cut
// both stay denied from memory.
func TestListingSeedsOutageMemory(t *testing.T) {
	eachServer(t, func(t *testing.T, b *testredis.Backend) {
		ctx := context.Background()
		forced, tripped := b.Breaker("forced"), b.Breaker("tripped")
		other := newFixture(t, b, store.Options{}) // another daemon's store
		if _, err := other.st.Force(ctx, forced, pb.ForceMode_FORCE_MODE_OPEN, "vendor maintenance", 0, "alice"); err != nil {
			t.Fatal(err)
		}
		other.trip(tripped)

		f := newOutageFixture(t, b, nil) // started after: its hub heard neither
		if store.Seeded(f.st, forced) || store.Seeded(f.st, tripped) {
			t.Fatal("seeded before any listing: the fixture's hub heard an event from before it started")
		}
		all, err := f.st.ListSeeding(ctx)
		ours := 0
		for _, st := range all { // other tests' breakers may share this Redis
			if strings.HasPrefix(st.GetBreaker(), b.Prefix) {
				ours++
			}
		}
		if err != nil || ours != 2 {
			t.Fatalf("ListSeeding = %d states of this test's, %v; want the 2 breakers", ours, err)
		}

		f.proxy.Cut()
		if a := f.allow(forced, "w1"); !a.Degraded || a.Decision != pb.Decision_DECISION_DENIED_FORCED_OPEN {
			t.Errorf("Allow(forced) in the outage = %v degraded %v, want a degraded DENIED_FORCED_OPEN (seeded by the listing)", a.Decision, a.Degraded)
		}
		if a := f.allow(tripped, "w1"); !a.Degraded || a.Decision != pb.Decision_DECISION_DENIED_OPEN {
			t.Errorf("Allow(tripped) in the outage = %v degraded %v, want a degraded DENIED_OPEN (seeded by the listing)", a.Decision, a.Degraded)
		}
	})
}

// TestListingKeepsNewerSeed: a listing read before an event was heard
// does not replace that event's seed; a newer listing does.
func TestListingKeepsNewerSeed(t *testing.T) {
	f := newFixture(t, testredis.Mini(t), store.Options{})
	name := "search"
	f.st.ObserveEvent(&pb.Event{Breaker: name, Generation: 7, To: pb.State_STATE_FORCED_OPEN, Actor: "alice"})
	f.st.ObserveStates([]*pb.BreakerState{{Breaker: name, Generation: 6, State: pb.State_STATE_CLOSED}})
	if !store.Seeded(f.st, name) {
		t.Fatal("a listing of generation 6 dropped the seed of the event of generation 7")
	}
	f.st.ObserveStates([]*pb.BreakerState{{Breaker: name, Generation: 8, State: pb.State_STATE_CLOSED}})
	if store.Seeded(f.st, name) {
		t.Fatal("a listing of generation 8 (closed) kept the seed of generation 7")
	}
	f.st.ObserveStates([]*pb.BreakerState{{Breaker: name, Generation: 9, State: pb.State_STATE_CLOSED, Shadow: true, ShadowState: pb.State_STATE_OPEN}})
	if !store.Seeded(f.st, name) {
		t.Fatal("a shadowed breaker that would be open was not seeded")
	}
}
