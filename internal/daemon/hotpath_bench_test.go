package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// BenchmarkPair drives healthy Allow+Record pairs (SUCCESS) through the
// production assembly (Run: metrics interceptor and script hook included)
// from b.RunParallel callers over loopback gRPC, on 1,000 breakers: the
// profile of the daemon's hot path (go test -bench Pair -cpuprofile).
// It uses the Redis at BREAKERD_TEST_REDIS_ADDR when set (healthy
// breakers hold no keys there), else miniredis.
func BenchmarkPair(b *testing.B) {
	addr := os.Getenv(testredis.EnvAddr)
	if addr == "" {
		addr = miniredis.RunT(b).Addr()
	}
	cfg, err := ParseConfig([]string{"--listen", "127.0.0.1:0", "--redis-url", "redis://" + addr}, func(string) string { return "" }, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), func(a net.Addr) { ready <- a })
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("Run: %v", err)
		}
	}()
	conn, err := grpc.NewClient((<-ready).String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	api := pb.NewBreakerServiceClient(conn)
	var next atomic.Int64
	b.SetParallelism(8) // 8 x GOMAXPROCS callers
	b.ResetTimer()
	b.RunParallel(func(pb_ *testing.PB) {
		n := next.Add(1)
		worker := fmt.Sprintf("bench-w%d", n%8)
		for i := n; pb_.Next(); i++ {
			name := fmt.Sprintf("hotpath-bench-%d", i%1000)
			a, err := api.Allow(ctx, &pb.AllowRequest{Breaker: name, WorkerId: worker})
			if err != nil {
				b.Error(err)
				return
			}
			if _, err := api.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: worker, Outcome: pb.Outcome_OUTCOME_SUCCESS, Ticket: a.GetTicket()}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
