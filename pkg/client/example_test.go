package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"

	"github.com/breakerd/breakerd/internal/daemon"
	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// startDaemon runs breakerd on an embedded Redis, as `go run ./cmd/breakerd`
// does, and returns its address.
func startDaemon() (addr string, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	cfg, _ := daemon.ParseConfig([]string{"--listen", "127.0.0.1:0"}, func(string) string { return "" }, io.Discard)
	go func() {
		done <- daemon.Run(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), func(a net.Addr) { ready <- a })
	}()
	return (<-ready).String(), func() { cancel(); <-done }
}

func Example() {
	addr, stop := startDaemon()
	defer stop()
	ctx := context.Background()

	w1, _ := client.Dial(addr, client.WithWorkerID("worker-1"))
	w2, _ := client.Dial(addr, client.WithWorkerID("worker-2"))
	defer w1.Close()
	defer w2.Close()

	vendorDown := func(ctx context.Context) error {
		return &client.OutcomeError{Outcome: pb.Outcome_OUTCOME_SERVER_ERROR, Message: "HTTP 503"}
	}
	// Five failures from one worker: no quorum, the circuit stays closed.
	for range 5 {
		_ = w1.Do(ctx, "web_search", vendorDown)
	}
	// One more from a second worker opens it for the whole fleet.
	_ = w2.Do(ctx, "web_search", vendorDown)

	called := false
	err := w1.Do(ctx, "web_search", func(ctx context.Context) error { called = true; return nil })
	var open *client.CircuitOpenError
	if errors.As(err, &open) {
		fmt.Println("called:", called)
		fmt.Println("reason:", open.Reason)
		fmt.Println("retry in about 30s:", open.RetryAfter.Seconds() >= 30 && open.RetryAfter.Seconds() <= 36)
	}
	// Output:
	// called: false
	// reason: web_search unreachable: 6 consecutive failures from 2 workers, last: server error (5xx): HTTP 503
	// retry in about 30s: true
}
