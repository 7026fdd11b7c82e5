// Command outage-replay replays a real outage against breakerd and prints
// what each way of guarding an agent's tool calls cost: a search vendor
// down for 22 minutes while a research agent ran 340 times, with no
// breaker, with per-run breakers, and with breakerd's fleet-wide breaker.
// Time is scaled down (--scale); every figure is a flag whose default is
// the incident's.
//
//	go run ./cmd/outage-replay                 # an in-process breakerd on an embedded Redis
//	go run ./cmd/outage-replay --redis-url redis://127.0.0.1:6379/0
//	go run ./cmd/outage-replay --print-policy > replay.yaml
//	go run ./cmd/breakerd --config replay.yaml &
//	go run ./cmd/outage-replay --addr 127.0.0.1:7070
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/breakerd/breakerd/internal/replay"
)

func main() {
	err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "outage-replay:", err)
		os.Exit(1)
	}
}

const usageHead = `Usage: outage-replay [flags]

Replays a search vendor's outage against breakerd: runs arrive evenly over
the outage, a fake vendor on loopback fails every request during it and
succeeds after, and a scripted model calls web_search in five arms (no
breaker; per-run breaker failing fast; per-run breaker removing the tool;
breakerd fleet-wide removing the tool; breakerd fleet-wide failing fast).
Every duration is incident time, divided by --scale when replayed.

With no --addr it runs breakerd in-process (on --redis-url, or an embedded
in-memory Redis) with the policy it needs. With --addr, that daemon's
policy is its own: start it with the file --print-policy prints (the same
flags, notably --scale, must be given to both), or its cooldowns are not
the replay's and the replay says so and fails.

Flags:
`

// run parses args, replays, and prints the table to stdout.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, printPolicy, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if printPolicy {
		_, err := io.WriteString(stdout, cfg.PolicyYAML())
		return err
	}
	rep, err := replay.Replay(ctx, cfg)
	if err != nil {
		return err
	}
	if err := rep.Print(stdout); err != nil {
		return err
	}
	return rep.Err()
}

// parseFlags reads the flags into a Config, validated.
func parseFlags(args []string, usage io.Writer) (cfg replay.Config, printPolicy bool, err error) {
	cfg = replay.Default()
	fs := flag.NewFlagSet("outage-replay", flag.ContinueOnError)
	fs.SetOutput(usage)
	fs.Usage = func() {
		fmt.Fprint(usage, usageHead)
		fs.PrintDefaults()
	}
	fs.IntVar(&cfg.Runs, "runs", cfg.Runs, "agent runs arriving evenly over the outage")
	fs.DurationVar(&cfg.Outage, "outage", cfg.Outage, "how long the vendor fails every request")
	fs.DurationVar(&cfg.ArriveWithin, "arrive-within", cfg.ArriveWithin, "the span from the outage's start over which the runs arrive; 0: the outage less one failing run (every run fails through, as in the incident)")
	fs.IntVar(&cfg.Steps, "steps", cfg.Steps, "the model's step budget per run")
	fs.IntVar(&cfg.SearchStep, "search-step", cfg.SearchStep, "the first step at which the model calls web_search")
	fs.IntVar(&cfg.LastSearchStep, "last-search-step", cfg.LastSearchStep, "the last step at which a model without results or a notice calls web_search again")
	fs.IntVar(&cfg.Attempts, "attempts", cfg.Attempts, "HTTP attempts per web_search call")
	fs.DurationVar(&cfg.CallTime, "call-time", cfg.CallTime, "how long a failing web_search call takes, its attempts evenly spaced")
	fs.DurationVar(&cfg.StepTime, "step-time", cfg.StepTime, "how long one model step takes")
	fs.Float64Var(&cfg.StepPrice, "step-price", cfg.StepPrice, "model spend per step, in dollars")
	fs.IntVar(&cfg.Threshold, "threshold", cfg.Threshold, "consecutive failures that open a breaker (per-run and fleet)")
	fs.IntVar(&cfg.Quorum, "quorum", cfg.Quorum, "distinct workers the fleet breaker's failures must come from")
	fs.DurationVar(&cfg.CooldownBase, "cooldown", cfg.CooldownBase, "first open period; doubles after each failed probe")
	fs.DurationVar(&cfg.CooldownCap, "cooldown-cap", cfg.CooldownCap, "the cooldown's cap")
	fs.Float64Var(&cfg.Jitter, "jitter", cfg.Jitter, "breakerd's jitter: up to this fraction added to each fleet cooldown")
	fs.DurationVar(&cfg.ProbeTimeout, "probe-timeout", cfg.ProbeTimeout, "the fleet probe's lease; should exceed --call-time, or a failing probe's lease lapses before it records")
	fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "worker ids the fleet arms spread their runs over")
	fs.DurationVar(&cfg.Tail, "tail", cfg.Tail, "how long past the outage runs keep arriving while a fleet breaker is still open")
	fs.Float64Var(&cfg.Scale, "scale", cfg.Scale, "time divisor: 60 replays a minute in a second")
	fs.StringVar(&cfg.Addr, "addr", "", "an external breakerd (host:port); empty: one in-process")
	fs.StringVar(&cfg.RedisURL, "redis-url", os.Getenv("BREAKERD_REDIS_URL"), "the in-process breakerd's Redis (env BREAKERD_REDIS_URL); empty: an embedded in-memory Redis")
	fs.BoolVar(&printPolicy, "print-policy", false, "print the breakerd policy file an external daemon needs for these flags, and exit")
	if err := fs.Parse(args); err != nil {
		return cfg, false, err
	}
	if fs.NArg() > 0 {
		return cfg, false, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return cfg, printPolicy, cfg.Validate()
}
