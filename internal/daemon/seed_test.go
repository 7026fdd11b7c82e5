package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestDaemonStartedAfterForceKnowsThePin: a daemon started after an
// operator forced a breaker open (through another store), without
// --metrics-listen, denies it from memory once Redis is cut: its
// background listing seeded the pin it never heard.
func TestDaemonStartedAfterForceKnowsThePin(t *testing.T) {
	// A Redis of the test's own: the listing reads every breaker it holds,
	// and on a shared one a busy host's listing can outlast each try below.
	b := testredis.Mini(t)
	ctx := context.Background()
	name := b.Breaker("forced")
	other := store.New(b.Client, store.Options{})
	defer other.Close()
	if err := other.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Force(ctx, name, pb.ForceMode_FORCE_MODE_OPEN, "vendor maintenance", 0, "alice"); err != nil {
		t.Fatal(err)
	}
	proxy := testredis.NewProxy(t, b.Addr)
	c := baseConfig(t)
	c.RedisURL, c.HealthInterval, c.CircuitsInterval = "redis://"+proxy.Addr(), 200*time.Millisecond, 200*time.Millisecond
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- Run(rctx, c, NewLogger(c, &daemontest.Buffer{}), nil) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	api := pb.NewBreakerServiceClient(dialRaw(t, c.Listen, ""))
	allow := func() (*pb.AllowResponse, error) {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		defer ccancel()
		return api.Allow(cctx, &pb.AllowRequest{Breaker: name, WorkerId: "w1"})
	}
	daemontest.Eventually(t, "the daemon to answer from Redis", func() bool {
		a, err := allow()
		return err == nil && !a.Degraded
	})
	// The start-up listing runs in the background: until it has seeded the
	// pin, a cut may find memory without it; then Redis is given back and
	// the cut tried again. Without the listing it never is denied.
	daemontest.Eventually(t, "the forced breaker to be denied from memory with Redis cut", func() bool {
		proxy.Cut()
		var a *pb.AllowResponse
		daemontest.Eventually(t, "the daemon to answer from memory", func() bool {
			var err error
			a, err = allow()
			return err == nil && a.Degraded
		})
		if a.Decision == pb.Decision_DECISION_DENIED_FORCED_OPEN {
			return true
		}
		proxy.Restore(t)
		daemontest.Eventually(t, "the daemon to answer from Redis again", func() bool {
			a, err := allow()
			return err == nil && !a.Degraded
		})
		return false
	})
}
