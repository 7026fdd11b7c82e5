// Package daemon assembles breakerd: configuration, the Redis connection
// (or an embedded in-memory Redis), the gRPC server with health and
// reflection, the live-event hub, and one bounded shutdown path.
package daemon

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/breakerd/breakerd/internal/auth"
	"github.com/breakerd/breakerd/internal/cli"
	"github.com/breakerd/breakerd/internal/httpapi"
	"github.com/breakerd/breakerd/internal/limits"
	"github.com/breakerd/breakerd/internal/logging"
	"github.com/breakerd/breakerd/internal/metrics"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tracing"
)

// Config is the daemon's configuration. Every field has a flag and a
// BREAKERD_* environment variable (the flag wins); tests build it directly.
type Config struct {
	// Listen is the gRPC address. Default 127.0.0.1:7070 (loopback only).
	// Flag --listen, env BREAKERD_LISTEN.
	Listen string
	// RedisURL is the shared Redis, e.g. redis://127.0.0.1:6379/0 or
	// rediss://user:pass@host:6380; with master_name in the query it names
	// Sentinels (redis://sentinel1:26379/0?master_name=mymaster&addr=sentinel2:26379);
	// see RedisOptions for every form. Empty: an embedded in-memory Redis
	// whose state is neither shared nor persisted. Flag --redis-url, env
	// BREAKERD_REDIS_URL.
	RedisURL string
	// RedisCluster reads RedisURL as a Redis Cluster URL
	// (redis://host1:6379?addr=host2:6379&addr=host3:6379). Default false.
	// Flag --redis-cluster, env BREAKERD_REDIS_CLUSTER (true/false).
	RedisCluster bool
	// RedisOutage says what the daemon answers while Redis is unreachable
	// (connection errors, or 3 commands in a row timing out): "memory"
	// (the default) answers from this daemon's own in-memory breakers, the
	// same state machine as the scripts, fed by every worker connected to
	// it and seeded from the last events it heard, each answer marked
	// degraded; back on Redis within 200 ms of it answering, whose state
	// wins. "unavailable" fails each Allow and Record with Unavailable, so
	// every worker's client applies its own fallback. Empty means memory.
	// Flag --redis-outage, env BREAKERD_REDIS_OUTAGE.
	RedisOutage string
	// RedisDecisionTimeout is this daemon's own bound on each decision
	// script (Allow, Record), whatever the caller's deadline: one still
	// unanswered after it counts as Redis failing, so that a Redis that
	// stalls (a link that forwards nothing, a frozen process, slow
	// replies) is an outage as one that refuses is, and no call waits on
	// it past this bound. Reads (List, Events, savings) keep go-redis's
	// timeouts. 0 means store.DefaultDecisionTimeout, 300ms. Flag
	// --redis-decision-timeout, env BREAKERD_REDIS_DECISION_TIMEOUT.
	RedisDecisionTimeout time.Duration
	// PolicyFile is the YAML file of per-breaker policies. Empty: defaults
	// for every breaker. Flag --config, env BREAKERD_CONFIG.
	PolicyFile string
	// EventsMaxLen bounds each breaker's durable event stream. Default 1000.
	// Flag --events-max-len, env BREAKERD_EVENTS_MAX_LEN.
	EventsMaxLen int64
	// EventRetention is how long an idle breaker's event log is kept.
	// Default 168h. Flag --event-retention, env BREAKERD_EVENT_RETENTION.
	EventRetention time.Duration
	// DrainDelay is how long the daemon reports NOT_SERVING before it stops
	// accepting calls, so load balancers can move away. Default 0. Flag
	// --drain-delay, env BREAKERD_DRAIN_DELAY.
	DrainDelay time.Duration
	// ShutdownTimeout bounds the graceful stop; in-flight calls are cut
	// after it. Default 10s. Flag --shutdown-timeout, env
	// BREAKERD_SHUTDOWN_TIMEOUT.
	ShutdownTimeout time.Duration
	// HealthInterval is how often the health check asks Redis (loading any
	// script it lacks) to set the health status by its rule
	// (docs/reliability.md#health). Default 5s. Flag --health-interval, env BREAKERD_HEALTH_INTERVAL.
	HealthInterval time.Duration
	// LogFormat is text or json. Default text. Flag --log-format, env
	// BREAKERD_LOG_FORMAT.
	LogFormat string
	// LogLevel is the least severe level logged: debug, info, warn or
	// error. Default info. Flag --log-level, env BREAKERD_LOG_LEVEL.
	LogLevel string

	// TLSCert and TLSKey are PEM files that turn on TLS for the gRPC
	// listener (both or neither). Empty: plaintext. Flags --tls-cert,
	// --tls-key, env BREAKERD_TLS_CERT, BREAKERD_TLS_KEY.
	TLSCert, TLSKey string
	// TLSClientCA is a PEM CA bundle: when set, every client must present a
	// certificate that chains to it. Needs TLSCert. Empty: no client
	// certificates. Flag --tls-client-ca, env BREAKERD_TLS_CLIENT_CA.
	TLSClientCA string
	// TokensFile is the YAML file of bearer tokens and their roles (worker
	// or operator); with it every call but health and reflection needs a
	// token. Empty: no auth, and Listen must be loopback unless
	// InsecureListenAny. Flag --tokens, env BREAKERD_TOKENS.
	TokensFile string
	// InsecureListenAny lets the daemon listen on a non-loopback address
	// without tokens, so that anyone who reaches it may Force breakers.
	// Default false. Flag --insecure-listen-any, env
	// BREAKERD_INSECURE_LISTEN_ANY (true or false).
	InsecureListenAny bool
	// HooksFile is the YAML file of alert webhooks. Empty: no webhooks.
	// Flag --hooks, env BREAKERD_HOOKS.
	HooksFile string
	// MetricsListen is the HTTP address serving Prometheus metrics at
	// /metrics, e.g. 127.0.0.1:9464. Empty (the default): no metrics
	// listener, so that several daemons on one host never fight over a
	// port nobody asked for. Flag --metrics-listen, env
	// BREAKERD_METRICS_LISTEN.
	MetricsListen string
	// HTTPListen is the address of the HTTP/JSON API (docs/http-api.md):
	// every BreakerService RPC as POST /breakerd.v1.BreakerService/<Method>,
	// GET /healthz and the live events at GET /v1/watch, with the gRPC
	// listener's TLS, tokens and limits. Empty (the default): no HTTP
	// listener, so that several daemons on one host never fight over a
	// port nobody asked for. Flag --http-listen, env BREAKERD_HTTP_LISTEN.
	HTTPListen string
	// HTTPCORSOrigins are the origins (comma-separated, "*" for any) a
	// browser may call the HTTP API from. Empty (the default): CORS off,
	// so browsers refuse cross-origin calls. Flag --http-cors-origins, env
	// BREAKERD_HTTP_CORS_ORIGINS.
	HTTPCORSOrigins string
	// HTTPAllowedHosts are host names (comma-separated) the HTTP API
	// answers to besides IP addresses and localhost, when the HTTP
	// listener is loopback or there are no --tokens; a request naming
	// another Host is refused (421), so a web page cannot reach the API
	// by rebinding its own name to this address. Empty (the default): no
	// other name. Flag --http-allowed-hosts, env BREAKERD_HTTP_ALLOWED_HOSTS.
	HTTPAllowedHosts string
	// HTTPHeartbeat is how often an idle GET /v1/watch stream sends a
	// comment line, and an idle gRPC Watch stream a heartbeat message, so
	// that proxies keep them open and a client notices a stalled one.
	// Default httpapi.DefaultHeartbeat; 0 means it too. Flag
	// --http-heartbeat, env BREAKERD_HTTP_HEARTBEAT.
	HTTPHeartbeat time.Duration
	// CircuitsInterval is how often the daemon lists the fleet's breakers
	// (a Redis SCAN) to refresh the breakerd_circuits and
	// breakerd_open_circuits gauges and to seed the outage memory
	// (store.ListSeeding), with or without MetricsListen; a scrape reads
	// the last refresh and never Redis. Default (and zero) 30s. Flag
	// --circuits-interval, env BREAKERD_CIRCUITS_INTERVAL.
	CircuitsInterval time.Duration
	// MaxBreakerSeries caps the breakers that get Prometheus series of
	// their own (breakerd_breaker_state and the like: only those not
	// closed-and-healthy), refreshed with the circuit gauges; past it the
	// most urgent are kept and breakerd_breaker_series_dropped counts the
	// rest. Default (and what 0 means) metrics.DefaultMaxBreakerSeries,
	// 500; negative: none. Flag --max-breaker-series, env
	// BREAKERD_MAX_BREAKER_SERIES.
	MaxBreakerSeries int64
	// ConfigPoll is how often the policy, tokens and hooks files
	// (--config, --tokens, --hooks) are checked for a change of content,
	// which reloads them; SIGHUP reloads them at once. A rejected file
	// leaves the one in force. 0 disables polling (SIGHUP still works).
	// Default 5s. Flag --config-poll, env BREAKERD_CONFIG_POLL.
	ConfigPoll time.Duration

	// RedisPasswordFile is a file holding the Redis password (one line),
	// used instead of the password in RedisURL, so that the password is in
	// neither `ps` nor the environment. It must not be writable by group
	// or others. Empty: the URL's password, if any. Flag
	// --redis-password-file, env BREAKERD_REDIS_PASSWORD_FILE.
	RedisPasswordFile string
	// The listener limits: internal/limits (Listener) holds each one's
	// default and why; docs/security.md lists them.

	// MaxHeaderBytes bounds one call's header list (metadata), refused
	// before the token check. Default (and what 0 means) 16384. Flag --max-header-bytes, env
	// BREAKERD_MAX_HEADER_BYTES.
	MaxHeaderBytes int64
	// MaxRecvBytes bounds one request message, in bytes; a larger one is
	// refused (ResourceExhausted) as it is read. Default (and what 0
	// means) 524288 (512 KiB). Flag --max-recv-bytes, env BREAKERD_MAX_RECV_BYTES.
	MaxRecvBytes int64
	// MaxConns caps the connections open at once over every listener
	// (gRPC, metrics); past it a new one is closed at accept. Lowered to
	// the file limit less FDReserve. Default (and what 0 means) 4096. Flag --max-conns, env
	// BREAKERD_MAX_CONNS.
	MaxConns int64
	// FDReserve is the file descriptors MaxConns leaves to the daemon
	// (Redis, reloads, webhooks), so a connection flood never stops a
	// SIGHUP reload. 0: none. Default 256. Flag --fd-reserve, env
	// BREAKERD_FD_RESERVE.
	FDReserve int64
	// IdleTimeout closes a connection with no call open for this long.
	// Default (and what 0 means) 5m. Flag --idle-timeout, env BREAKERD_IDLE_TIMEOUT.
	IdleTimeout time.Duration
	// HandshakeTimeout closes a new connection that has not finished its
	// TLS and HTTP/2 handshake in this time. Default (and what 0 means)
	// 10s. Flag
	// --handshake-timeout, env BREAKERD_HANDSHAKE_TIMEOUT.
	HandshakeTimeout time.Duration
	// MaxConcurrentStreams bounds the calls one connection may have open at
	// once (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS); more wait for a slot.
	// Default (and what 0 means) 256. Flag --max-concurrent-streams, env
	// BREAKERD_MAX_CONCURRENT_STREAMS.
	MaxConcurrentStreams int64
	// KeepaliveMinTime is the shortest interval between a client's
	// keepalive pings the daemon accepts; a client pinging faster is sent
	// GOAWAY (too_many_pings). Pings without calls open are allowed.
	// Default (and what 0 means) 10s. Flag --keepalive-min-time, env
	// BREAKERD_KEEPALIVE_MIN_TIME.
	KeepaliveMinTime time.Duration
	// OpenMaxStreams caps the streams that need no token (health Watch,
	// reflection) open at once on this daemon; past it they are
	// ResourceExhausted. Default (and what 0 means) 100. Flag --open-max-streams, env
	// BREAKERD_OPEN_MAX_STREAMS.
	OpenMaxStreams int64
	// OpenMaxStreamsPerSource caps the OpenMaxStreams one source (an IPv4
	// address, an IPv6 /64) holds on connections that have made no
	// authenticated call. 0: no share (listeners behind a proxy, NAT or
	// L4 balancer). Default 10. Flag --open-max-streams-per-source, env
	// BREAKERD_OPEN_MAX_STREAMS_PER_SOURCE.
	OpenMaxStreamsPerSource int64
	// PreAuthIdle closes a connection that has made no authenticated call
	// (with no --tokens: no successful API call) once it starts no call
	// for this long, and ends a health Watch on it that sent nothing for
	// as long. Default (and what 0 means) 30s. Flag --preauth-idle, env
	// BREAKERD_PREAUTH_IDLE.
	PreAuthIdle time.Duration
	// PreAuthConnsPerSource caps the connections without an authenticated
	// call one source (an IPv4 address, an IPv6 /64) holds; its next
	// evicts its longest-idle. 0: no cap, for listeners behind a proxy,
	// NAT or L4 balancer, where every worker shares an address. Default
	// 64. Flag --preauth-conns-per-source, env
	// BREAKERD_PREAUTH_CONNS_PER_SOURCE.
	PreAuthConnsPerSource int64
	// ReadsPerToken caps the read calls (Get, BatchGet, List, Events, and
	// a GET /v1/watch snapshot while it is read) one token has in flight
	// at once on this daemon (without --tokens: one connection), refused
	// ResourceExhausted before the request is decoded. 0: no cap. Default 16. Flag --reads-per-token, env
	// BREAKERD_READS_PER_TOKEN.
	ReadsPerToken int64
	// ListMaxUnpaged is the most breakers a List with page_size 0
	// answers; past it that List is ResourceExhausted (never cut short)
	// and the caller pages. Default (and what 0 means) 10000. Flag --list-max-unpaged, env
	// BREAKERD_LIST_MAX_UNPAGED.
	ListMaxUnpaged int64
	// WatchMaxStreams caps the Watch streams this daemon serves at once;
	// past it a Watch is ResourceExhausted. 0: no cap. Default 1000. Flag
	// --watch-max-streams, env BREAKERD_WATCH_MAX_STREAMS.
	WatchMaxStreams int64
	// WatchMaxStreamsPerToken caps the Watch streams one token (without
	// --tokens: one connection) holds at once on this daemon, refused
	// before the request is decoded. 0: no cap. Default 32. Flag --watch-max-streams-per-token, env
	// BREAKERD_WATCH_MAX_STREAMS_PER_TOKEN.
	WatchMaxStreamsPerToken int64
	// NewBreakersPerMinute is how many breakers one token may name per
	// minute that this daemon has not seen and that hold no state, with a
	// burst of as many; past it Allow and Record are ResourceExhausted.
	// Kept per daemon: a fleet of N admits N times it. 0: no quota.
	// Default 600. Flag --new-breakers-per-minute, env
	// BREAKERD_NEW_BREAKERS_PER_MINUTE.
	NewBreakersPerMinute int64
	// AlertsPerMinute is how many of the alerts one token's Records raise
	// (any kind) hooks send per minute, with a burst of as many; past it
	// the Records are answered, their alerts logged marked quiet, and
	// hooks send one a minute per token with a summary. Per daemon. 0: no
	// quota. Default 60. Flag --alerts-per-minute, env
	// BREAKERD_ALERTS_PER_MINUTE.
	AlertsPerMinute int64
	// MaxBreakers is the ceiling on live breakers (breakers
	// holding state or an event log) in the whole fleet, counted in Redis (store.LiveKey);
	// past it a Record that would create state for a new breaker is
	// ResourceExhausted naming the ceiling. Breakers holding state keep
	// working, Force is never refused. 0 (the default): no ceiling. Flag
	// --max-breakers, env BREAKERD_MAX_BREAKERS.
	MaxBreakers int64

	// CheckConfig, when set, makes breakerd check this policy file instead
	// of serving: it validates it, prints its warnings and the effective
	// policy of each breaker named as an argument, and exits (1 on an
	// error). No environment variable: a variable left in a daemon's
	// environment would stop it from serving. Flag --check-config.
	CheckConfig string
	// Names are the positional arguments: the breakers whose effective
	// policy --check-config prints. Only with CheckConfig.
	Names []string
	// Tracing says whether and how the daemon exports traces over OTLP:
	// no flag and no BREAKERD_* variable, but the standard OTEL_*
	// environment, read by ParseConfig (docs/observability.md#the-daemon).
	// The zero value exports nothing and installs no instrumentation.
	Tracing tracing.Env
}

