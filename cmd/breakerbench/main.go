// Command breakerbench measures breakerd on loopback, in one invocation:
// the ceiling (a gRPC no-op and a gRPC handler running one EVALSHA),
// breakerd's Allow, Record and pairs through raw stubs and pkg/client, a
// denial, the peer (sony/gobreaker v2 on the same Redis), and how long a
// trip on one daemon takes to reach clients of another. It starts its own
// redis-server and daemons; see docs/performance.md. --fleet simulates a
// fleet of fast-mode workers instead (docs/scale.md).
//
//	go run ./cmd/breakerbench --quick
//	go run ./cmd/breakerbench --memory
//	go run ./cmd/breakerbench --fleet --quick
//
// Exit status: 0 after a run (or --help, --version); 2 on a usage error
// (a bad flag or value); 1 when the run could not be carried out.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/breakerd/breakerd/cmd/breakerbench/bench"
	"github.com/breakerd/breakerd/internal/buildinfo"
	"github.com/breakerd/breakerd/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	os.Exit(cli.Exit("breakerbench", err, os.Stderr))
}

// run parses args (without the program name) and runs the bench, the
// memory measurement with --memory, or the fleet simulation with --fleet,
// writing the report to stdout. --help and --version print to stdout and
// return cli.ErrHelp; a bad command line is a *cli.UsageError.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	o := bench.Defaults()
	m := bench.DefaultMemoryOptions()
	f := bench.DefaultFleet()
	fs := pflag.NewFlagSet("breakerbench", pflag.ContinueOnError)
	fs.SetOutput(io.Discard) // run reports errors itself, as a *cli.UsageError
	version := fs.Bool("version", false, "print the version, commit and Go version, and exit")
	quick := fs.Bool("quick", false, "a short run (3 rounds of 0.5s per scenario; under 2 minutes)")
	serve := fs.String("serve", "", "internal: serve one server (daemon, ceiling, noop) for the bench's own child process")
	_ = fs.MarkHidden("serve")
	memory := fs.Bool("memory", false, "measure Redis memory per open breaker and per failure run instead")
	fs.StringVar(&o.RedisAddr, "redis-addr", "", "a loopback Redis to use (host:port); empty: start redis-server on a free port")
	fs.StringVar(&o.RedisServer, "redis-server", o.RedisServer, "the redis-server binary to start")
	fs.IntVar(&o.Rounds, "rounds", o.Rounds, "interleaved rounds")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "time per scenario per round")
	fs.Int64Var(&o.MaxCalls, "max-calls", o.MaxCalls, "most ops per scenario per round")
	fs.IntVar(&o.Callers, "callers", o.Callers, "concurrent callers")
	fs.IntVar(&o.Breakers, "breakers", o.Breakers, "breakers the spread scenarios cycle over")
	fs.IntVar(&o.PeerBreakers, "peer-breakers", o.PeerBreakers, "separate breakers in the peer's spread scenario")
	fs.IntVar(&o.WirePass, "wire-pass", o.WirePass, "sequential ops per scenario through the round-trip-counting proxy")
	fs.IntVar(&o.Trips, "trips", o.Trips, "trips timed per round (0: none)")
	fs.IntVar(&o.Pollers, "pollers", o.Pollers, "clients of the second daemon polling Allow during a trip")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write the measured daemon's pprof CPU profile (its child process's whole life) to this file")
	fs.StringSliceVar(&o.Only, "only", nil, "run only scenarios whose names contain one of these (comma-separated)")
	fs.IntVar(&m.Breakers, "memory-breakers", m.Breakers, "with --memory: breakers per measurement")
	fs.IntVar(&m.SmallNodeBytes, "stream-node-max-bytes", m.SmallNodeBytes, "with --memory: the lowered stream-node-max-bytes measured beside Redis's default")
	fleet := fs.Bool("fleet", false, "simulate a fleet of fast-mode workers instead (docs/scale.md); with --quick, about a minute")
	fleetFlags(fs, &f)
	if err := fs.Parse(args); errors.Is(err, pflag.ErrHelp) {
		fmt.Fprintf(stdout, "Usage: breakerbench [flags]\n\nMeasures breakerd against the ceiling and the peer on loopback (see docs/performance.md).\n\nFlags:\n%s", fs.FlagUsages())
		return cli.ErrHelp
	} else if err != nil {
		return &cli.UsageError{Err: err}
	}
	if *version {
		fmt.Fprintln(stdout, buildinfo.Get().String("breakerbench"))
		return cli.ErrHelp
	}
	if fs.NArg() > 0 {
		return cli.Usagef("unexpected argument %q", fs.Arg(0))
	}
	if *serve != "" {
		return serveChild(ctx, *serve, o.RedisAddr, o.CPUProfile, stdout)
	}
	if *fleet {
		if *quick {
			quickFleet(fs, &f)
		}
		f.RedisAddr, f.RedisServer = o.RedisAddr, o.RedisServer
		if err := f.Validate(); err != nil {
			return &cli.UsageError{Err: err}
		}
		return bench.Fleet(ctx, f, stdout)
	}
	if *memory {
		m.RedisServer = o.RedisServer
		return bench.Memory(ctx, m, stdout)
	}
	if *quick {
		quickBench(fs, &o)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the bench's own binary for its server processes: %w", err)
	}
	o.Executable = exe
	if o.CPUProfile != "" {
		if o.CPUProfile, err = filepath.Abs(o.CPUProfile); err != nil {
			return &cli.UsageError{Err: fmt.Errorf("--cpuprofile: %w", err)}
		}
	}
	if err := o.Validate(); err != nil {
		return &cli.UsageError{Err: err}
	}
	return bench.Run(ctx, o, stdout)
}

