package daemon

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestStalledRedisIsLoggedOnceEachWay: the real assembly on a Redis whose
// link stalls (a proxy that forwards nothing, connections kept open),
// with its health check polling through the stall. Callers with a
// deadline of seconds are answered from memory after at most
// OutageTimeouts-1 failures (a failure that found the daemon late aside),
// none past their deadline; the log says the truth once each way (one
// "unreachable" line, one "answers again"), and never that the daemon
// answers from memory while it does not; the outage's line says what
// began it.
func TestStalledRedisIsLoggedOnceEachWay(t *testing.T) {
	testredis.StallTier(t)
	b := testredis.Real(t)
	proxy := testredis.NewProxy(t, b.Addr)
	// baseConfig's health interval (1s), which bounds each check too: a
	// shorter one lets a busy host's slow check begin an outage of its own.
	c := baseConfig(t)
	c.RedisURL = "redis://" + proxy.Addr()
	logs := &daemontest.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, c, NewLogger(c, logs), nil) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}
	defer stop()
	api := pb.NewBreakerServiceClient(dialRaw(t, c.Listen, ""))
	name := b.Breaker("search")
	allow := func() (*pb.AllowResponse, error) {
		cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer ccancel()
		return api.Allow(cctx, &pb.AllowRequest{Breaker: name, WorkerId: "w1"})
	}
	daemontest.Eventually(t, "the daemon to answer from Redis", func() bool {
		a, err := allow()
		return err == nil && !a.Degraded
	})
	daemontest.Eventually(t, "the daemon to list its breakers (its memory seeded)", func() bool {
		return strings.Contains(logs.String(), store.SeededLog)
	})

	proxy.Stall()
	var failed []string
	for i := 0; ; i++ {
		if i == 50 {
			t.Fatalf("no Allow answered from memory in 50 calls through the stall (%d failed)\n%s", len(failed), logs)
		}
		a, err := allow()
		if status.Code(err) == codes.DeadlineExceeded {
			t.Fatalf("Allow %d in the stall outlived its caller's deadline: %v", i+1, err)
		}
		if err != nil {
			// A failure that found this daemon late is no news of Redis
			// and begins no outage (a busy host): not counted.
			if !strings.Contains(status.Convert(err).Message(), store.LateWords) {
				failed = append(failed, err.Error())
			}
			continue
		}
		if a.Degraded {
			break
		}
	}
	if len(failed) > store.OutageTimeouts-1 {
		t.Errorf("%d Allows failed before the stall was taken as an outage, want at most %d:\n%s\n%s",
			len(failed), store.OutageTimeouts-1, strings.Join(failed, "\n"), logs)
	}
	proxy.Restore(t)
	daemontest.Eventually(t, "the daemon to answer from Redis again", func() bool {
		a, err := allow()
		return err == nil && !a.Degraded
	})
	stop()
	out := logs.String()
	for line, want := range map[string]int{
		"redis unreachable": 1, "redis answers again": 1, "redis ready": 1, "health check failed": 0,
	} {
		if n := strings.Count(out, line); n != want {
			t.Errorf("%d log lines say %q, want %d:\n%s", n, line, want, out)
		}
	}
	if _, line, _ := strings.Cut(out, "redis unreachable"); !strings.Contains(strings.SplitN(line, "\n", 2)[0], "err=") {
		t.Errorf("the outage's line does not say what began it (err=):\n%s", out)
	}
}
