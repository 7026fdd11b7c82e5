// Command gopairs measures the Go client (pkg/client, over gRPC) the way
// clients/python/bench/bench.py measures the Python one (over HTTP/JSON),
// against the same daemon in the same run: one caller, Allow+Record
// pairs back to back, and Call around a function that does nothing. It
// prints one JSON object.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gopairs:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("gopairs", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:7070", "breakerd's gRPC address")
	breaker := fs.String("breaker", "bench:go", "the breaker the calls go through")
	d := fs.Duration("duration", 2*time.Second, "time per measurement")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := client.Dial(*addr, client.WithWorkerID("bench-go"), client.WithAllowBudget(2*time.Second))
	if err != nil {
		return err
	}
	defer c.Close()
	ctx := context.Background()
	pair := func() error {
		p, err := c.Allow(ctx, *breaker)
		if err != nil {
			return err
		}
		_, err = c.Record(ctx, p, client.Result{Outcome: pb.Outcome_OUTCOME_SUCCESS})
		return err
	}
	call := func() error { return c.Call(ctx, *breaker, func(context.Context) error { return nil }) }
	out := map[string]float64{}
	for name, f := range map[string]func() error{"pairs_per_s": pair, "call_per_s": call} {
		n, err := rate(f, *d)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		out[name] = n
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

// rate calls f back to back for d and returns the calls per second.
func rate(f func() error, d time.Duration) (float64, error) {
	start := time.Now()
	n := 0
	for time.Since(start) < d {
		if err := f(); err != nil {
			return 0, err
		}
		n++
	}
	return float64(n) / time.Since(start).Seconds(), nil
}