// Defaults returns the configuration with every field at its default.
func Defaults() Config {
	return Config{
		Listen:               "127.0.0.1:7070",
		EventsMaxLen:         1000,
		EventRetention:       168 * time.Hour,
		ShutdownTimeout:      10 * time.Second,
		HealthInterval:       5 * time.Second,
		RedisDecisionTimeout: store.DefaultDecisionTimeout,
		LogFormat:            "text",
		LogLevel:             "info",
		ConfigPoll:           5 * time.Second,
		CircuitsInterval:     30 * time.Second,
		HTTPHeartbeat:        httpapi.DefaultHeartbeat,
		MaxBreakerSeries:     metrics.DefaultMaxBreakerSeries,

		MaxHeaderBytes:          limits.DefaultMaxHeaderBytes,
		MaxRecvBytes:            limits.DefaultMaxRecvBytes,
		MaxConns:                limits.DefaultMaxConns,
		FDReserve:               limits.DefaultFDReserve,
		IdleTimeout:             limits.DefaultIdleTimeout,
		HandshakeTimeout:        limits.DefaultHandshakeTimeout,
		MaxConcurrentStreams:    limits.DefaultMaxConcurrentStreams,
		KeepaliveMinTime:        limits.DefaultKeepaliveMinTime,
		OpenMaxStreams:          limits.DefaultOpenStreams,
		OpenMaxStreamsPerSource: limits.DefaultOpenStreamsPerSource,
		PreAuthIdle:             limits.DefaultPreAuthIdle,
		PreAuthConnsPerSource:   limits.DefaultPreAuthPerSource,
		ReadsPerToken:           limits.DefaultReadsPerToken,
		ListMaxUnpaged:          limits.DefaultListMaxUnpaged,
		WatchMaxStreams:         1000,
		WatchMaxStreamsPerToken: limits.DefaultWatchesPerToken,
		NewBreakersPerMinute:    600,
		AlertsPerMinute:         60,
	}
}

