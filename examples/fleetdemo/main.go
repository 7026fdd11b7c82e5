// Command fleetdemo drives the README's demo (scripts/demo.sh): two workers
// on two breakerd daemons that share one Redis trip a breaker together,
// see it denied through either daemon, and after the cooldown race for
// the one probe that closes it again. It prints what happens and the
// transition events it watched.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fleetdemo:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("fleetdemo", flag.ContinueOnError)
	d1 := fs.String("daemon1", "127.0.0.1:7081", "first daemon's address")
	d2 := fs.String("daemon2", "127.0.0.1:7082", "second daemon's address")
	breaker := fs.String("breaker", "web_search", "breaker to trip")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dial := func(addr, worker string) *client.Client {
		c, err := client.Dial(addr, client.WithWorkerID(worker))
		if err != nil {
			panic(err) // grpc.NewClient fails only on a malformed target
		}
		return c
	}
	w1, w2, ops := dial(*d1, "w1"), dial(*d2, "w2"), dial(*d1, "operator")
	defer w1.Close()
	defer w2.Close()
	defer ops.Close()
	fmt.Fprintf(out, "daemon 1 at %s, daemon 2 at %s, one Redis behind both\n", *d1, *d2)

	watch, err := ops.API().Watch(ctx, &pb.WatchRequest{Breakers: []string{*breaker}})
	if err != nil {
		return err
	}
	if _, err := watch.Header(); err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	if _, err := ops.API().Force(ctx, &pb.ForceRequest{Breaker: *breaker, Mode: pb.ForceMode_FORCE_MODE_AUTO, Reason: "demo reset", Operator: "demo"}); err != nil {
		return fmt.Errorf("reset %s: %w", *breaker, err)
	}
	fmt.Fprintf(out, "reset %s to a fresh closed state (Force AUTO)\n", *breaker)

	var seen []*pb.Event
	var mu sync.Mutex
	go func() {
		for {
			m, err := watch.Recv()
			if err != nil {
				return
			}
			if m.GetEvent() == nil {
				continue // a heartbeat
			}
			mu.Lock()
			seen = append(seen, m.GetEvent())
			mu.Unlock()
		}
	}()

	fail := func(c *client.Client, n int) (*pb.BreakerState, error) {
		var st *pb.BreakerState
		for range n {
			p, err := c.Allow(ctx, *breaker)
			if err != nil {
				return nil, err
			}
			r, err := c.Record(ctx, p, client.Result{Outcome: pb.Outcome_OUTCOME_TIMEOUT, Latency: 30 * time.Second})
			if err != nil {
				return nil, err
			}
			st = r.State
		}
		return st, nil
	}
	st, err := fail(w1, 5)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "w1 via daemon 1 records 5 timeouts -> %s (%d failures from %d worker: no quorum)\n", name(st.State), st.Failures, st.DistinctWorkers)
	if st, err = fail(w2, 1); err != nil {
		return err
	}
	fmt.Fprintf(out, "w2 via daemon 2 records 1 timeout  -> %s (%d failures from %d workers)\n", name(st.State), st.Failures, st.DistinctWorkers)

	var wait time.Duration
	for i, c := range []*client.Client{w1, w2} {
		p, err := c.Allow(ctx, *breaker)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "Allow via daemon %d: %s retry_after_ms=%d\n  reason: %q\n", i+1, name(p.Decision), p.RetryAfter.Milliseconds(), p.Reason)
		wait = max(wait, p.RetryAfter)
	}
	fmt.Fprintf(out, "waiting out the cooldown (%s)\n", wait.Round(time.Millisecond))
	time.Sleep(wait + 50*time.Millisecond)

	counts := map[pb.Decision]int{}
	var probe *client.Permit
	var prober *client.Client
	var wg sync.WaitGroup
	clients := make([]*client.Client, 20)
	for i := range clients {
		clients[i] = dial([]string{*d1, *d2}[i%2], fmt.Sprintf("w%d", i+3))
		defer clients[i].Close()
	}
	var errs []error
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := c.Allow(ctx, *breaker)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			counts[p.Decision]++
			if p.Decision == pb.Decision_DECISION_PROBE {
				probe, prober = p, c
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Fprintf(out, "20 concurrent Allows across both daemons: PROBE=%d DENIED_PROBE_IN_FLIGHT=%d other=%d\n",
		counts[pb.Decision_DECISION_PROBE], counts[pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT],
		20-counts[pb.Decision_DECISION_PROBE]-counts[pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT])
	if probe == nil {
		return errors.New("no caller got the probe")
	}
	r, err := prober.Record(ctx, probe, client.Result{Outcome: pb.Outcome_OUTCOME_SUCCESS, Latency: 400 * time.Millisecond})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "the probe (%s) records SUCCESS -> %s\n", prober.WorkerID(), name(r.State.State))

	time.Sleep(200 * time.Millisecond) // let the last event arrive on the stream
	mu.Lock()
	defer mu.Unlock()
	fmt.Fprintf(out, "events seen on Watch (daemon 1):\n")
	for _, e := range seen {
		fmt.Fprintf(out, "  gen %d  %-14s %-9s -> %-9s  by %-3s  cooldown_ms=%d  %s\n", e.Generation, name(e.Kind),
			name(e.From), name(e.To), e.Actor, e.CooldownMs, e.Reason)
	}
	return nil
}

// name shortens an enum value: STATE_HALF_OPEN -> half_open.
func name(v fmt.Stringer) string {
	s := v.String()
	for _, p := range []string{"STATE_", "DECISION_", "EVENT_KIND_"} {
		s = strings.TrimPrefix(s, p)
	}
	return strings.ToLower(s)
}
