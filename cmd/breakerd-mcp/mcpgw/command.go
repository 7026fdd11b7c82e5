package mcpgw

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/breakerd/breakerd/internal/auth"
	"github.com/breakerd/breakerd/internal/logging"
	"github.com/breakerd/breakerd/internal/secretfile"
	"github.com/breakerd/breakerd/pkg/client"
)

// envPrefix starts the name of every environment variable the command
// reads; none of them reaches an upstream (see Upstream.EnvPassthrough).
const envPrefix = "BREAKERD_MCP_"

// ErrHelp is returned by ParseFlags for --help, after printing the usage.
var ErrHelp = pflag.ErrHelp

// Flags is breakerd-mcp's command line. Every field has a flag and a
// BREAKERD_MCP_* environment variable (the flag wins); tests build it
// directly.
type Flags struct {
	// ConfigFile is the YAML file of upstreams (see Config). Required.
	// Flag --config, env BREAKERD_MCP_CONFIG.
	ConfigFile string
	// Breakerd is breakerd's gRPC address. Default 127.0.0.1:7070. Flag
	// --breakerd, env BREAKERD_MCP_BREAKERD.
	Breakerd string
	// WorkerID is this gateway's worker id: distinct per gateway instance,
	// since breakerd's quorum counts distinct ids. Default "<host>-<pid>".
	// Flag --worker-id, env BREAKERD_MCP_WORKER_ID.
	WorkerID string
	// Listen is an address (127.0.0.1:8080) to serve Streamable HTTP on
	// (/mcp) with a health endpoint (/healthz). Empty: one session over
	// stdin and stdout. Flag --listen, env BREAKERD_MCP_LISTEN.
	Listen string
	// Fallback is what tool calls get while breakerd is unreachable:
	// "local" (pkg/client's local breaker judges, the default) or "closed"
	// (every upstream tool is denied). Flag --fallback, env
	// BREAKERD_MCP_FALLBACK.
	Fallback string
	// AllowBudget bounds how long each call waits for breakerd before the
	// fallback answers. Default 50ms (pkg/client's). Flag --allow-budget,
	// env BREAKERD_MCP_ALLOW_BUDGET.
	AllowBudget time.Duration
	// TokenFile holds the bearer token for a breakerd started with
	// --tokens: a worker token bound to WorkerID alone (the gateway's
	// sessions all report as it). Read as a secret file
	// (refused if group- or world-writable). Empty: no token. Flag
	// --token-file, env BREAKERD_MCP_TOKEN_FILE. The token itself is
	// never taken from the command line or the environment, which every
	// command upstream would otherwise inherit.
	TokenFile string
	// ListenTokenFile holds the bearer token agents must send to /mcp
	// over HTTP, read as TokenFile is. Required when Listen is not a
	// loopback address. Flag --listen-token-file, env
	// BREAKERD_MCP_LISTEN_TOKEN_FILE.
	ListenTokenFile string
	// ListenTLSCert and ListenTLSKey are PEM files that serve HTTP over
	// TLS (both or neither), as breakerd's --tls-cert and --tls-key do.
	// Flags --listen-tls-cert, --listen-tls-key, env
	// BREAKERD_MCP_LISTEN_TLS_CERT, BREAKERD_MCP_LISTEN_TLS_KEY.
	ListenTLSCert, ListenTLSKey string
	// MaxSessions bounds the HTTP sessions open at once. Default
	// DefaultMaxSessions. Flag --max-sessions, env BREAKERD_MCP_MAX_SESSIONS.
	MaxSessions int
	// MaxSessionsPerClient bounds the HTTP sessions one client (source
	// address: IPv4 address, IPv6 /64) holds at once. Default
	// DefaultMaxSessionsPerClient; 0: no share (behind a proxy, where
	// every agent has the proxy's address). Flag
	// --max-sessions-per-client, env BREAKERD_MCP_MAX_SESSIONS_PER_CLIENT.
	MaxSessionsPerClient int
	// AllowedOrigins are browser origins (scheme://host[:port]) served
	// over HTTP besides loopback ones and requests without Origin; others
	// are refused 403. Flag --allowed-origins (comma-separated, or
	// repeated), env BREAKERD_MCP_ALLOWED_ORIGINS (comma-separated).
	AllowedOrigins []string
	// SessionIdleTimeout closes an HTTP session idle this long. Default
	// DefaultSessionIdleTimeout. Flag --session-idle-timeout, env
	// BREAKERD_MCP_SESSION_IDLE_TIMEOUT.
	SessionIdleTimeout time.Duration
	// TLS connects to breakerd over TLS, verifying it with the system's
	// roots, or with TLSCA. Default false (plaintext). Flag --tls, env
	// BREAKERD_MCP_TLS (true/false).
	TLS bool
	// TLSCA is a PEM file of the CA that signed breakerd's certificate; it
	// implies TLS. Flag --tls-ca, env BREAKERD_MCP_TLS_CA.
	TLSCA string
	// MetricsListen is an address (127.0.0.1:9465) serving the gateway's
	// Prometheus metrics at /metrics, without auth, as breakerd's
	// --metrics-listen does. Empty (the default): no metrics listener.
	// Flag --metrics-listen, env BREAKERD_MCP_METRICS_LISTEN.
	MetricsListen string
	// LogFormat is text or json. Default text. Flag --log-format, env
	// BREAKERD_MCP_LOG_FORMAT.
	LogFormat string
	// LogLevel is the least severe level logged: debug, info, warn or
	// error. Default info (debug adds one line per denied call). Flag
	// --log-level, env BREAKERD_MCP_LOG_LEVEL.
	LogLevel string
	// Sandbox is how command upstreams are confined: auto (the default:
	// in the Landlock sandbox where the kernel has it, with a warning at
	// start where it has not), required (refuse to start where it has
	// not) or off (warned at start). See docs/mcp.md, "The upstream
	// sandbox". Flag --sandbox, env BREAKERD_MCP_SANDBOX.
	Sandbox string
	// ShowVersion asks only for the version. Flag --version.
	ShowVersion bool
}

