// Command breakerd is the fleet-wide circuit-breaker daemon for AI-agent
// tool calls. See the README for its flags and the breakerd.v1 API.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/breakerd/breakerd/internal/daemon"
	"github.com/redis/go-redis/v9"
)

func main() {
	err := run(context.Background(), os.Args, os.Getenv, os.Stderr)
	switch {
	case errors.Is(err, daemon.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "breakerd:", err)
		os.Exit(1)
	}
}

// version is set at build time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := daemon.ParseConfig(args[1:], getenv, stderr)
	if err != nil {
		return err
	}
	if cfg.ShowVersion {
		fmt.Fprintln(stderr, "breakerd", version)
		return nil
	}
	log := daemon.NewLogger(cfg, stderr).With("version", version)
	redis.SetLogger(daemon.RedisLogger(log))
	return daemon.Run(ctx, cfg, log, nil)
}
