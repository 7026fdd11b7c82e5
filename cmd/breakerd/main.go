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

func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := daemon.ParseConfig(args[1:], getenv, stderr)
	if err != nil {
		return err
	}
	return daemon.Run(ctx, cfg, daemon.NewLogger(cfg, stderr), nil)
}
