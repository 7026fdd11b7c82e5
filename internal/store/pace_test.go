package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// The first listing seeds the outage memory in one pipeline; once it is
// seeded, a listing reads store.ListPiece breakers per round trip, and
// lists the same breakers.
func TestSeededListingIsReadInPieces(t *testing.T) {
	t.Parallel()
	b := testredis.Mini(t) // alone on its server: the listing sees only this test's breakers
	f := newFixture(t, b, store.Options{})
	ctx := context.Background()
	n := 2*store.ListPiece + 5
	for i := range n {
		if _, err := f.st.Force(ctx, fmt.Sprintf("b%03d", i), pb.ForceMode_FORCE_MODE_OPEN, "pacing", 0, "t"); err != nil {
			t.Fatal(err)
		}
	}
	list := func() (map[string]pb.State, int64) {
		b.ResetCounts()
		all, err := f.st.ListSeeding(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]pb.State{}
		for _, st := range all {
			got[st.GetBreaker()] = st.GetState()
		}
		return got, b.RoundTrips()
	}
	first, firstTrips := list()
	b.ResetCounts()
	if _, err := f.st.List(ctx); err != nil || b.RoundTrips() != firstTrips {
		t.Errorf("List took %d round trips (%v), want %d as the first listing: an operator's List is not paced", b.RoundTrips(), err, firstTrips)
	}
	paced, pacedTrips := list()
	if len(first) != n || len(paced) != n {
		t.Fatalf("listed %d breakers, then %d; want %d both times", len(first), len(paced), n)
	}
	for name, st := range first {
		if paced[name] != st {
			t.Errorf("%s: %v in the first listing, %v in the paced one", name, st, paced[name])
		}
	}
	// The same SCAN; the reads in 3 pipelines instead of 1.
	if got, want := pacedTrips-firstTrips, int64(2); got != want {
		t.Errorf("the paced listing took %d round trips more than the first (%d and %d), want %d: %d breakers in pieces of %d",
			got, pacedTrips, firstTrips, want, n, store.ListPiece)
	}
}

// A close heard while a paced listing is under way stands: the piece that
// read the breaker open seeded it before the close was heard, and nothing
// of the listing seeds it again afterwards.
func TestPacedListingDoesNotUndoACloseHeardMeanwhile(t *testing.T) {
	t.Parallel()
	b := testredis.Mini(t)
	f := newFixture(t, b, store.Options{})
	ctx := context.Background()
	for i := range 2*store.ListPiece + 5 {
		if _, err := f.st.Force(ctx, fmt.Sprintf("b%03d", i), pb.ForceMode_FORCE_MODE_OPEN, "pacing", 0, "t"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.st.ListSeeding(ctx); err != nil { // seeds the memory: the next listing is paced
		t.Fatal(err)
	}
	var closed string
	store.OnPieceSeeded(f.st, func(piece []*pb.BreakerState) {
		if closed != "" || len(piece) == 0 {
			return
		}
		// After the first piece: an operator lifts the pin of one of its
		// breakers, and the event feed brings the close.
		closed = piece[0].GetBreaker()
		res, err := f.st.Force(ctx, closed, pb.ForceMode_FORCE_MODE_AUTO, "", 0, "t")
		if err != nil {
			t.Fatal(err)
		}
		f.st.ObserveEvent(&pb.Event{Breaker: closed, Generation: res.GetGeneration(), To: pb.State_STATE_CLOSED, Actor: "t"})
	})
	if _, err := f.st.ListSeeding(ctx); err != nil {
		t.Fatal(err)
	}
	if closed == "" {
		t.Fatal("the listing was not paced: no piece seeded")
	}
	if store.Seeded(f.st, closed) {
		t.Errorf("%s: seeded after the listing, though its close was heard after the piece that read it open", closed)
	}
}

// A paced listing goes on pausing only while the names left, read at the
// pace so far with a pause as long after each piece, end before its
// deadline.
func TestPacedListingKeepsItsDeadline(t *testing.T) {
	t.Parallel()
	work, done, total := 10*time.Millisecond, 32, 3200 // about 1 s of reads left
	if !store.MayPause(context.Background(), work, done, total) {
		t.Error("no deadline: want pauses")
	}
	far, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if !store.MayPause(far, work, done, total) {
		t.Error("an hour left for 2 s of paced reads: want pauses")
	}
	near, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if store.MayPause(near, work, done, total) {
		t.Error("1 s left for 2 s of paced reads: want no pause")
	}
}
