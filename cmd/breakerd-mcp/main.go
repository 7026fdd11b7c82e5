// Command breakerd-mcp is breakerd's Model Context Protocol gateway: it
// serves the tools of upstream MCP servers to any MCP agent, asking
// breakerd before each call, so that a tool whose dependency is down
// leaves the agent's toolset with the reason. See docs/mcp.md and
// cmd/breakerd-mcp/mcpgw.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/breakerd/breakerd/cmd/breakerd-mcp/mcpgw"
	"github.com/breakerd/breakerd/internal/buildinfo"
	"github.com/breakerd/breakerd/internal/cli"
)

func main() {
	err := run(context.Background(), os.Args, os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	if errors.Is(err, mcpgw.ErrHelp) {
		err = nil
	}
	os.Exit(cli.Exit("breakerd-mcp", err, os.Stderr))
}

// run parses the command line and serves until a signal, or until the
// stdio agent hangs up. Logs go to stderr: over stdio, stdout is the
// protocol's.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.ReadCloser, stdout io.WriteCloser, stderr io.Writer) error {
	if len(args) > 1 && args[1] == mcpgw.SandboxArg {
		return mcpgw.ExecSandboxed(args[2:]) // returns only when the upstream could not start confined
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	f, err := mcpgw.ParseFlags(args[1:], getenv, stderr)
	if err != nil {
		if errors.Is(err, mcpgw.ErrHelp) {
			return err
		}
		return &cli.UsageError{Err: err} // a bad flag, value or variable: exit 2
	}
	info := buildinfo.Get()
	if f.ShowVersion {
		// Over stdio stdout is the protocol's, but --version serves none.
		fmt.Fprintln(stdout, info.String("breakerd-mcp"))
		return nil
	}
	log := f.Logger(stderr).With("worker", f.WorkerID, "version", info.Version)
	return mcpgw.Serve(ctx, f, stdin, stdout, log, info.Version)
}
