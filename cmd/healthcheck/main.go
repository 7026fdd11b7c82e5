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
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
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
	creds, err := transport(getenv)
	if err != nil {
		return err
	}
	return check(ctx, c, creds)
}

// transport returns plaintext, or TLS pinned to the daemon's certificate
// when getenv("BREAKERD_TLS_CERT") names one: it reads breakerd's own
// environment, so it speaks as the daemon listens (the check dials
// 127.0.0.1, which a certificate for the service's name need not cover,
// so the pin is the daemon's very certificate). With
// BREAKERD_TLS_CLIENT_CA set it presents a client certificate:
// BREAKERD_HEALTHCHECK_CERT and BREAKERD_HEALTHCHECK_KEY, or else the
// daemon's own pair (which then needs the clientAuth usage too).
func transport(getenv func(string) string) (credentials.TransportCredentials, error) {
	certFile, keyFile := getenv("BREAKERD_TLS_CERT"), getenv("BREAKERD_TLS_KEY")
	if certFile == "" {
		return insecure.NewCredentials(), nil
	}
	own, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("BREAKERD_TLS_CERT/BREAKERD_TLS_KEY: %w", err)
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Verification is the pin below: the peer must present exactly
		// the daemon's own leaf certificate.
		InsecureSkipVerify: true, //nolint:gosec // pinned in VerifyPeerCertificate
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 || !bytes.Equal(raw[0], own.Certificate[0]) {
				return errors.New("the server's certificate is not BREAKERD_TLS_CERT's")
			}
			return nil
		},
	}
	if getenv("BREAKERD_TLS_CLIENT_CA") != "" {
		client := own
		if c, k := getenv("BREAKERD_HEALTHCHECK_CERT"), getenv("BREAKERD_HEALTHCHECK_KEY"); c != "" {
			if client, err = tls.LoadX509KeyPair(c, k); err != nil {
				return nil, fmt.Errorf("BREAKERD_HEALTHCHECK_CERT/BREAKERD_HEALTHCHECK_KEY: %w", err)
			}
		}
		cfg.Certificates = []tls.Certificate{client}
	}
	return credentials.NewTLS(cfg), nil
}

func check(ctx context.Context, c config, creds credentials.TransportCredentials) error {
	conn, err := grpc.NewClient(c.Addr, grpc.WithTransportCredentials(creds))
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
