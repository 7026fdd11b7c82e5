package events_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/events"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

func startHub(t *testing.T, b *testredis.Backend) (*events.Hub, *store.Store) {
	t.Helper()
	st := store.New(b.Client, store.Options{Channel: b.Prefix + "events", Now: b.Clock()})
	hub := events.NewHub(b.NewClient(t), st.Channel(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	stop, err := hub.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return hub, st
}

func force(t *testing.T, st *store.Store, name string, mode pb.ForceMode) {
	t.Helper()
	if _, err := st.Force(context.Background(), name, mode, "r", 0, "ops"); err != nil {
		t.Fatal(err)
	}
}

func TestFilterAndOrder(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		hub, st := startHub(t, b)
		a, other := b.Breaker("a"), b.Breaker("b")
		only := hub.Subscribe([]string{a})
		all := hub.Subscribe(nil)
		defer only.Close()
		defer all.Close()
		force(t, st, a, pb.ForceMode_FORCE_MODE_OPEN)
		force(t, st, other, pb.ForceMode_FORCE_MODE_OPEN)
		force(t, st, a, pb.ForceMode_FORCE_MODE_AUTO)
		recv := func(s *events.Subscription) *pb.Event {
			t.Helper()
			select {
			case e := <-s.C:
				return e
			case <-time.After(10 * time.Second):
				t.Fatal("no event")
				return nil
			}
		}
		// Order holds per breaker, not across breakers: on Redis Cluster
		// a and b live on different nodes, and each node's PUBLISH reaches
		// the hub's node over the cluster bus on its own schedule.
		var seen []pb.State
		gotOther := false
		for range 3 {
			switch e := recv(all); e.Breaker {
			case a:
				seen = append(seen, e.To)
			case other:
				gotOther = true
			default:
				t.Fatalf("all: event for %s, want %s or %s", e.Breaker, a, other)
			}
		}
		if !gotOther || len(seen) != 2 || seen[0] != pb.State_STATE_FORCED_OPEN || seen[1] != pb.State_STATE_CLOSED {
			t.Fatalf("all: %s went %v (want forced open then closed), event for %s seen: %v", a, seen, other, gotOther)
		}
		for _, want := range []pb.State{pb.State_STATE_FORCED_OPEN, pb.State_STATE_CLOSED} {
			if e := recv(only); e.Breaker != a || e.To != want {
				t.Fatalf("filtered: %s -> %v, want %s -> %v", e.Breaker, e.To, a, want)
			}
		}
	})
}

func TestSlowSubscriberIsCutNotBlocking(t *testing.T) {
	b := testredis.Mini(t)
	hub, st := startHub(t, b)
	slow := hub.Subscribe(nil)
	fast := hub.Subscribe(nil)
	name := b.Breaker("a")
	got := 0
	for i := range 300 {
		mode := pb.ForceMode_FORCE_MODE_OPEN
		if i%2 == 1 {
			mode = pb.ForceMode_FORCE_MODE_AUTO
		}
		force(t, st, name, mode)
		select {
		case <-fast.C:
			got++
		case <-time.After(10 * time.Second):
			t.Fatalf("the fast subscriber stopped receiving after %d events", got)
		}
	}
	n := 0
	for range slow.C {
		n++
	}
	if !errors.Is(slow.Err(), events.ErrTooSlow) || n == 0 || n >= 300 {
		t.Errorf("slow subscriber: %d events then %v; want its buffer then ErrTooSlow", n, slow.Err())
	}
}

// When the hub's own Redis connection drops, go-redis subscribes again by
// itself, and what was published meanwhile never reaches the hub. Every
// subscriber is then ended with ErrFeedLost, so no Watch reader goes on
// believing it missed nothing; a subscription made after it gets what
// follows. (A proxy fronts one server: miniredis and the real Redis.)
func TestLostFeedEndsEverySubscription(t *testing.T) {
	for _, server := range []struct {
		name string
		open func(testing.TB) *testredis.Backend
	}{{"miniredis", testredis.Mini}, {"redis", testredis.Real}} {
		t.Run(server.name, func(t *testing.T) {
			b := server.open(t)
			proxy := testredis.NewProxy(t, b.Addr)
			st := store.New(b.Client, store.Options{Channel: b.Prefix + "events", Now: b.Clock()})
			hub := events.NewHub(b.ClientVia(t, proxy.Addr(), nil), st.Channel(), slog.New(slog.NewTextHandler(io.Discard, nil)))
			stop, err := hub.Start(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(stop)
			recv := func(s *events.Subscription) (*pb.Event, bool) {
				t.Helper()
				select {
				case e, ok := <-s.C:
					return e, ok
				case <-time.After(time.Minute): // a bound for a failing run only
					t.Fatal("nothing from the hub")
					return nil, false
				}
			}
			name := b.Breaker("a")
			sub := hub.Subscribe(nil)
			force(t, st, name, pb.ForceMode_FORCE_MODE_OPEN)
			if e, ok := recv(sub); !ok || e.To != pb.State_STATE_FORCED_OPEN {
				t.Fatalf("before the cut: %v, %v; want the forced open", e, ok)
			}
			proxy.Cut()
			force(t, st, name, pb.ForceMode_FORCE_MODE_AUTO) // published while the hub is away
			proxy.Restore(t)
			if e, ok := recv(sub); ok {
				t.Fatalf("after the feed came back: %v; want the subscription ended (the AUTO was never seen)", e)
			}
			if !errors.Is(sub.Err(), events.ErrFeedLost) {
				t.Fatalf("the subscription ended with %v, want ErrFeedLost", sub.Err())
			}
			if n := hub.Streams(); n != 0 {
				t.Errorf("%d subscriptions left after the feed was lost, want 0", n)
			}
			again := hub.Subscribe(nil)
			defer again.Close()
			force(t, st, name, pb.ForceMode_FORCE_MODE_CLOSED)
			if e, ok := recv(again); !ok || e.To != pb.State_STATE_FORCED_CLOSED {
				t.Fatalf("a subscription after the feed came back: %v, %v; want the forced closed", e, ok)
			}
		})
	}
}

// TestStateIsReadOncePerEvent: while clients' streams are open, each
// event carries the state read just after it, read once however many
// streams hear it; with only in-process readers nothing is read.
func TestStateIsReadOncePerEvent(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		hub, st := startHub(t, b)
		var reads atomic.Int64
		hub.SetStateReader(func(ctx context.Context, name string) (*pb.BreakerState, error) {
			reads.Add(1)
			return st.Get(ctx, name)
		})
		a := b.Breaker("a")
		inner := hub.Subscribe([]string{a})
		defer inner.Close()
		force(t, st, a, pb.ForceMode_FORCE_MODE_OPEN)
		if e := <-inner.C; e.GetState() != nil || reads.Load() != 0 {
			t.Fatalf("with no client stream: state %v after %d reads, want none", e.GetState(), reads.Load())
		}
		var streams []*events.Subscription
		for i := range 3 {
			s, err := hub.SubscribeAs(fmt.Sprintf("token%d", i), []string{a})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			streams = append(streams, s)
		}
		force(t, st, a, pb.ForceMode_FORCE_MODE_AUTO)
		for _, s := range streams {
			if e := <-s.C; e.GetState().GetState() != pb.State_STATE_CLOSED {
				t.Errorf("stream's event state = %v, want the state after it (CLOSED)", e.GetState())
			}
		}
		if got := reads.Load(); got != 1 {
			t.Errorf("%d reads for one event heard by 3 streams, want 1", got)
		}
	})
}
