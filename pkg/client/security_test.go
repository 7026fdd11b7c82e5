package client

import (
	"context"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/daemontest"
	"github.com/breakerd/breakerd/internal/limits"
	"github.com/breakerd/breakerd/internal/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestSecurityM4OpenCachePagesItsList: the open cache seeds itself from a
// paged List, so a daemon that refuses an unpaged List past its cap (here
// 1 breaker, with 3 forced open) still seeds it, and its denials come
// from the cache.
func TestSecurityM4OpenCachePagesItsList(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := daemontest.StartWith(t, b, daemontest.Options{Store: withAlternatives(), Listener: limits.Listener{ListMaxUnpaged: 1}})
		op := dial(t, d.Addr, "op")
		ctx := context.Background()
		names := []string{b.Breaker("p1"), b.Breaker("p2"), b.Breaker("p3")}
		for _, n := range names {
			if _, err := op.API().Force(ctx, &pb.ForceRequest{Breaker: n, Mode: pb.ForceMode_FORCE_MODE_OPEN, Reason: "drill"}); err != nil {
				t.Fatal(err)
			}
		}
		c := dial(t, d.Addr, "agent", WithOpenCache(), WithClock(newFakeClock()), WithReconnectInterval(20*time.Millisecond))
		eventually(t, "the open cache seeded from a paged List", func() bool {
			live, _, _ := c.cache.status()
			for _, n := range names {
				live = live && c.cache.lookup(n, "agent", c.o.clock.Now()) != nil
			}
			return live
		})
		allows := d.Calls.Get("Allow")
		for _, n := range names {
			if p, err := c.Allow(ctx, n); err != nil || !p.Cached || p.Decision != pb.Decision_DECISION_DENIED_FORCED_OPEN {
				t.Errorf("Allow(%q) = %+v, %v; want a cached DENIED_FORCED_OPEN", n, p, err)
			}
		}
		if got := d.Calls.Get("Allow") - allows; got != 0 {
			t.Errorf("cached denials cost %d Allow RPCs, want 0", got)
		}
	})
}
