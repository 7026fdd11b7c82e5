package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/breakerd/breakerd/internal/auth"
	"github.com/breakerd/breakerd/internal/buildinfo"
	"github.com/breakerd/breakerd/internal/limits"
	"github.com/breakerd/breakerd/internal/secretfile"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// DefaultAddr is the daemon address when neither --addr nor
// BREAKERCTL_ADDR is set.
const DefaultAddr = "127.0.0.1:7070"

// cli is one invocation's settings and connection.
type cli struct {
	getenv         func(string) string
	stdout, stderr io.Writer

	addr      string
	token     string
	tokenFile string
	tls       tlsFlags
	json      bool
	timeout   time.Duration
	operator  string

	conn *grpc.ClientConn
	api  pb.BreakerServiceClient
}

const rootLong = `breakerctl steers breakerd, the fleet-wide circuit breaker for AI-agent
tool calls: list and inspect circuits, force them open or closed, return
them to automatic operation, watch transitions live and read the durable
event log.

Output is a human table by default; --json prints JSON for scripts (one
object per line for watch).

Environment (a flag wins over its variable):
  BREAKERCTL_ADDR      daemon address (--addr)
  BREAKERCTL_TOKEN     bearer token (--token); sent as gRPC metadata
                       "authorization: Bearer <token>"
  BREAKERCTL_TOKEN_FILE
                       file holding the bearer token (--token-file): keeps
                       it out of shell history and ps; refused when group-
                       or world-writable
  BREAKERCTL_OPERATOR  who forces (--operator; else $USER)
  BREAKERCTL_TLS_CA, BREAKERCTL_TLS_CERT, BREAKERCTL_TLS_KEY
                       TLS files (--tls-ca, --tls-cert, --tls-key)

Without --tls (or a TLS file) breakerctl speaks plaintext gRPC, as a
daemon without TLS configured expects.

Exit status:
  0  success
  1  any other failure
  2  usage error: bad flag, argument or value (breakerd's InvalidArgument too)
  3  unknown breaker (see "breakerctl status --help")
  4  not authenticated or permission denied
  5  breakerd unreachable or not answering in time, or breakerd cannot
     reach Redis
Every failure prints one line on stderr.`

// newRoot builds the command tree for one run: no package-level state.
func newRoot(getenv func(string) string, stdout, stderr io.Writer) *cobra.Command {
	c := &cli{getenv: getenv, stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:           "breakerctl",
		Short:         "Operate breakerd circuits: list, status, force, watch, events",
		Long:          rootLong,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return c.connect(cmd)
		},
		PersistentPostRun: func(*cobra.Command, []string) {
			if c.conn != nil {
				_ = c.conn.Close()
			}
		},
	}
	bi := buildinfo.Get()
	root.Version = bi.Version // turns on --version, answered before connect
	root.SetVersionTemplate(bi.String("breakerctl") + "\n")
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageErr("%v", err) })
	pf := root.PersistentFlags()
	pf.StringVar(&c.addr, "addr", DefaultAddr, "breakerd's gRPC address (env BREAKERCTL_ADDR)")
	pf.StringVar(&c.token, "token", "", "bearer token (env BREAKERCTL_TOKEN); never printed; prefer --token-file")
	pf.StringVar(&c.tokenFile, "token-file", "", "file holding the bearer token (env BREAKERCTL_TOKEN_FILE)")
	pf.BoolVar(&c.json, "json", false, "print JSON for scripts instead of a table")
	pf.DurationVar(&c.timeout, "timeout", 10*time.Second, "how long to wait for each answer (not for watch's stream)")
	c.tls.register(pf)
	root.AddCommand(c.listCmd(), c.statusCmd(), c.forceCmd("open"), c.forceCmd("close"), c.autoCmd(), c.shadowCmd(), c.watchCmd(), c.eventsCmd(), c.savingsCmd())
	return root
}

// connect resolves the environment for flags not given and dials. It
// does not wait for the connection: the first call reports an unreachable
// daemon.
func (c *cli) connect(cmd *cobra.Command) error {
	flags := cmd.Flags()
	if !flags.Changed("addr") {
		if v := c.getenv("BREAKERCTL_ADDR"); v != "" {
			c.addr = v
		}
	}
	if flags.Changed("token") && flags.Changed("token-file") {
		return usageErr("--token-file: give --token or --token-file, not both")
	}
	if !flags.Changed("token-file") {
		c.tokenFile = c.getenv("BREAKERCTL_TOKEN_FILE")
	}
	switch {
	case flags.Changed("token"):
	case c.tokenFile != "":
		tok, worldReadable, err := secretfile.ReadPassword(c.tokenFile)
		if err != nil {
			return usageErr("--token-file: %v", err)
		}
		if worldReadable {
			fmt.Fprintf(c.stderr, "breakerctl: warning: --token-file %s is readable by every local user; chmod o-r it\n", c.tokenFile)
		}
		c.token = tok
	default:
		c.token = c.getenv("BREAKERCTL_TOKEN")
	}
	if c.addr == "" {
		return usageErr("--addr: is required")
	}
	if c.timeout <= 0 {
		return usageErr("--timeout: must be positive, got %s", c.timeout)
	}
	creds, err := c.tls.credentials(c.getenv)
	if err != nil {
		return err
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if c.token != "" && creds.Info().SecurityProtocol != "tls" && !auth.IsLoopback(c.addr) {
		return usageErr("--token: refusing to send a bearer token over plaintext to %s; use --tls (or --tls-ca)", c.addr)
	}
	if c.token != "" {
		md := metadata.Pairs("authorization", "Bearer "+c.token)
		opts = append(opts,
			grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, o ...grpc.CallOption) error {
				return inv(metadata.NewOutgoingContext(ctx, metadata.Join(md)), method, req, reply, cc, o...)
			}),
			grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, s grpc.Streamer, o ...grpc.CallOption) (grpc.ClientStream, error) {
				return s(metadata.NewOutgoingContext(ctx, metadata.Join(md)), desc, cc, method, o...)
			}))
	}
	conn, err := grpc.NewClient(c.addr, opts...)
	if err != nil {
		return usageErr("--addr %q: %v", c.addr, err)
	}
	c.conn, c.api = conn, pb.NewBreakerServiceClient(conn)
	return nil
}

// call bounds one unary call by --timeout.
func (c *cli) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.timeout)
}

// act wraps a command's body so that every failure carries an exit code:
// errors from breakerd are classified by rpcErr.
func (c *cli) act(fn func(ctx context.Context, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		err := fn(cmd.Context(), args)
		var ee *exitError
		if err == nil || errors.As(err, &ee) {
			return err
		}
		return rpcErr(c.addr, err)
	}
}

// oneBreaker is the Args check of commands that take one breaker name.
func oneBreaker(_ *cobra.Command, args []string) error {
	if len(args) != 1 {
		return usageErr("want exactly one BREAKER argument, got %d", len(args))
	}
	if args[0] == "" {
		return usageErr("BREAKER: must not be empty")
	}
	// The daemon's own rule, checked here: invalid UTF-8 cannot even be
	// sent (gRPC refuses to marshal it).
	if err := limits.Name("breaker", args[0]); err != nil {
		return usageErr("%v", err)
	}
	return nil
}

func noArgs(_ *cobra.Command, args []string) error {
	if len(args) != 0 {
		return usageErr("takes no arguments, got %q", args)
	}
	return nil
}

func (c *cli) printf(format string, args ...any) {
	fmt.Fprintf(c.stdout, format, args...)
}