// EnvPrefix starts every breakerd environment variable:
// cli.EnvName(EnvPrefix, "redis-url") is BREAKERD_REDIS_URL.
const EnvPrefix = "BREAKERD"

// Flags is the flag table: one row per field of c, in the order --help and
// docs/configuration.md list them. Each row's environment variable is derived from
// its name (BREAKERD_ + the name upper-cased, dashes as underscores).
func (c *Config) Flags() []cli.Flag {
	return []cli.Flag{
		{Name: "listen", Value: &c.Listen, Usage: "gRPC listen address"},
		{Name: "redis-url", Value: &c.RedisURL, Usage: "shared Redis URL (redis:// or rediss://); empty: embedded in-memory Redis"},
		{Name: "redis-cluster", Value: &c.RedisCluster, Usage: "read --redis-url as a Redis Cluster URL"},
		{Name: "redis-outage", Value: &c.RedisOutage, Usage: "while Redis is unreachable: memory (answer from this daemon's breakers, degraded) or unavailable (fail calls)"},
		{Name: "redis-decision-timeout", Value: &c.RedisDecisionTimeout, Usage: "this daemon's bound on each Allow and Record script: one unanswered after it counts as Redis failing (a stall is an outage)"},
		{Name: "config", Value: &c.PolicyFile, Usage: "YAML policy file (defaults and per-breaker overrides)"},
		{Name: "events-max-len", Value: &c.EventsMaxLen, Usage: "entries kept in each breaker's event stream (approximate)"},
		{Name: "event-retention", Value: &c.EventRetention, Usage: "how long an idle breaker's event log is kept"},
		{Name: "drain-delay", Value: &c.DrainDelay, Usage: "time spent NOT_SERVING before stopping"},
		{Name: "shutdown-timeout", Value: &c.ShutdownTimeout, Usage: "bound on the graceful stop"},
		{Name: "health-interval", Value: &c.HealthInterval, Usage: "how often Redis is pinged for health"},
		{Name: "log-format", Value: &c.LogFormat, Usage: "text or json"},
		{Name: "log-level", Value: &c.LogLevel, Usage: "least severe level logged: debug, info, warn or error"},
		{Name: "tls-cert", Value: &c.TLSCert, Usage: "PEM certificate for the gRPC listener (with --tls-key)"},
		{Name: "tls-key", Value: &c.TLSKey, Usage: "PEM private key for the gRPC listener (with --tls-cert)"},
		{Name: "tls-client-ca", Value: &c.TLSClientCA, Usage: "PEM CA bundle; when set, clients must present a certificate it signed"},
		{Name: "tokens", Value: &c.TokensFile, Usage: "YAML file of bearer tokens with roles (worker, operator); empty: no auth, loopback only"},
		{Name: "insecure-listen-any", Value: &c.InsecureListenAny, Usage: "allow a non-loopback --listen without --tokens (anyone reaching it may Force)"},
		{Name: "hooks", Value: &c.HooksFile, Usage: "YAML file of alert webhooks"},
		{Name: "metrics-listen", Value: &c.MetricsListen, Usage: "HTTP address for Prometheus /metrics; empty: no metrics listener"},
		{Name: "http-listen", Value: &c.HTTPListen, Usage: "HTTP/JSON API address (docs/http-api.md); empty: no HTTP listener"},
		{Name: "http-cors-origins", Value: &c.HTTPCORSOrigins, Usage: "origins (comma-separated, * for any) browsers may call the HTTP API from; empty: CORS off"},
		{Name: "http-allowed-hosts", Value: &c.HTTPAllowedHosts, Usage: "host names (comma-separated) the HTTP API answers to besides IP addresses and localhost, on a loopback listener or without --tokens"},
		{Name: "http-heartbeat", Value: &c.HTTPHeartbeat, Usage: "how often an idle GET /v1/watch stream sends a heartbeat comment, and an idle gRPC Watch stream a heartbeat message"},
		{Name: "circuits-interval", Value: &c.CircuitsInterval, Usage: "how often the fleet's breakers are listed for the circuit gauges and the outage memory (scrapes read the last listing)"},
		{Name: "max-breaker-series", Value: &c.MaxBreakerSeries, Usage: "breakers (not closed-and-healthy) with Prometheus series of their own, at most (0: the default 500; negative: none)"},
		{Name: "config-poll", Value: &c.ConfigPoll, Usage: "how often the --config, --tokens and --hooks files are checked for changes (0: only on SIGHUP)"},
		{Name: "redis-password-file", Value: &c.RedisPasswordFile, Usage: "file holding the Redis password (instead of the URL's)"},
		{Name: "max-header-bytes", Value: &c.MaxHeaderBytes, Usage: "largest header list (metadata) of a call, in bytes; refused before the token check"},
		{Name: "max-recv-bytes", Value: &c.MaxRecvBytes, Usage: "largest request message accepted, in bytes"},
		{Name: "max-conns", Value: &c.MaxConns, Usage: "connections open at once over every listener (lowered to the file limit less --fd-reserve)"},
		{Name: "fd-reserve", Value: &c.FDReserve, Usage: "file descriptors kept free of connections for Redis, reloads and webhooks"},
		{Name: "idle-timeout", Value: &c.IdleTimeout, Usage: "close a connection with no call open for this long"},
		{Name: "handshake-timeout", Value: &c.HandshakeTimeout, Usage: "close a new connection whose TLS and HTTP/2 handshake takes longer"},
		{Name: "max-concurrent-streams", Value: &c.MaxConcurrentStreams, Usage: "calls one connection may have open at once"},
		{Name: "keepalive-min-time", Value: &c.KeepaliveMinTime, Usage: "shortest interval between client keepalive pings accepted"},
		{Name: "open-max-streams", Value: &c.OpenMaxStreams, Usage: "streams needing no token (health Watch, reflection) open at once"},
		{Name: "open-max-streams-per-source", Value: &c.OpenMaxStreamsPerSource, Usage: "of those, held by one source (IPv4 address, IPv6 /64) on connections without an authenticated call (0: no share, behind a balancer)"},
		{Name: "preauth-idle", Value: &c.PreAuthIdle, Usage: "close a connection without an authenticated call that starts no call for this long"},
		{Name: "preauth-conns-per-source", Value: &c.PreAuthConnsPerSource, Usage: "connections without an authenticated call one source (IPv4 address, IPv6 /64) holds; its next evicts its longest-idle (0: no cap, behind a balancer)"},
		{Name: "reads-per-token", Value: &c.ReadsPerToken, Usage: "read calls (Get, BatchGet, List, Events, a /v1/watch snapshot) one token has in flight at once (0: no cap)"},
		{Name: "list-max-unpaged", Value: &c.ListMaxUnpaged, Usage: "most breakers a List without page_size answers; past it, page"},
		{Name: "watch-max-streams", Value: &c.WatchMaxStreams, Usage: "Watch streams served at once (0: no cap)"},
		{Name: "watch-max-streams-per-token", Value: &c.WatchMaxStreamsPerToken, Usage: "Watch streams one token holds at once (0: no cap)"},
		{Name: "new-breakers-per-minute", Value: &c.NewBreakersPerMinute, Usage: "new breakers one token may name per minute on this daemon (0: no quota)"},
		{Name: "max-breakers", Value: &c.MaxBreakers, Usage: "ceiling on live breakers (holding state or an event log) in the fleet; past it a call that would create a new one gets ResourceExhausted (0: no ceiling)"},
		{Name: "alerts-per-minute", Value: &c.AlertsPerMinute, Usage: "alerts one token's Records may have sent to hooks per minute on this daemon; past it they are summarised, one a minute (0: no quota)"},
		{Name: "check-config", Value: &c.CheckConfig, Env: "-", Usage: "check this policy file and exit: print its warnings and, for each NAME argument, the effective policy"},
	}
}