// fleetFlags defines the --fleet-* flags on fs, filling f.
func fleetFlags(fs *pflag.FlagSet, f *bench.FleetOptions) {
	fs.IntVar(&f.Clients, "fleet-clients", f.Clients, "with --fleet: simulated workers (distinct worker ids)")
	fs.IntVar(&f.Conns, "fleet-conns", f.Conns, "with --fleet: gRPC connections the workers share (one Watch stream each), alternately to the 2 daemons")
	fs.IntVar(&f.Breakers, "fleet-breakers", f.Breakers, "with --fleet: breakers the calls go to")
	fs.Float64Var(&f.Zipf, "fleet-zipf", f.Zipf, "with --fleet: popularity skew s (> 1); rank k gets calls in proportion to 1/(1+k)^s")
	fs.Float64Var(&f.Rate, "fleet-rate", f.Rate, "with --fleet: tool calls per second per worker")
	fs.DurationVar(&f.Warmup, "fleet-warmup", f.Warmup, "with --fleet: untimed load before the measured run")
	fs.DurationVar(&f.Duration, "fleet-duration", f.Duration, "with --fleet: the measured run")
	fs.IntVar(&f.FailRank, "fleet-fail-rank", f.FailRank, "with --fleet: popularity rank of the breaker whose vendor fails (0: the most popular)")
	fs.DurationVar(&f.FailFrom, "fleet-fail-from", f.FailFrom, "with --fleet: when its vendor starts failing every call (from the measured run's start)")
	fs.DurationVar(&f.FailUntil, "fleet-fail-until", f.FailUntil, "with --fleet: when its vendor works again")
	fs.DurationVar(&f.Cooldown, "fleet-cooldown", f.Cooldown, "with --fleet: the daemons' cooldown_base (cooldown_cap twice it, no jitter)")
}

// quickFleet applies --quick to a fleet simulation: it changes only what
// was not given explicitly.
func quickFleet(fs *pflag.FlagSet, f *bench.FleetOptions) {
	q := bench.QuickFleet()
	for name, set := range map[string]func(){
		"fleet-warmup":     func() { f.Warmup = q.Warmup },
		"fleet-duration":   func() { f.Duration = q.Duration },
		"fleet-fail-from":  func() { f.FailFrom = q.FailFrom },
		"fleet-fail-until": func() { f.FailUntil = q.FailUntil },
	} {
		if !fs.Changed(name) {
			set()
		}
	}
}

// quickBench applies --quick to the bench: it changes only what was not
// given explicitly.
func quickBench(fs *pflag.FlagSet, o *bench.Options) {
	q := bench.Quick()
	for name, set := range map[string]func(){
		"rounds":    func() { o.Rounds = q.Rounds },
		"duration":  func() { o.Duration = q.Duration },
		"wire-pass": func() { o.WirePass = q.WirePass },
		"trips":     func() { o.Trips = q.Trips },
	} {
		if !fs.Changed(name) {
			set()
		}
	}
}

// serveChild runs one server for the parent bench until ctx ends or the
// parent closes stdin, writing a CPU profile to profile when it is set.
func serveChild(ctx context.Context, kind, redisAddr, profile string, stdout io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	return bench.ServeProfiled(ctx, kind, redisAddr, profile, stdout)
}
