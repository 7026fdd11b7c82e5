package store_test

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestHealthyPairCost: an Allow and a SUCCESS Record on a healthy breaker
// cost at most 4 Redis commands, those the scripts run included (EVALSHA
// and HGETALL each: no TIME, no SCARD), in one round trip per call.
// Counted with INFO commandstats on a Redis server of the test's own, so
// that no other test's commands are counted.
func TestHealthyPairCost(t *testing.T) {
	t.Parallel()
	testredis.Real(t) // the real-Redis tier: skipped, with the reason, when it is not configured
	addr := ownRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	st := store.New(rdb, store.Options{})
	ctx := context.Background()
	if err := st.Load(ctx); err != nil {
		t.Fatal(err)
	}
	const pairs = 100
	// One pair first opens the connections (each costs a HELLO), so that
	// only the pairs' own commands are counted.
	if _, err := st.Allow(ctx, "warm-up", "w1"); err != nil {
		t.Fatal(err)
	}
	before := commandCalls(t, rdb)
	for i := range pairs {
		name := fmt.Sprintf("b%d", i%10)
		a, err := st.Allow(ctx, name, "w1")
		if err != nil || a.Decision != pb.Decision_DECISION_ALLOWED {
			t.Fatalf("Allow = %v, %v", a, err)
		}
		if _, err := st.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: "w1", Ticket: a.Ticket,
			Outcome: pb.Outcome_OUTCOME_SUCCESS}); err != nil {
			t.Fatal(err)
		}
	}
	after := commandCalls(t, rdb)
	total := 0
	for cmd, n := range after {
		if d := n - before[cmd]; d > 0 && cmd != "info" {
			total += d
			t.Logf("%s: %.2f per pair", cmd, float64(d)/pairs)
		}
	}
	if perPair := float64(total) / pairs; perPair > 4 {
		t.Errorf("a healthy Allow+Record pair costs %.2f Redis commands, want at most 4", perPair)
	}
	if n, _ := rdb.DBSize(ctx).Result(); n != 0 {
		t.Errorf("healthy breakers left %d keys, want none", n)
	}
}

// ownRedis starts a redis-server on a free loopback port for this test.
func ownRedis(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("the real-Redis tier needs redis-server on PATH: %v", err)
	}
	addr := testredis.FreeAddr(t)
	_, port, _ := strings.Cut(addr, ":")
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	for i := 0; c.Ping(context.Background()).Err() != nil; i++ {
		if i > 500 {
			t.Fatalf("redis-server on %s did not answer", addr)
		}
		time.Sleep(10 * time.Millisecond) // waiting for a process to start, not for time to pass
	}
	return addr
}

// commandCalls reads INFO commandstats: calls per command.
func commandCalls(t *testing.T, rdb *redis.Client) map[string]int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, _ := strconv.Atoi(calls)
		out[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return out
}
