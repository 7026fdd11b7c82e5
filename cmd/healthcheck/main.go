// Command healthcheck asks a gRPC server's grpc.health.v1 service whether
// it is SERVING and exits 0 if so, 1 otherwise (2 on a usage error). The
// container image uses it as its HEALTHCHECK (distroless images have no
// shell or curl).
//
//	healthcheck                          # 127.0.0.1:7070, the server as a whole
//	healthcheck --addr 10.0.0.5:7070 --service breakerd.v1.BreakerService
//	healthcheck 127.0.0.1:7070           # the address as an argument, as before
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/breakerd/breakerd/internal/cli"
)

func main() {
	err := run(context.Background(), os.Args, os.Getenv, os.Stdout)
	os.Exit(cli.Exit("healthcheck", err, os.Stderr))
}

// config is one check.
type config struct {
	// Addr is the server's gRPC address. Default 127.0.0.1:7070.
	Addr string
	// Service is the grpc.health.v1 service name to check: "" (the
	// default) for the server as a whole, or breakerd.v1.BreakerService.
	Service string
	// Timeout bounds the check. Default 2s.
	Timeout time.Duration
}

const help = `healthcheck asks a gRPC server's grpc.health.v1 service whether it is
SERVING: exit 0 if so, 1 if not (or unreachable), 2 on a usage error.
ADDR, when given, is the same as --addr.

Every flag also reads the environment variable shown with it; the flag wins.
`

// run checks once; args[0] is the program. The result is its error.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	c := config{Addr: "127.0.0.1:7070", Timeout: 2 * time.Second}
	cmd := cli.Command{
		Name: "healthcheck", Synopsis: "[flags] [ADDR]", Help: help, EnvPrefix: "BREAKERD_HEALTHCHECK", MaxArgs: 1,
		Flags: []cli.Flag{
			{Name: "addr", Value: &c.Addr, Usage: "the server's gRPC address"},
			{Name: "service", Value: &c.Service, Usage: `grpc.health.v1 service to check: "" for the whole server, or breakerd.v1.BreakerService`},
			{Name: "timeout", Value: &c.Timeout, Usage: "bound on the check"},
		},
	}
	rest, err := cmd.Parse(args[1:], getenv, stdout)
	if err != nil {
		return err
	}
	if len(rest) == 1 {
		c.Addr = rest[0]
	}
	if c.Timeout <= 0 {
		return cli.Usagef("--timeout: must be positive, got %s", c.Timeout)
	}
	return check(ctx, c)
}

func check(ctx context.Context, c config) error {
	conn, err := grpc.NewClient(c.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return cli.Usagef("--addr %q: %v", c.Addr, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	res, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: c.Service})
	if err != nil {
		return fmt.Errorf("%s: %w", c.Addr, err)
	}
	if res.Status != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("%s (service %q) is %s", c.Addr, c.Service, res.Status)
	}
	return nil
}