const help = `breakerd is the fleet-wide circuit breaker for AI-agent tool calls: a gRPC
daemon (breakerd.v1.BreakerService, grpc.health.v1) keeping every breaker's
state in one shared Redis.

Every flag also reads the environment variable shown with it; the flag wins.
`

// ParseConfig reads args (without the program name) and, for each flag not
// given, its BREAKERD_* environment variable through getenv, then
// validates. --help and --version print to stdout and return cli.ErrHelp;
// a bad flag, variable or value is a *cli.UsageError naming it.
func ParseConfig(args []string, getenv func(string) string, stdout io.Writer) (Config, error) {
	c := Defaults()
	cmd := cli.Command{Name: "breakerd", Synopsis: "[flags] | --check-config FILE [NAME...]", Help: help,
		EnvPrefix: EnvPrefix, Flags: c.Flags(), MaxArgs: limits.MaxBatch}
	names, err := cmd.Parse(args, getenv, stdout)
	if err != nil {
		return c, err
	}
	if c.CheckConfig != "" {
		// Checking a file serves nothing: the serving flags are not judged.
		c.Names = names
		return c, nil
	}
	if len(names) > 0 {
		return c, cli.Usagef("unexpected argument %q (NAME arguments go with --check-config)", names[0])
	}
	if c.Tracing, err = tracing.ReadEnv(getenv); err != nil {
		return c, &cli.UsageError{Err: err}
	}
	if err := c.Validate(); err != nil {
		return c, &cli.UsageError{Err: err}
	}
	return c, nil
}

