package client

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/limits"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestSecurityOpenCachePagesItsList (M4): the open cache seeds itself from a
// paged List, so a daemon that refuses an unpaged List past its cap (here
// 1 breaker, with 3 forced open) still seeds it, and its denials come
// from the cache.
func TestSecurityOpenCachePagesItsList(t *testing.T) {
	t.Parallel()
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
				live = live && c.cache.lookup(n, "agent", c.o.clock.Now(), fresh) != nil
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

// pagedList is a fake breakerd whose Watch subscribes and holds, and whose
// List answers three pages, the first only once half the list timeout has
// passed, recording each page's deadline.
type pagedList struct {
	pb.UnimplementedBreakerServiceServer
	timeout   time.Duration
	mu        sync.Mutex
	deadlines []time.Time
}

func (f *pagedList) Watch(_ *pb.WatchRequest, s pb.BreakerService_WatchServer) error {
	if err := s.SendHeader(nil); err != nil {
		return err
	}
	<-s.Context().Done()
	return nil
}

func (f *pagedList) List(ctx context.Context, req *pb.ListRequest) (*pb.ListResponse, error) {
	d, _ := ctx.Deadline()
	f.mu.Lock()
	f.deadlines = append(f.deadlines, d)
	page := len(f.deadlines)
	f.mu.Unlock()
	if page == 1 {
		// Wait on the deadline itself: past the half, a listing bounded as
		// a whole has less than half its timeout left for the next page.
		select {
		case <-time.After(time.Until(d.Add(-f.timeout / 2))):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	res := &pb.ListResponse{States: []*pb.BreakerState{{Breaker: fmt.Sprintf("b%d", page), State: pb.State_STATE_FORCED_OPEN,
		Denial: &pb.Denial{Decision: pb.Decision_DECISION_DENIED_FORCED_OPEN, Status: "forced_open", Reason: "forced open by an operator"}}}}
	if page < 3 {
		res.NextPageToken = fmt.Sprintf("p%d", page+1)
	}
	return res, nil
}

// TestSecurityOpenCacheBoundsEachPage (M4): the list timeout bounds each
// page of the open cache's List, not the whole listing, so a keyspace that
// takes many pages still seeds the cache.
func TestSecurityOpenCacheBoundsEachPage(t *testing.T) {
	t.Parallel()
	timeout := 2 * time.Second
	f := &pagedList{timeout: timeout}
	c := dial(t, serveFake(t, f), "agent", WithOpenCache(), func(o *options) { o.listTimeout = timeout })
	eventually(t, "the open cache seeded from three pages", func() bool {
		live, _, _ := c.cache.status()
		return live && c.cache.lookup("b3", "agent", c.o.clock.Now(), fresh) != nil
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	if gap := f.deadlines[1].Sub(f.deadlines[0]); gap < timeout/4 {
		t.Errorf("page 2's deadline is %v after page 1's; want each page its own %v", gap, timeout)
	}
}
