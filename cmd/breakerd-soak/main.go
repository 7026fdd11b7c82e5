// Command breakerd-soak runs breakerd under a bounded, scheduled load and
// checks it throughout (cmd/breakerd-soak/soak): two daemons, simulated workers
// calling Allow and Record on breakers whose dependencies fail and recover
// on a schedule, a daemon killed and started again, a Redis master
// stalled (SIGSTOP, shorter than a failover takes), a master killed
// part-way (its replica takes over), a master restarted without
// persistence, and an observer that reports every broken rule. Its Redis
// is a Sentinel setup or, with --topology cluster, a Redis Cluster of 3
// masters and 3 replicas. It starts its own Redis processes
// (redis-server, redis-sentinel and redis-cli must be installed) on free
// loopback ports and runs from the repository's root (it runs
// scripts/redis-sentinel.sh or scripts/redis-cluster.sh).
//
//	go build -o /tmp/breakerd-soak ./cmd/breakerd-soak
//	/tmp/breakerd-soak --duration 30m
//
// Exit status: 0 when the observer saw no violation; 1 on a violation or
// when the run could not be carried out; 2 on a usage error.
//
// "breakerd-soak daemon <breakerd flags>" is the daemon the soak runs, and
// "breakerd-soak proxy <address>" the stall's proxy (soak.ServeProxy): the
// soak re-executes itself so that each is a process of its own.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/cmd/breakerd-soak/soak"
	"github.com/breakerd/breakerd/internal/cli"
	"github.com/breakerd/breakerd/internal/daemon"
)

func main() {
	err := run(context.Background(), os.Args, os.Getenv, os.Stdout, os.Stderr)
	os.Exit(cli.Exit("breakerd-soak", err, os.Stderr))
}

// errViolations is returned when the run completed and the observer saw
// violations (the report lists them).
var errViolations = errors.New("the observer saw violations (listed above)")