// ParseFlags reads args (without the program name) and the environment.
// Errors: a bad flag or value, naming it; ErrHelp after --help.
func ParseFlags(args []string, getenv func(string) string, usage io.Writer) (Flags, error) {
	host, _ := os.Hostname()
	f := Flags{Breakerd: "127.0.0.1:7070", WorkerID: fmt.Sprintf("%s-%d", host, os.Getpid()),
		Fallback: "local", AllowBudget: client.DefaultAllowBudget,
		MaxSessions: DefaultMaxSessions, MaxSessionsPerClient: DefaultMaxSessionsPerClient, SessionIdleTimeout: DefaultSessionIdleTimeout,
		LogFormat: "text", LogLevel: "info", Sandbox: SandboxAuto}
	fs := pflag.NewFlagSet("breakerd-mcp", pflag.ContinueOnError)
	fs.SetOutput(usage)
	fs.Usage = func() {
		fmt.Fprint(usage, "Usage: breakerd-mcp --config gateway.yaml [flags]\n\n"+
			"An MCP gateway: serves the upstream MCP servers' tools, asking breakerd before each call.\n"+
			"Over stdio by default (for a desktop agent's config), over Streamable HTTP with --listen.\n\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&f.ConfigFile, "config", "", "YAML file of upstreams (env BREAKERD_MCP_CONFIG)")
	fs.StringVar(&f.Breakerd, "breakerd", f.Breakerd, "breakerd's gRPC address (env BREAKERD_MCP_BREAKERD)")
	fs.StringVar(&f.WorkerID, "worker-id", f.WorkerID, "this gateway's worker id, distinct per instance (env BREAKERD_MCP_WORKER_ID)")
	fs.StringVar(&f.Listen, "listen", "", "serve Streamable HTTP on this address (/mcp, /healthz); empty: stdio (env BREAKERD_MCP_LISTEN)")
	fs.StringVar(&f.Fallback, "fallback", f.Fallback, "while breakerd is unreachable: local or closed (env BREAKERD_MCP_FALLBACK)")
	fs.DurationVar(&f.AllowBudget, "allow-budget", f.AllowBudget, "how long a call waits for breakerd before the fallback answers (env BREAKERD_MCP_ALLOW_BUDGET)")
	fs.StringVar(&f.TokenFile, "token-file", "", "file holding the bearer token for breakerd's --tokens (env BREAKERD_MCP_TOKEN_FILE)")
	fs.StringVar(&f.ListenTokenFile, "listen-token-file", "", "file holding the bearer token agents send over HTTP; required off loopback (env BREAKERD_MCP_LISTEN_TOKEN_FILE)")
	fs.StringVar(&f.ListenTLSCert, "listen-tls-cert", "", "PEM certificate to serve HTTP over TLS, with --listen-tls-key (env BREAKERD_MCP_LISTEN_TLS_CERT)")
	fs.StringVar(&f.ListenTLSKey, "listen-tls-key", "", "PEM private key, with --listen-tls-cert (env BREAKERD_MCP_LISTEN_TLS_KEY)")
	fs.IntVar(&f.MaxSessions, "max-sessions", f.MaxSessions, "HTTP sessions open at once, at most (env BREAKERD_MCP_MAX_SESSIONS)")
	fs.IntVar(&f.MaxSessionsPerClient, "max-sessions-per-client", f.MaxSessionsPerClient, "HTTP sessions one client address holds at once, at most; 0: no share (env BREAKERD_MCP_MAX_SESSIONS_PER_CLIENT)")
	fs.StringSliceVar(&f.AllowedOrigins, "allowed-origins", nil, "browser origins served over HTTP besides loopback ones (env BREAKERD_MCP_ALLOWED_ORIGINS)")
	fs.DurationVar(&f.SessionIdleTimeout, "session-idle-timeout", f.SessionIdleTimeout, "close an HTTP session idle this long (env BREAKERD_MCP_SESSION_IDLE_TIMEOUT)")
	fs.BoolVar(&f.TLS, "tls", false, "connect to breakerd over TLS (env BREAKERD_MCP_TLS)")
	fs.StringVar(&f.TLSCA, "tls-ca", "", "PEM file of the CA of breakerd's certificate; implies --tls (env BREAKERD_MCP_TLS_CA)")
	fs.StringVar(&f.MetricsListen, "metrics-listen", "", "serve Prometheus metrics at /metrics on this address; empty: none (env BREAKERD_MCP_METRICS_LISTEN)")
	fs.StringVar(&f.LogFormat, "log-format", f.LogFormat, "text or json (env BREAKERD_MCP_LOG_FORMAT)")
	fs.StringVar(&f.LogLevel, "log-level", f.LogLevel, "least severe level logged: debug, info, warn or error (env BREAKERD_MCP_LOG_LEVEL)")
	fs.StringVar(&f.Sandbox, "sandbox", f.Sandbox, "command upstreams in the Landlock sandbox: auto, required or off (env BREAKERD_MCP_SANDBOX)")
	fs.BoolVar(&f.ShowVersion, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return Flags{}, err
	}
	if fs.NArg() > 0 {
		return Flags{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if getenv(envPrefix+"TOKEN") != "" {
		return Flags{}, errors.New(envPrefix + "TOKEN: no longer read, since every command upstream would inherit it; " +
			"put the token in a file only you can write and pass --token-file")
	}
	if err := applyEnv(fs, getenv, &f); err != nil {
		return Flags{}, err
	}
	if f.ShowVersion {
		return f, nil
	}
	if err := f.validate(); err != nil {
		return Flags{}, err
	}
	return f, nil
}

// applyEnv sets each flag not given on the command line from its
// BREAKERD_MCP_* variable, naming the variable in an error.
func applyEnv(fs *pflag.FlagSet, getenv func(string) string, f *Flags) error {
	env := func(flag, suffix string, set func(string) error) error {
		name := envPrefix + suffix
		if v := getenv(name); v != "" && !fs.Changed(flag) {
			if err := set(v); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		return nil
	}
	str := func(p *string) func(string) error { return func(v string) error { *p = v; return nil } }
	for _, e := range []error{
		env("config", "CONFIG", str(&f.ConfigFile)),
		env("breakerd", "BREAKERD", str(&f.Breakerd)),
		env("worker-id", "WORKER_ID", str(&f.WorkerID)),
		env("listen", "LISTEN", str(&f.Listen)),
		env("fallback", "FALLBACK", str(&f.Fallback)),
		env("token-file", "TOKEN_FILE", str(&f.TokenFile)),
		env("listen-token-file", "LISTEN_TOKEN_FILE", str(&f.ListenTokenFile)),
		env("listen-tls-cert", "LISTEN_TLS_CERT", str(&f.ListenTLSCert)),
		env("listen-tls-key", "LISTEN_TLS_KEY", str(&f.ListenTLSKey)),
		env("tls-ca", "TLS_CA", str(&f.TLSCA)),
		env("metrics-listen", "METRICS_LISTEN", str(&f.MetricsListen)),
		env("log-format", "LOG_FORMAT", str(&f.LogFormat)),
		env("log-level", "LOG_LEVEL", str(&f.LogLevel)),
		env("sandbox", "SANDBOX", str(&f.Sandbox)),
		env("tls", "TLS", func(v string) (err error) {
			f.TLS, err = strconv.ParseBool(v)
			return err
		}),
		env("allow-budget", "ALLOW_BUDGET", func(v string) (err error) {
			f.AllowBudget, err = time.ParseDuration(v)
			return err
		}),
		env("max-sessions", "MAX_SESSIONS", func(v string) (err error) {
			f.MaxSessions, err = strconv.Atoi(v)
			return err
		}),
		env("max-sessions-per-client", "MAX_SESSIONS_PER_CLIENT", func(v string) (err error) {
			f.MaxSessionsPerClient, err = strconv.Atoi(v)
			return err
		}),
		env("allowed-origins", "ALLOWED_ORIGINS", func(v string) error {
			f.AllowedOrigins = strings.Split(v, ",")
			return nil
		}),
		env("session-idle-timeout", "SESSION_IDLE_TIMEOUT", func(v string) (err error) {
			f.SessionIdleTimeout, err = time.ParseDuration(v)
			return err
		}),
	} {
		if e != nil {
			return e
		}
	}
	return nil
}

// validate checks the flags once parsed, naming the flag at fault.
func (f Flags) validate() error {
	switch {
	case f.ConfigFile == "":
		return errors.New("--config: is required")
	case f.Breakerd == "":
		return errors.New("--breakerd: is required")
	case f.WorkerID == "":
		return errors.New("--worker-id: must not be empty")
	case logging.CheckFormat(f.LogFormat) != nil:
		return fmt.Errorf("--log-format: %w", logging.CheckFormat(f.LogFormat))
	case levelErr(f.LogLevel) != nil:
		return fmt.Errorf("--log-level: %w", levelErr(f.LogLevel))
	case checkSandboxMode(f.Sandbox) != nil:
		return fmt.Errorf("--sandbox: %w", checkSandboxMode(f.Sandbox))
	case f.Fallback != "local" && f.Fallback != "closed":
		return fmt.Errorf("--fallback: must be local or closed, got %q", f.Fallback)
	case f.AllowBudget < 0:
		return fmt.Errorf("--allow-budget: must not be negative, got %s", f.AllowBudget)
	case f.MaxSessions <= 0:
		return fmt.Errorf("--max-sessions: must be positive, got %d", f.MaxSessions)
	case f.MaxSessionsPerClient < 0:
		return fmt.Errorf("--max-sessions-per-client: must not be negative, got %d", f.MaxSessionsPerClient)
	case originsErr(f.AllowedOrigins) != nil:
		return fmt.Errorf("--allowed-origins: %w", originsErr(f.AllowedOrigins))
	case f.SessionIdleTimeout <= 0:
		return fmt.Errorf("--session-idle-timeout: must be positive, got %s", f.SessionIdleTimeout)
	case (f.ListenTLSCert == "") != (f.ListenTLSKey == ""):
		return errors.New("--listen-tls-cert: --listen-tls-cert and --listen-tls-key go together")
	case f.Listen != "" && f.ListenTokenFile == "" && !auth.IsLoopback(f.Listen):
		return fmt.Errorf("--listen: %s is not a loopback address and no --listen-token-file is set: "+
			"anyone reaching it could use the gateway's token and upstreams; set --listen-token-file", f.Listen)
	}
	return nil
}

// originsErr is the first of origins that CheckOrigin refuses, if any.
func originsErr(origins []string) error {
	for _, o := range origins {
		if err := CheckOrigin(o); err != nil {
			return err
		}
	}
	return nil
}

// levelErr is logging.ParseLevel's error for s, if any.
func levelErr(s string) error {
	_, err := logging.ParseLevel(s)
	return err
}

// Logger returns the gateway's logger on w, in f's format and level.
func (f Flags) Logger(w io.Writer) *slog.Logger {
	level, _ := logging.ParseLevel(f.LogLevel) // checked by ParseFlags
	return logging.New(w, f.LogFormat, level)
}

// readToken reads a token file named by flag (empty: no token), warning
// when every local user may read it.
func readToken(flag, name string, log *slog.Logger) (string, error) {
	if name == "" {
		return "", nil
	}
	tok, worldReadable, err := secretfile.ReadPassword(name)
	if err != nil {
		return "", fmt.Errorf("--%s: %w", flag, err)
	}
	if worldReadable {
		log.Warn("breakerd-mcp: token file is readable by every local user; chmod o-r it", "flag", "--"+flag, "file", name)
	}
	return tok, nil
}

// credentials are the transport credentials to breakerd: plaintext, or
// TLS with the system's roots or TLSCA.
func (f Flags) credentials() (credentials.TransportCredentials, error) {
	if !f.TLS && f.TLSCA == "" {
		return insecure.NewCredentials(), nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.TLSCA != "" {
		pem, err := os.ReadFile(f.TLSCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca: %s holds no PEM certificate", f.TLSCA)
		}
		cfg.RootCAs = pool
	}
	return credentials.NewTLS(cfg), nil
}

// Serve runs the gateway until ctx ends (or, over stdio, until the agent
// hangs up): it connects to breakerd and the upstreams, then serves one
// stdio session on stdin and stdout, or Streamable HTTP on f.Listen. The
// HTTP server stops within 10s of ctx ending. Errors: the config file, a
// token file, an upstream that cannot be listed, the listener.
func Serve(ctx context.Context, f Flags, stdin io.ReadCloser, stdout io.WriteCloser, log *slog.Logger, version string) error {
	cfg, err := LoadConfig(f.ConfigFile)
	if err != nil {
		return err
	}
	conn, err := f.dial(log)
	if err != nil {
		return err
	}
	defer conn.Close()
	mode := client.FailOpenLocal
	if f.Fallback == "closed" {
		mode = client.FailClosed
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	g, err := New(ctx, Options{Config: cfg, Conn: conn, WorkerID: f.WorkerID, Log: log, Version: version,
		UpstreamStderr: os.Stderr, Registerer: reg, Sandbox: SandboxOptions{Mode: f.Sandbox, Deny: f.ownFiles()},
		ClientOptions: []client.Option{client.WithAllowBudget(f.AllowBudget), client.WithFallback(mode)}})
	if err != nil {
		return err
	}
	defer g.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watched := make(chan struct{})
	go func() { defer close(watched); _ = g.Run(ctx) }()
	defer func() { cancel(); <-watched }()
	if f.MetricsListen != "" {
		stopMetrics, err := serveMetrics(f.MetricsListen, reg, log)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}
	log.Info("breakerd-mcp: serving", "tools", len(g.Tools()), "refused", len(g.refused), "worker", f.WorkerID,
		"breakerd", f.Breakerd, "listen", f.Listen)
	if f.Listen == "" {
		return g.serveStdio(ctx, stdin, stdout)
	}
	return g.serveHTTP(ctx, f, log)
}

// ownFiles are the gateway's config and secret files, which a sandboxed
// upstream may not touch. Certificates are public (and --tls-ca may be
// the system's bundle, which upstreams need).
func (f Flags) ownFiles() []string {
	var out []string
	for _, p := range []string{f.ConfigFile, f.TokenFile, f.ListenTokenFile, f.ListenTLSKey} {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// dial opens the connection to breakerd, with the token of --token-file.
func (f Flags) dial(log *slog.Logger) (*grpc.ClientConn, error) {
	creds, err := f.credentials()
	if err != nil {
		return nil, err
	}
	token, err := readToken("token-file", f.TokenFile, log)
	if err != nil {
		return nil, err
	}
	dial := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		// Reconnect within seconds of breakerd's return, as client.Dial does.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	}
	if token != "" {
		dial = append(dial, grpc.WithPerRPCCredentials(client.TokenCredentials(token)))
	}
	// Each tools/call's decision on a span, the daemon's in its trace
	// (docs/observability.md), when the process has a TracerProvider.
	dial = append(dial, client.TraceDialOptions()...)
	conn, err := grpc.NewClient(f.Breakerd, dial...)
	if err != nil {
		return nil, fmt.Errorf("--breakerd %q: %w", f.Breakerd, err)
	}
	return conn, nil
}

// serveStdio serves one session on stdin and stdout until the agent hangs
// up or ctx ends.
func (g *Gateway) serveStdio(ctx context.Context, stdin io.ReadCloser, stdout io.WriteCloser) error {
	ss, err := g.Connect(ctx, &mcp.IOTransport{Reader: stdin, Writer: stdout})
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- ss.Wait() }()
	select {
	case <-done:
	case <-ctx.Done():
		_ = ss.Close()
		<-done
	}
	return nil
}

// serveMetrics serves reg's metrics at /metrics on addr until the
// returned stop is called.
func serveMetrics(addr string, reg *prometheus.Registry, log *slog.Logger) (stop func(), err error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	log.Info("breakerd-mcp: serving metrics", "addr", "http://"+lis.Addr().String()+"/metrics")
	return func() { _ = srv.Close() }, nil
}

// httpOptions are the HTTP bounds f sets, with the agents' token.
func (f Flags) httpOptions(token string) HTTPOptions {
	perClient := f.MaxSessionsPerClient
	if perClient == 0 {
		perClient = -1 // no share
	}
	return HTTPOptions{Token: token, MaxSessions: f.MaxSessions, MaxSessionsPerClient: perClient,
		AllowedOrigins: f.AllowedOrigins, IdleTimeout: f.SessionIdleTimeout}
}

// serveHTTP serves Streamable HTTP on f.Listen (over TLS with its pair)
// until ctx ends, then stops within 10s.
func (g *Gateway) serveHTTP(ctx context.Context, f Flags, log *slog.Logger) error {
	token, err := readToken("listen-token-file", f.ListenTokenFile, log)
	if err != nil {
		return err
	}
	if token == "" {
		log.Warn("breakerd-mcp: no --listen-token-file: any local process may use the gateway", "listen", f.Listen)
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10,
		Handler: g.Handler(f.httpOptions(token))}
	if f.ListenTLSCert != "" {
		cfg, err := auth.ServerTLS(f.ListenTLSCert, f.ListenTLSKey, "")
		if err != nil {
			return fmt.Errorf("--listen-tls-cert: %w", err)
		}
		srv.TLSConfig = cfg
	}
	lis, err := net.Listen("tcp", f.Listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	tlsOn := srv.TLSConfig != nil // read before Serve, which writes the config
	if tlsOn {
		lis = tls.NewListener(lis, srv.TLSConfig)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	log.Info("breakerd-mcp: listening", "addr", lis.Addr().String(), "tls", tlsOn, "mcp", "/mcp", "health", "/healthz")
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	return nil
}