// Validate reports the first invalid field, naming its flag.
func (c Config) Validate() error {
	switch {
	case c.Listen == "":
		return errors.New("--listen: is required")
	case c.EventsMaxLen < 1:
		return fmt.Errorf("--events-max-len: must be at least 1, got %d", c.EventsMaxLen)
	case c.EventRetention < time.Minute:
		return fmt.Errorf("--event-retention: must be at least 1m, got %s", c.EventRetention)
	case c.DrainDelay < 0:
		return fmt.Errorf("--drain-delay: must not be negative, got %s", c.DrainDelay)
	case c.ShutdownTimeout <= 0:
		return fmt.Errorf("--shutdown-timeout: must be positive, got %s", c.ShutdownTimeout)
	case c.HealthInterval <= 0:
		return fmt.Errorf("--health-interval: must be positive, got %s", c.HealthInterval)
	case c.RedisDecisionTimeout < 0:
		return fmt.Errorf("--redis-decision-timeout: must not be negative, got %s", c.RedisDecisionTimeout)
	case logging.CheckFormat(c.LogFormat) != nil:
		return fmt.Errorf("--log-format: %w", logging.CheckFormat(c.LogFormat))
	case logLevelErr(c.LogLevel) != nil:
		return fmt.Errorf("--log-level: %w", logLevelErr(c.LogLevel))
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return errors.New("--tls-cert: --tls-cert and --tls-key go together")
	case c.TLSClientCA != "" && c.TLSCert == "":
		return errors.New("--tls-client-ca: needs --tls-cert and --tls-key")
	case c.TokensFile == "" && !c.InsecureListenAny && !auth.IsLoopback(c.Listen):
		return fmt.Errorf("--listen: %s is not a loopback address and no --tokens are set: anyone reaching it could force breakers; set --tokens, or --insecure-listen-any to accept that", c.Listen)
	case c.TokensFile == "" && !c.InsecureListenAny && c.HTTPListen != "" && !auth.IsLoopback(c.HTTPListen):
		return fmt.Errorf("--http-listen: %s is not a loopback address and no --tokens are set: anyone reaching it could force breakers; set --tokens, or --insecure-listen-any to accept that", c.HTTPListen)
	case c.HTTPCORSOrigins != "" && c.HTTPListen == "":
		return errors.New("--http-cors-origins: needs --http-listen")
	case c.HTTPHeartbeat < 0:
		return fmt.Errorf("--http-heartbeat: must not be negative, got %s", c.HTTPHeartbeat)
	case c.CircuitsInterval < 0:
		return fmt.Errorf("--circuits-interval: must not be negative, got %s", c.CircuitsInterval)
	case c.MaxBreakerSeries > 1<<20:
		return fmt.Errorf("--max-breaker-series: must be at most %d, got %d", 1<<20, c.MaxBreakerSeries)
	case c.ConfigPoll < 0:
		return fmt.Errorf("--config-poll: must not be negative, got %s", c.ConfigPoll)
	}
	return c.validateListener()
}

