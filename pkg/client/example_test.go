package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"time"

	"github.com/breakerd/breakerd/internal/daemon"
	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// startDaemon runs breakerd on an embedded Redis, as `go run ./cmd/breakerd`
// does, and returns its address. Its decision bound is lax: examples run
// among tests on busy machines, where a script slower than the default
// bound would be judged a stall, and its call answered from the daemon's
// memory rather than from Redis.
func startDaemon() (addr string, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	cfg, _ := daemon.ParseConfig([]string{"--listen", "127.0.0.1:0", "--redis-decision-timeout", "10s"},
		func(string) string { return "" }, io.Discard)
	go func() {
		done <- daemon.Run(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), func(a net.Addr) { ready <- a })
	}()
	return (<-ready).String(), func() { cancel(); <-done }
}

func Example() {
	addr, stop := startDaemon()
	defer stop()
	ctx := context.Background()

	// A generous Allow budget (the default is 50ms): examples run among
	// tests on busy machines, and this one means to show breakerd's answers.
	w1, _ := client.Dial(addr, client.WithWorkerID("worker-1"), client.WithAllowBudget(time.Second))
	w2, _ := client.Dial(addr, client.WithWorkerID("worker-2"), client.WithAllowBudget(time.Second))
	defer w1.Close()
	defer w2.Close()

	vendorDown := func(ctx context.Context) error {
		return &client.OutcomeError{Outcome: pb.Outcome_OUTCOME_SERVER_ERROR, Message: "HTTP 503"}
	}
	// Five failures from one worker: no quorum, the circuit stays closed.
	for range 5 {
		_ = w1.Call(ctx, "web_search", vendorDown)
	}
	// One more from a second worker opens it for the whole fleet.
	_ = w2.Call(ctx, "web_search", vendorDown)

	called := false
	err := w1.Call(ctx, "web_search", func(ctx context.Context) error { called = true; return nil })
	var open *client.CircuitOpenError
	if errors.As(err, &open) {
		fmt.Println("called:", called)
		fmt.Println("reason:", open.Reason)
		// The 30s cooldown plus up to 20% jitter, less the time since the
		// trip (seconds, on a busy machine).
		fmt.Println("retry in about 30s:", open.RetryAfter.Seconds() >= 20 && open.RetryAfter.Seconds() <= 36)
	}
	// Output:
	// called: false
	// reason: it is failing: 6 failed calls in a row, last: server error (5xx)
	// retry in about 30s: true
}

func ExampleRun() {
	addr, stop := startDaemon()
	defer stop()
	ctx := context.Background()
	c, _ := client.Dial(addr, client.WithWorkerID("agent-1"), client.WithAllowBudget(time.Second))
	defer c.Close()
	if err := c.Check(ctx); err != nil { // fails now, naming the address, if no breakerd answers there
		log.Fatal(err)
	}

	// An operator takes the payment vendor out of service.
	_, _ = c.API().Force(ctx, &pb.ForceRequest{Breaker: "payments", Mode: pb.ForceMode_FORCE_MODE_OPEN,
		Reason: "vendor maintenance until 14:00 UTC", Operator: "alice"})

	tools := []client.Tool{
		{Name: "web_search", Breaker: "search", Schema: json.RawMessage(`{"type":"object"}`)},
		{Name: "refund_charge", Breaker: "payments", Schema: json.RawMessage(`{"type":"object"}`)},
	}
	run := client.NewRun(c)
	avail, _ := run.Available(ctx, tools) // one BatchGet for the whole toolset
	for _, t := range avail {
		fmt.Println("tool for the model:", t.Name)
	}
	fmt.Println(run.Notice())

	// A removed tool stays removed for the run; calling it anyway is
	// denied without calling the vendor, as a result the model can read.
	err := run.Call(ctx, tools[1], func(ctx context.Context) error { return nil })
	if d, ok := client.AsDenial(err, "refund_charge"); ok {
		fmt.Println(string(d.JSON()))
	}
	// Output:
	// tool for the model: web_search
	// Some tools are out of service and have been removed from your tools for the rest of this task:
	// - refund_charge: forced open by an operator: vendor maintenance until 14:00 UTC. No return time is known.
	// Continue the task with the tools you still have; do not try to call the removed ones. In your final answer, say which parts of the task could not be done because of them.
	// {"status":"forced_open","tool":"refund_charge","reason":"forced open by an operator: vendor maintenance until 14:00 UTC","scope":"breaker","may_return_in_ms":0,"alternatives":[],"forced":true}
}

// A process that runs many agent workers holds one fast-mode client and
// hands each worker a handle: one connection, one Watch stream, one view
// and one outcome queue for all of them. (Compiled, not run: what a fast
// client answers from its view depends on how soon its stream is live.)
func ExampleWithFastMode() {
	ctx := context.Background()
	c, err := client.Dial("127.0.0.1:7070", client.WithWorkerID("host-7"), client.WithFastMode())
	if err != nil {
		panic(err)
	}
	defer c.Close() // flushes the queued outcomes; close it after the handles are done
	searchVendor := func(ctx context.Context) error { return nil }

	for i := range 8 {
		w := c.ForWorker(fmt.Sprintf("host-7/worker-%d", i)) // its own worker id for the quorum
		// Allow is answered from the view (no RPC) once the breaker is
		// known; the outcome is queued, and a healthy success is not sent.
		if err := w.Call(ctx, "web_search", searchVendor); err != nil {
			var open *client.CircuitOpenError
			if errors.As(err, &open) {
				fmt.Println("web_search is open:", open.Reason)
			}
		}
	}
	st := c.Stats()
	fmt.Println("successes not sent:", st.SuccessesSkipped, "outcomes sent:", st.OutcomesSent)
}
