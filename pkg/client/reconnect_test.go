package client

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// timerClock is a fakeClock with After: a wait ends only when Advance
// moves the clock to it.
type timerClock struct {
	*fakeClock
	mu    sync.Mutex
	waits []timerWait
}

type timerWait struct {
	at time.Time
	ch chan time.Time
}

func (c *timerClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waits = append(c.waits, timerWait{at: c.Now().Add(d), ch: ch})
	return ch
}

// Advance moves the clock by d and ends the waits it reaches.
func (c *timerClock) Advance(d time.Duration) {
	c.fakeClock.Advance(d)
	now := c.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	left := c.waits[:0]
	for _, w := range c.waits {
		if w.at.After(now) {
			left = append(left, w)
			continue
		}
		w.ch <- now
	}
	c.waits = left
}

func (c *timerClock) waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waits)
}

// downDaemon answers every Allow Unavailable and every health check
// NOT_SERVING, counting the checks: the wire is the witness.
type downDaemon struct {
	pb.UnimplementedBreakerServiceServer
	checks atomic.Int64
}

// downHealth is downDaemon's health service.
type downHealth struct {
	healthpb.UnimplementedHealthServer
	d *downDaemon
}

func (d *downDaemon) Allow(context.Context, *pb.AllowRequest) (*pb.AllowResponse, error) {
	return nil, status.Error(codes.Unavailable, "redis unavailable")
}

func (h downHealth) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.d.checks.Add(1)
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
}

// TestReconnectBacksOff: once no daemon answers, the whole client
// checks health on the schedule a hung daemon is passed over by (1 s,
// doubling to 30 s), timed on the client's clock: counted at a fake
// daemon, no check before each wait ends, exactly one at its end.
func TestReconnectBacksOff(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &downDaemon{}
	g := grpc.NewServer()
	pb.RegisterBreakerServiceServer(g, d)
	healthpb.RegisterHealthServer(g, downHealth{d: d})
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)

	clk := &timerClock{fakeClock: newFakeClock()}
	c := dial(t, lis.Addr().String(), "agent", WithClock(clk))
	ctx := context.Background()
	eventually(t, "the client to find no daemon answering", func() bool {
		_, _ = c.Allow(ctx, "search")
		_, down := c.Unreachable()
		return down
	})
	for i, wait := range []time.Duration{1, 2, 4, 8, 16, 30, 30} {
		wait *= time.Second
		eventually(t, "the client to wait for its next health check", func() bool { return clk.waiting() == 1 })
		before := d.checks.Load()
		if before != int64(i) {
			t.Fatalf("health checks before wait %d = %d, want %d", i, before, i)
		}
		clk.Advance(wait - time.Millisecond)
		if n := clk.waiting(); n != 1 {
			t.Fatalf("wait %d (%s) ended %s early: %d waits left", i, wait, time.Millisecond, n)
		}
		clk.Advance(time.Millisecond)
		eventually(t, "the health check at the end of the wait", func() bool { return d.checks.Load() == before+1 })
	}
}
