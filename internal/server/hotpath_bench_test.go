package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/events"
	"github.com/breakerd/breakerd/internal/server"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// BenchmarkHandlers calls the server's Allow and Record handlers in
// process (no gRPC), as the daemon assembles them (a store and an event
// hub), on 1,000 healthy breakers from 8 workers: what the handlers cost
// per call beside Redis (go test -bench Handlers -benchmem, with
// -cpuprofile or -memprofile). It uses the Redis at
// BREAKERD_TEST_REDIS_ADDR when set (healthy breakers hold no keys
// there), else miniredis, whose work then counts in the figures.
func BenchmarkHandlers(b *testing.B) {
	addr := os.Getenv(testredis.EnvAddr)
	if addr == "" {
		addr = miniredis.RunT(b).Addr()
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	st := store.New(rdb, store.Options{})
	defer st.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := st.Load(ctx); err != nil {
		b.Fatal(err)
	}
	hub := events.NewHub(rdb, st.Channel(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	go func() { _ = hub.Run(ctx, nil) }()
	srv := server.New(st, hub)
	prefix := fmt.Sprintf("handlers-bench-%d/", os.Getpid())
	name := func(i int) string { return fmt.Sprintf("%sb%04d", prefix, i%1000) }
	worker := func(i int) string { return fmt.Sprintf("bench-w%d", i%8) }
	b.Run("Allow", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := srv.Allow(ctx, &pb.AllowRequest{Breaker: name(i), WorkerId: worker(i)}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Record", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := srv.Record(ctx, &pb.RecordRequest{Breaker: name(i), WorkerId: worker(i), Ticket: &pb.Ticket{},
				Outcome: pb.Outcome_OUTCOME_SUCCESS}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Pair", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			a, err := srv.Allow(ctx, &pb.AllowRequest{Breaker: name(i), WorkerId: worker(i)})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := srv.Record(ctx, &pb.RecordRequest{Breaker: name(i), WorkerId: worker(i), Ticket: a.GetTicket(),
				Outcome: pb.Outcome_OUTCOME_SUCCESS}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
