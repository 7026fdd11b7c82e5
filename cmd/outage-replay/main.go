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
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/breakerd/breakerd/cmd/outage-replay/replay"
	"github.com/breakerd/breakerd/internal/cli"
)

func main() {
	err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdout)
	os.Exit(cli.Exit("outage-replay", err, os.Stderr))
}

const help = `Replays a search vendor's outage against breakerd: runs arrive evenly over
the outage, a fake vendor on loopback fails every request during it and
succeeds after, and a scripted model calls web_search in five arms (no
breaker; per-run breaker failing fast; per-run breaker removing the tool;
breakerd fleet-wide removing the tool; breakerd fleet-wide failing fast).
--recovery-check, --window and --slow-outage add arms 6, 7 and 8: arm 4
with a recovery check, counting the failure rate in a window (try it with
--fail-rate 0.3, a partial outage), and counting slow calls (the vendor
answers slowly rather than failing).
Every duration is incident time, divided by --scale when replayed.

With no --addr it runs breakerd in-process (on --redis-url, or an embedded
in-memory Redis) with the policy it needs. With --addr, that daemon's
policy is its own: start it with the file --print-policy prints (the same
flags, notably --scale, must be given to both), or its cooldowns are not
the replay's and the replay says so and fails.
`

// run parses args (without the program name; the environment through
// getenv), replays, and prints the table to stdout.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, printPolicy, sweep, err := parseFlags(args, getenv, stdout)
	if err != nil {
		return err
	}
	if sweep != nil {
		rows, err := replay.Sweep(ctx, cfg, sweep, os.Stderr)
		if err != nil {
			return err
		}
		return replay.PrintSweep(stdout, cfg, rows)
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

// parseFlags reads the flags into a Config, validated. --help and
// --version print to stdout and return cli.ErrHelp.
func parseFlags(args []string, getenv func(string) string, stdout io.Writer) (cfg replay.Config, printPolicy bool, sweep []time.Duration, err error) {
	cfg = replay.Default()
	var sweepList string
	none := "-" // the replay's figures are flags only
	cmd := cli.Command{Name: "outage-replay", Synopsis: "[flags]", Help: help, Flags: []cli.Flag{
		{Name: "runs", Value: &cfg.Runs, Usage: "agent runs arriving evenly over the outage", Env: none},
		{Name: "outage", Value: &cfg.Outage, Usage: "how long the vendor fails every request", Env: none},
		{Name: "arrive-within", Value: &cfg.ArriveWithin, Usage: "the span from the outage's start over which the runs arrive; 0: the outage less one failing run (every run fails through, as in the incident)", Env: none},
		{Name: "steps", Value: &cfg.Steps, Usage: "the model's step budget per run", Env: none},
		{Name: "search-step", Value: &cfg.SearchStep, Usage: "the first step at which the model calls web_search", Env: none},
		{Name: "last-search-step", Value: &cfg.LastSearchStep, Usage: "the last step at which a model without results or a notice calls web_search again", Env: none},
		{Name: "attempts", Value: &cfg.Attempts, Usage: "HTTP attempts per web_search call", Env: none},
		{Name: "call-time", Value: &cfg.CallTime, Usage: "how long a failing web_search call takes, its attempts evenly spaced", Env: none},
		{Name: "step-time", Value: &cfg.StepTime, Usage: "how long one model step takes", Env: none},
		{Name: "step-price", Value: &cfg.StepPrice, Usage: "model spend per step, in dollars", Env: none},
		{Name: "threshold", Value: &cfg.Threshold, Usage: "consecutive failures that open a breaker (per-run and fleet)", Env: none},
		{Name: "quorum", Value: &cfg.Quorum, Usage: "distinct workers the fleet breaker's failures must come from", Env: none},
		{Name: "cooldown", Value: &cfg.CooldownBase, Usage: "first open period; doubles after each failed probe", Env: none},
		{Name: "cooldown-cap", Value: &cfg.CooldownCap, Usage: "the cooldown's cap", Env: none},
		{Name: "jitter", Value: &cfg.Jitter, Usage: "breakerd's jitter: up to this fraction added to each fleet cooldown", Env: none},
		{Name: "probe-timeout", Value: &cfg.ProbeTimeout, Usage: "the fleet probe's lease; should exceed --call-time, or a failing probe's lease lapses before it records", Env: none},
		{Name: "workers", Value: &cfg.Workers, Usage: "worker ids the fleet arms spread their runs over", Env: none},
		{Name: "tail", Value: &cfg.Tail, Usage: "how long past the outage runs keep arriving while a fleet breaker is still open", Env: none},
		{Name: "scale", Value: &cfg.Scale, Usage: "time divisor: 60 replays a minute in a second", Env: none},
		{Name: "addr", Value: &cfg.Addr, Usage: "an external breakerd (host:port); empty: one in-process", Env: none},
		{Name: "redis-url", Value: &cfg.RedisURL, Usage: "the in-process breakerd's Redis; empty: an embedded in-memory Redis", Env: "BREAKERD_REDIS_URL"},
		{Name: "recovery-check", Value: &cfg.RecoveryCheck, Usage: "give the fake vendor a status endpoint that follows the outage, and add arm 6: arm 4 with a recovery check of it this often (0: no arm 6; needs the in-process daemon)", Env: none},
		{Name: "fail-rate", Value: &cfg.FailRate, Usage: "the share of web_search calls that fail during the outage (1: every request, as in the incident; 0.3: a partial outage that consecutive counting rarely trips on)", Env: none},
		{Name: "window", Value: &cfg.Window, Usage: "add arm 7: arm 4 counting the failure rate over a window this long (breakerd's mode: window; at least 6s after --scale; 0: no arm 7)", Env: none},
		{Name: "window-rate", Value: &cfg.WindowRate, Usage: "arm 7's failure_rate: the share of a window's calls that must fail to trip", Env: none},
		{Name: "window-min-calls", Value: &cfg.WindowMinCalls, Usage: "arm 7's min_calls: the calls a window must hold before its rate counts", Env: none},
		{Name: "slow-outage", Value: &cfg.SlowOutage, Usage: "make the outage slow: every web_search call answers, each after this long, and add arm 8: arm 4 counting slow calls (0: the vendor fails)", Env: none},
		{Name: "slow-call", Value: &cfg.SlowCall, Usage: "arm 8's slow_call: a success that took longer is slow (its slow_call_threshold is --threshold)", Env: none},
		{Name: "sweep-outage", Value: &sweepList, Usage: "comma-separated outage lengths (such as 18m,20m,22m): replay arm 4 without and with a recovery check (every --recovery-check, or 30s when that is 0) at each, and print the lag table", Env: none},
		{Name: "print-policy", Value: &printPolicy, Usage: "print the breakerd policy file an external daemon needs for these flags, and exit", Env: none},
	}}
	if _, err := cmd.Parse(args, getenv, stdout); err != nil {
		return cfg, false, nil, err
	}
	if sweepList != "" {
		for _, f := range strings.Split(sweepList, ",") {
			d, err := time.ParseDuration(strings.TrimSpace(f))
			if err != nil || d <= 0 {
				return cfg, false, nil, cli.Usagef("--sweep-outage: %q is not a positive duration such as 22m", f)
			}
			sweep = append(sweep, d)
		}
		if cfg.RecoveryCheck == 0 {
			cfg.RecoveryCheck = replay.DefaultSweepCheck
		}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, false, nil, &cli.UsageError{Err: err}
	}
	return cfg, printPolicy, sweep, nil
}
