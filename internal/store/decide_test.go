package store

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// TestAnsweredDecisionsStartNoGoroutine: decisions answered within their
// bound, one after another, start no goroutine each and leave none
// outstanding for the watchdog. Coalesced, they run on their caller's
// goroutine (no kept worker starts); unpipelined, on the kept workers:
// the one the first started, or a few (a worker that has handed its
// answer back may be descheduled before it waits for the next, which
// then starts another). Once the store closes, the idle watchdog leaves.
func TestAnsweredDecisionsStartNoGoroutine(t *testing.T) {
	for _, c := range []struct {
		name     string
		o        Options
		min, max int32
	}{
		{"coalesced", Options{}, 0, 0},
		{"unpipelined", Options{Unpipelined: true}, 1, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
			defer rdb.Close()
			s := New(rdb, c.o)
			ctx := context.Background()
			if err := s.Load(ctx); err != nil {
				t.Fatal(err)
			}
			for i := range 100 {
				if _, err := s.Allow(ctx, fmt.Sprintf("b%d", i%10), "w1"); err != nil {
					t.Fatal(err)
				}
			}
			if n := s.dec.workers.Load(); n < c.min || n > c.max {
				t.Fatalf("100 sequential decisions ran on %d kept workers, want %d to %d", n, c.min, c.max)
			}
			if n := Outstanding(s); n != 0 {
				t.Fatalf("%d answered decisions still in the watchdog's list", n)
			}
			s.Close()
			for !s.watchdogStopped() {
				runtime.Gosched() // it leaves once it has seen the close
			}
		})
	}
}

// TestCallersThatLeaveAnyTime: callers whose contexts end at any point
// of their decision (before it is sent, while it is queued or out, as
// its reply comes in) get the answer or their context's error, never a
// stall; the decisions they leave are still answered, so none stays
// outstanding and Redis is not taken as failing; and the decisions
// after them, on the same pooled decisions, are answered as usual.
func TestCallersThatLeaveAnyTime(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	defer rdb.Close()
	s := New(rdb, Options{DecisionTimeout: time.Hour}) // none ends by the watchdog
	defer s.Close()
	if err := s.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				ctx, cancel := context.WithCancel(context.Background())
				go func() {
					for range (g*200 + i) % 7 {
						runtime.Gosched()
					}
					cancel()
				}()
				if _, err := s.Allow(ctx, fmt.Sprintf("b%d", i%10), "w1"); err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("Allow whose caller left: %v, want an answer or context.Canceled", err)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	for waited := time.Now(); Outstanding(s) != 0; runtime.Gosched() {
		if time.Since(waited) > time.Minute {
			t.Fatalf("%d decisions whose callers left are still outstanding", Outstanding(s))
		}
	}
	if s.Degraded() {
		t.Error("callers that left put the store in an outage")
	}
	for i := range 100 {
		if _, err := s.Allow(context.Background(), fmt.Sprintf("b%d", i%10), "w1"); err != nil {
			t.Fatalf("Allow after the callers that left: %v", err)
		}
	}
}

// watchdogStopped reports whether the decisions' watchdog has left.
func (s *Store) watchdogStopped() bool {
	s.dec.mu.Lock()
	defer s.dec.mu.Unlock()
	return s.dec.stopped
}