// logLevelErr is logging.ParseLevel's error for s, if any.
func logLevelErr(s string) error {
	_, err := logging.ParseLevel(s)
	return err
}

// validateListener reports the first invalid listener limit.
func (c Config) validateListener() error {
	// 0 is the default for each but reads-per-token and fd-reserve
	// (none), which accept it as a value.
	between := func(flag string, v, lo, hi int64) error {
		if v != 0 && (v < lo || v > hi) || v < 0 {
			return fmt.Errorf("--%s: must be between %d and %d, got %d", flag, lo, hi, v)
		}
		return nil
	}
	for _, err := range []error{
		between("max-header-bytes", c.MaxHeaderBytes, 1<<10, 16<<20),
		between("max-recv-bytes", c.MaxRecvBytes, 4<<10, 64<<20),
		between("max-conns", c.MaxConns, 1, 1<<20),
		between("fd-reserve", c.FDReserve, 0, 1<<20),
		between("max-concurrent-streams", c.MaxConcurrentStreams, 1, 1<<20),
		between("open-max-streams", c.OpenMaxStreams, 1, 1<<20),
		between("open-max-streams-per-source", c.OpenMaxStreamsPerSource, 0, 1<<20),
		between("preauth-conns-per-source", c.PreAuthConnsPerSource, 0, 1<<20),
		between("reads-per-token", c.ReadsPerToken, 0, 1<<20),
		between("list-max-unpaged", c.ListMaxUnpaged, 1, 1<<24),
	} {
		if err != nil {
			return err
		}
	}
	switch {
	case c.IdleTimeout < 0:
		return fmt.Errorf("--idle-timeout: must not be negative, got %s", c.IdleTimeout)
	case c.HandshakeTimeout < 0:
		return fmt.Errorf("--handshake-timeout: must not be negative, got %s", c.HandshakeTimeout)
	case c.PreAuthIdle < 0:
		return fmt.Errorf("--preauth-idle: must not be negative, got %s", c.PreAuthIdle)
	case c.KeepaliveMinTime < 0:
		return fmt.Errorf("--keepalive-min-time: must not be negative, got %s", c.KeepaliveMinTime)
	case c.WatchMaxStreams < 0 || c.WatchMaxStreams > 1<<20:
		return fmt.Errorf("--watch-max-streams: must be between 0 and 1048576, got %d", c.WatchMaxStreams)
	case c.WatchMaxStreamsPerToken < 0 || c.WatchMaxStreamsPerToken > 1<<20:
		return fmt.Errorf("--watch-max-streams-per-token: must be between 0 and 1048576, got %d", c.WatchMaxStreamsPerToken)
	case c.NewBreakersPerMinute < 0 || c.NewBreakersPerMinute > 1<<30:
		return fmt.Errorf("--new-breakers-per-minute: must be between 0 and %d, got %d", 1<<30, c.NewBreakersPerMinute)
	case c.AlertsPerMinute < 0 || c.AlertsPerMinute > 1<<30:
		return fmt.Errorf("--alerts-per-minute: must be between 0 and %d, got %d", 1<<30, c.AlertsPerMinute)
	case c.MaxBreakers < 0 || c.MaxBreakers > 1<<40:
		return fmt.Errorf("--max-breakers: must be between 0 and %d, got %d", int64(1)<<40, c.MaxBreakers)
	case c.RedisOutage != "" && c.RedisOutage != "memory" && c.RedisOutage != "unavailable":
		return fmt.Errorf("--redis-outage: must be memory or unavailable, got %q", c.RedisOutage)
	case c.RedisPasswordFile != "" && c.RedisURL == "":
		return errors.New("--redis-password-file: needs --redis-url (the embedded Redis makes its own password)")
	}
	return nil
}
