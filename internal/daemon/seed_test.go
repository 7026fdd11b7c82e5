package daemon

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// pinnedDaemon is a daemon started, through a proxy, on a Redis of the
// test's own that holds one breaker an operator forced open before.
type pinnedDaemon struct {
	proxy  *testredis.Proxy
	logs   *daemontest.Buffer
	api    pb.BreakerServiceClient
	health healthpb.HealthClient
	name   string // the breaker forced open
}

// startPinned forces a breaker open through another store, then starts
// a daemon (without --metrics-listen) through a proxy; before, when set,
// runs on the proxy first (a fault the daemon starts under).
func startPinned(t *testing.T, before func(*testredis.Proxy)) *pinnedDaemon {
	t.Helper()
	// A Redis of the test's own: the listing reads every breaker it holds.
	b := testredis.Mini(t)
	ctx := context.Background()
	name := b.Breaker("forced")
	other := store.New(b.Client, store.Options{})
	t.Cleanup(other.Close)
	if err := other.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Force(ctx, name, pb.ForceMode_FORCE_MODE_OPEN, "vendor maintenance", 0, "alice"); err != nil {
		t.Fatal(err)
	}
	proxy := testredis.NewProxy(t, b.Addr)
	if before != nil {
		before(proxy)
	}
	c := baseConfig(t)
	c.RedisURL, c.HealthInterval, c.CircuitsInterval = "redis://"+proxy.Addr(), 200*time.Millisecond, 200*time.Millisecond
	logs := &daemontest.Buffer{}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- Run(rctx, c, NewLogger(c, logs), nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	conn := dialRaw(t, c.Listen, "")
	return &pinnedDaemon{proxy: proxy, logs: logs, api: pb.NewBreakerServiceClient(conn), health: healthpb.NewHealthClient(conn), name: name}
}

func (d *pinnedDaemon) allow() (*pb.AllowResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return d.api.Allow(ctx, &pb.AllowRequest{Breaker: d.name, WorkerId: "w1"})
}

// TestDaemonStartedAfterForceKnowsThePin: a daemon started after an
// operator forced a breaker open (through another store), without
// --metrics-listen, denies it from memory once Redis is cut: its
// background listing seeded the pin it never heard.
func TestDaemonStartedAfterForceKnowsThePin(t *testing.T) {
	t.Parallel()
	d := startPinned(t, nil)
	daemontest.Eventually(t, "the daemon to answer from Redis", func() bool {
		a, err := d.allow()
		return err == nil && !a.Degraded
	})
	daemontest.Eventually(t, "the daemon to list its breakers", func() bool { return strings.Contains(d.logs.String(), store.SeededLog) })
	d.proxy.Cut()
	var a *pb.AllowResponse
	daemontest.Eventually(t, "the daemon to answer from memory", func() bool {
		var err error
		a, err = d.allow()
		return err == nil && a.Degraded
	})
	if a.Decision != pb.Decision_DECISION_DENIED_FORCED_OPEN {
		t.Errorf("Allow(forced) from memory = %v, want DENIED_FORCED_OPEN (seeded by the listing)", a.Decision)
	}
}

// TestUnseededDaemonDoesNotAllowAPin: a daemon whose Redis (holding a
// breaker forced open) stalls before its first listing has seeded its
// memory must not answer that breaker from memory, which never heard the
// pin: each Allow fails Unavailable (the clients' fallback, which keeps
// what it heard, decides), health is NOT_SERVING, the log says so, and
// none is allowed. Once Redis answers, Redis denies it.
func TestUnseededDaemonDoesNotAllowAPin(t *testing.T) {
	testredis.StallTier(t)
	d := startPinned(t, func(p *testredis.Proxy) { p.Stall() })
	daemontest.Eventually(t, "the daemon to take the stalled Redis for an outage", func() bool {
		return strings.Contains(d.logs.String(), "redis unreachable")
	})
	for i := 0; i < 20; i++ {
		a, err := d.allow()
		if err == nil {
			t.Fatalf("Allow(forced) %d with Redis stalled before the listing = %v (degraded %v), want Unavailable", i, a.GetDecision(), a.GetDegraded())
		}
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("Allow(forced) %d = %v, want Unavailable", i, err)
		}
	}
	res, err := d.health.Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || res.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health with unseeded memory and Redis stalled = %v, %v; want NOT_SERVING", res.GetStatus(), err)
	}
	if l := d.logs.String(); strings.Contains(l, "answering for its breakers from this daemon's in-memory breakers") {
		t.Errorf("the log says the daemon answers from memory, which it does not:\n%s", l)
	}

	d.proxy.Restore(t)
	daemontest.Eventually(t, "Redis to deny the forced breaker", func() bool {
		a, err := d.allow()
		return err == nil && !a.Degraded && a.Decision == pb.Decision_DECISION_DENIED_FORCED_OPEN
	})
}
