// Command breakerd is the fleet-wide circuit-breaker daemon for AI-agent
// tool calls. docs/configuration.md documents its flags and
// docs/concepts.md the breakerd.v1 API;
// `breakerd --help` lists every flag with its environment variable.
//
// breakerd --check-config FILE [NAME...] checks a policy file instead of
// serving: it prints the file's warnings and each NAME's effective policy,
// and exits 0 when the file is valid, 1 when it is not.
//
// Exit status: 0 after a clean shutdown (or --help, --version); 2 on a
// usage error (a bad flag, environment variable or value); 1 on any other
// failure.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/buildinfo"
	"github.com/breakerd/breakerd/internal/cli"
	"github.com/breakerd/breakerd/internal/daemon"
)

func main() {
	err := run(context.Background(), os.Args, os.Getenv, os.Stdout, os.Stderr)
	os.Exit(cli.Exit("breakerd", err, os.Stderr))
}

// run parses the command line (args[0] is the program) and serves until
// ctx ends or SIGINT/SIGTERM. Help and the version go to stdout, logs to
// stderr.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := daemon.ParseConfig(args[1:], getenv, stdout)
	if err != nil {
		return err
	}
	if cfg.CheckConfig != "" {
		return daemon.CheckConfig(cfg.CheckConfig, cfg.Names, stdout)
	}
	bi := buildinfo.Get()
	log := daemon.NewLogger(cfg, stderr).With("version", bi.Version)
	redis.SetLogger(daemon.RedisLogger(log))
	return daemon.Run(ctx, cfg, log, nil)
}
