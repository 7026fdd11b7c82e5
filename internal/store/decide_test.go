package store

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// TestAnsweredDecisionsKeepOneWorker: decisions answered within their
// bound, one after another, run on the kept workers, not a goroutine
// each: on the one the first started, or a few (a worker that has handed
// its answer back may be descheduled before it waits for the next, which
// then starts another); none is left outstanding for the watchdog; once
// the store closes, the idle watchdog leaves.
func TestAnsweredDecisionsKeepOneWorker(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	defer rdb.Close()
	s := New(rdb, Options{})
	ctx := context.Background()
	if err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := s.Allow(ctx, fmt.Sprintf("b%d", i%10), "w1"); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.dec.workers.Load(); n < 1 || n > 4 {
		t.Fatalf("100 sequential decisions ran on %d kept workers, want 1 to 4", n)
	}
	s.dec.mu.Lock()
	outstanding := s.dec.head != nil
	s.dec.mu.Unlock()
	if outstanding {
		t.Fatal("an answered decision is still in the watchdog's list")
	}
	s.Close()
	for !s.watchdogStopped() {
		runtime.Gosched() // it leaves once it has seen the close
	}
}

// watchdogStopped reports whether the decisions' watchdog has left.
func (s *Store) watchdogStopped() bool {
	s.dec.mu.Lock()
	defer s.dec.mu.Unlock()
	return s.dec.stopped
}