const help = `breakerd-soak runs 2 breakerd daemons, simulated workers and a Redis of
its own on free loopback ports: a Sentinel setup (a master, a replica, 3
sentinels) or, with --topology cluster, a Redis Cluster (3 masters, 3
replicas). It kills a master part-way (its replica takes over), kills a daemon
and starts it again, stalls a master shorter than a failover takes (SIGSTOP; with --stall-fault, a
blackholed link or replies later than the daemons' decision bound instead),
restarts a master without persistence, and checks
throughout: never two live probe holders for a breaker, every transition once
in the event log in generation order, no probe-in-flight denial past a lease,
no count applied twice, no OPEN breaker answering CLOSED inside its cooldown
without a logged loss, no daemon flipping a Redis node between Redis and memory
more than its faults explain, on a Cluster no answer from memory for a breaker
whose master had no fault, no call at a breaker forced open let through, no
call during the stall failing past its deadline, each daemon sending the
stalled node to memory exactly once, the daemons' heap and goroutines flat,
no keys left once a breaker's retention has passed. It prints a report and
exits 1 on any violation. Run it from the repository's root (it uses
scripts/redis-sentinel.sh and scripts/redis-cluster.sh).
`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 1 && args[1] == "daemon" {
		return runDaemon(ctx, args[2:], getenv, stdout, stderr)
	}
	if len(args) == 3 && args[1] == "proxy" {
		return soak.ServeProxy(args[2], os.Stdin, stdout)
	}
	c := soak.Config{Topology: soak.TopologySentinel, Duration: time.Minute, Workers: 200, Breakers: 1000, Daemons: 2, CallEvery: 250 * time.Millisecond,
		FailoverAt: 0.5, DaemonKillAt: 0.25, StallAt: 0.4, StallFault: soak.StallSIGSTOP, RestartAt: 0.75, Seed: 1, Scripts: "scripts"}
	seed := int64(c.Seed)
	var daemonArgs, ports string
	cmd := cli.Command{Name: "breakerd-soak", Synopsis: "[flags]", Help: help, EnvPrefix: "BREAKERD_SOAK", Flags: []cli.Flag{
		{Name: "topology", Value: &c.Topology, Usage: "the Redis the soak starts: " + strings.Join(soak.Topologies, " or ")},
		{Name: "duration", Value: &c.Duration, Usage: "how long the load runs"},
		{Name: "workers", Value: &c.Workers, Usage: "simulated workers, spread over the daemons"},
		{Name: "breakers", Value: &c.Breakers, Usage: "breakers (the last tenth are called only in the first quarter, at most 1m, then must expire)"},
		{Name: "daemons", Value: &c.Daemons, Usage: "breakerd daemons"},
		{Name: "call-every", Value: &c.CallEvery, Usage: "each worker's pause between calls (±50%)"},
		{Name: "failover-at", Value: &c.FailoverAt, Usage: "when a Redis master is killed (its replica takes over), as a fraction of --duration (negative: never)"},
		{Name: "daemon-kill-at", Value: &c.DaemonKillAt, Usage: "when the last daemon is killed (SIGKILL) and started again 3s later, as a fraction of --duration (negative: never)"},
		{Name: "stall-at", Value: &c.StallAt, Usage: "when a Redis master stalls (the --stall-fault, ended before its replica would take over), as a fraction of --duration (negative: never)"},
		{Name: "stall-fault", Value: &c.StallFault, Usage: "the stall: " + strings.Join(soak.StallFaults, ", ") + " (the master's process stopped; the daemons' link to it forwarding nothing; its replies late past the daemons' decision bound)"},
		{Name: "daemon-args", Value: &daemonArgs, Usage: "more breakerd flags for the daemons, space-separated (such as \"--redis-decision-timeout 10s\", to see the stall rules fire)"},
		{Name: "restart-at", Value: &c.RestartAt, Usage: "when a Redis master (on a Cluster, another than the one killed) is killed and started again at once without persistence (every key it held gone), as a fraction of --duration (negative: never)"},
		{Name: "seed", Value: &seed, Usage: "seed of the dependency schedule and the workers' choices"},
		{Name: "scripts", Value: &c.Scripts, Usage: "directory holding redis-sentinel.sh and redis-cluster.sh"},
		{Name: "ports", Value: &ports, Usage: "a range FIRST-LAST of loopback ports to take the Redis and daemon ports from, below the host's ephemeral range (default: free ephemeral ones, which the host's outgoing connections may take before they are used)"},
		{Name: "dir", Value: &c.Dir, Usage: "directory kept for Redis's files and the daemons' logs (default: a temporary one, removed)"},
	}}
	if _, err := cmd.Parse(args[1:], getenv, stdout); err != nil {
		return err
	}
	c.Seed = uint64(seed)
	c.DaemonArgs = strings.Fields(daemonArgs)
	if ports != "" {
		first, last, ok := strings.Cut(ports, "-")
		var errF, errL error
		c.Ports[0], errF = strconv.Atoi(first)
		c.Ports[1], errL = strconv.Atoi(last)
		if !ok || errF != nil || errL != nil || c.Ports[0] < 1024 || c.Ports[1] < c.Ports[0] || c.Ports[1] > 65535 {
			return cli.Usagef("--ports: want FIRST-LAST, 1024 <= FIRST <= LAST <= 65535, got %q", ports)
		}
	}
	switch {
	case !slices.Contains(soak.Topologies, c.Topology):
		return cli.Usagef("--topology: want one of %s, got %q", strings.Join(soak.Topologies, ", "), c.Topology)
	case !slices.Contains(soak.StallFaults, c.StallFault):
		return cli.Usagef("--stall-fault: want one of %s, got %q", strings.Join(soak.StallFaults, ", "), c.StallFault)
	case c.Duration < 20*time.Second:
		return cli.Usagef("--duration: must be at least 20s, got %s", c.Duration)
	case c.Workers < 2 || c.Breakers < 10 || c.Daemons < 1:
		return cli.Usagef("--workers (at least 2), --breakers (at least 10), --daemons (at least 1): got %d, %d, %d", c.Workers, c.Breakers, c.Daemons)
	case c.CallEvery <= 0:
		return cli.Usagef("--call-every: must be positive, got %s", c.CallEvery)
	case c.FailoverAt >= 1:
		return cli.Usagef("--failover-at: must be below 1, got %g", c.FailoverAt)
	case c.DaemonKillAt >= 1 || c.RestartAt >= 1 || c.StallAt >= 1:
		return cli.Usagef("--daemon-kill-at, --restart-at, --stall-at: must be below 1, got %g, %g, %g", c.DaemonKillAt, c.RestartAt, c.StallAt)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	c.Self = self
	c.Progress = stderr
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := soak.Run(ctx, c)
	if err != nil {
		return err
	}
	fmt.Fprint(stdout, rep)
	if len(rep.Violations) > 0 {
		return errViolations
	}
	return nil
}

// runDaemon is breakerd's own main.
func runDaemon(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := daemon.ParseConfig(args, getenv, stdout)
	if err != nil {
		return err
	}
	log := daemon.NewLogger(cfg, stderr)
	redis.SetLogger(daemon.RedisLogger(log))
	return daemon.Run(ctx, cfg, log, nil)
}
