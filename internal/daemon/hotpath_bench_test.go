package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/breakerd/breakerd/internal/tests/otlptest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	"github.com/breakerd/breakerd/internal/tracing"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// BenchmarkPair drives healthy Allow+Record pairs (SUCCESS) through the
// production assembly (Run: metrics interceptor and script hook included)
// from b.RunParallel callers over loopback gRPC, on 1,000 breakers: the
// profile of the daemon's hot path (go test -bench Pair -cpuprofile).
// It uses the Redis at BREAKERD_TEST_REDIS_ADDR when set (healthy
// breakers hold no keys there), else miniredis.
func BenchmarkPair(b *testing.B) {
	benchPair(b, func(string) string { return "" })
}

// BenchmarkPairTraced is BenchmarkPair on daemons tracing off, sampling
// 1 % (parentbased_traceidratio, the callers sending no traceparent) and
// every call, exporting over OTLP/HTTP to an in-process receiver: what
// tracing costs an RPC, in allocations and in process CPU (cpu-ns/op,
// the callers' share the same in each).
func BenchmarkPairTraced(b *testing.B) {
	for _, c := range []struct{ name, sampler, arg string }{
		{"off", "", ""}, {"0.01", "parentbased_traceidratio", "0.01"}, {"1", "parentbased_always_on", ""},
	} {
		b.Run(c.name, func(b *testing.B) {
			endpoint := ""
			if c.sampler != "" {
				endpoint = otlptest.NewHTTP(b).Endpoint // the exporter reads it from the environment
			}
			b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
			b.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", tracing.ProtocolHTTP)
			b.Setenv("OTEL_TRACES_SAMPLER", c.sampler)
			b.Setenv("OTEL_TRACES_SAMPLER_ARG", c.arg)
			benchPair(b, os.Getenv)
		})
	}
}

// benchPair is BenchmarkPair on the daemon getenv configures.
func benchPair(b *testing.B, getenv func(string) string) {
	addr := os.Getenv(testredis.EnvAddr)
	if addr == "" {
		addr = miniredis.RunT(b).Addr()
	}
	cfg, err := ParseConfig([]string{"--listen", "127.0.0.1:0", "--redis-url", "redis://" + addr}, getenv, io.Discard)
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
	b.ReportAllocs()
	cpu0 := processCPU(b)
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
	b.StopTimer()
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// processCPU is the CPU time (user and system) the process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
