package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
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

// BenchmarkPairHTTP is BenchmarkPair through the HTTP/JSON API (the
// transcoder onto the same gRPC server), keep-alive connections as
// breakerbench's pair-1k-http drives it.
func BenchmarkPairHTTP(b *testing.B) {
	l, stop := startBenchDaemon(b, func(string) string { return "" }, "--http-listen", "127.0.0.1:0")
	defer stop()
	base := "http://" + l.HTTP.String() + "/breakerd.v1.BreakerService/"
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true}}
	defer client.CloseIdleConnections()
	call := func(method string, in, out any) error {
		body, err := json.Marshal(in)
		if err != nil {
			return err
		}
		res, err := client.Post(base+method, "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		defer res.Body.Close()
		data, err := io.ReadAll(res.Body)
		if err != nil {
			return err
		}
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s: %s", method, res.Status, data)
		}
		return json.Unmarshal(data, out)
	}
	runPairs(b, func(name, worker string) error {
		var a struct {
			Ticket json.RawMessage `json:"ticket"`
		}
		if err := call("Allow", map[string]string{"breaker": name, "worker_id": worker}, &a); err != nil {
			return err
		}
		var r struct{}
		return call("Record", map[string]any{"breaker": name, "worker_id": worker, "outcome": "OUTCOME_SUCCESS", "ticket": a.Ticket}, &r)
	})
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
	l, stop := startBenchDaemon(b, getenv)
	defer stop()
	conn, err := grpc.NewClient(l.GRPC.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	api := pb.NewBreakerServiceClient(conn)
	ctx := context.Background()
	runPairs(b, func(name, worker string) error {
		a, err := api.Allow(ctx, &pb.AllowRequest{Breaker: name, WorkerId: worker})
		if err != nil {
			return err
		}
		_, err = api.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: worker, Outcome: pb.Outcome_OUTCOME_SUCCESS, Ticket: a.GetTicket()})
		return err
	})
}

// startBenchDaemon runs the daemon (Run) that getenv and args configure
// on the Redis at BREAKERD_TEST_REDIS_ADDR, else on miniredis, with no
// quota on new breakers and the decision bound of
// BREAKERD_REDIS_DECISION_TIMEOUT when set (a loaded host), until stop.
func startBenchDaemon(b *testing.B, getenv func(string) string, args ...string) (l Listeners, stop func()) {
	addr := os.Getenv(testredis.EnvAddr)
	if addr == "" {
		addr = miniredis.RunT(b).Addr()
	}
	env := func(k string) string {
		if v := getenv(k); v != "" || k != "BREAKERD_REDIS_DECISION_TIMEOUT" {
			return v
		}
		return os.Getenv(k)
	}
	args = append([]string{"--listen", "127.0.0.1:0", "--redis-url", "redis://" + addr, "--new-breakers-per-minute", "0"}, args...)
	cfg, err := ParseConfig(args, env, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan Listeners, 1)
	done := make(chan error, 1)
	go func() {
		done <- RunListeners(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), func(l Listeners) { ready <- l })
	}()
	select {
	case l = <-ready:
	case err := <-done:
		cancel()
		b.Fatalf("Run: %v", err)
	}
	return l, func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("Run: %v", err)
		}
	}
}

// runPairs times pair (an Allow and its Record) from b.RunParallel
// callers (8 per GOMAXPROCS) on 1,000 breakers from 8 workers, and
// reports the process's CPU per pair (cpu-ns/op).
func runPairs(b *testing.B, pair func(name, worker string) error) {
	var next atomic.Int64
	b.SetParallelism(8) // 8 x GOMAXPROCS callers
	b.ReportAllocs()
	cpu0 := processCPU(b)
	b.ResetTimer()
	b.RunParallel(func(pb_ *testing.PB) {
		n := next.Add(1)
		worker := fmt.Sprintf("bench-w%d", n%8)
		for i := n; pb_.Next(); i++ {
			if err := pair(fmt.Sprintf("hotpath-bench-%d", i%1000), worker); err != nil {
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
