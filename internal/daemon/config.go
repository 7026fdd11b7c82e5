// Package daemon assembles breakerd: configuration, the Redis connection
// (or an embedded in-memory Redis), the gRPC server with health and
// reflection, the live-event hub, and one bounded shutdown path.
package daemon

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/breakerd/breakerd/internal/auth"
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
	// HealthInterval is how often Redis is pinged to keep the health status
	// true. Default 5s. Flag --health-interval, env BREAKERD_HEALTH_INTERVAL.
	HealthInterval time.Duration
	// ShowVersion asks only for the version to be printed. Flag --version.
	ShowVersion bool
	// LogFormat is text or json. Default text. Flag --log-format, env
	// BREAKERD_LOG_FORMAT.
	LogFormat string

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
	// ConfigPoll is how often the policy file (--config) is checked for a
	// change of content, which reloads it; SIGHUP reloads it at once. A
	// rejected file leaves the policy in force. 0 disables polling (SIGHUP
	// still works). Default 5s. Flag --config-poll, env
	// BREAKERD_CONFIG_POLL.
	ConfigPoll time.Duration
}

// ErrHelp is returned by ParseConfig when -h or --help was asked for; the
// usage has been written.
var ErrHelp = flag.ErrHelp

// ParseConfig reads args (without the program name) and the environment
// through getenv. Invalid values are errors naming the flag.
func ParseConfig(args []string, getenv func(string) string, usage io.Writer) (Config, error) {
	c := Config{
		Listen:          "127.0.0.1:7070",
		EventsMaxLen:    1000,
		EventRetention:  168 * time.Hour,
		ShutdownTimeout: 10 * time.Second,
		HealthInterval:  5 * time.Second,
		LogFormat:       "text",
		ConfigPoll:      5 * time.Second,
	}
	fs := flag.NewFlagSet("breakerd", flag.ContinueOnError)
	fs.SetOutput(usage)
	fs.Usage = func() {
		fmt.Fprintf(usage, "Usage: breakerd [flags]\n\nEvery flag also reads an environment variable: --redis-url is BREAKERD_REDIS_URL,\n--log-format is BREAKERD_LOG_FORMAT, and so on (the flag wins).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	var errs []error
	envName := func(flag string) string { return "BREAKERD_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_")) }
	// fromEnv applies a flag's environment variable, when set, through
	// parse; the flag itself, parsed later, wins over it.
	fromEnv := func(flag, want string, parse func(string) error) {
		if v := getenv(envName(flag)); v != "" {
			if err := parse(v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %q is not %s", envName(flag), v, want))
			}
		}
	}
	str := func(p *string, name, help string) {
		fromEnv(name, "", func(v string) error { *p = v; return nil })
		fs.StringVar(p, name, *p, help)
	}
	dur := func(p *time.Duration, name, help string) {
		fromEnv(name, "a duration", func(v string) (err error) { *p, err = time.ParseDuration(v); return err })
		fs.DurationVar(p, name, *p, help)
	}
	boolean := func(p *bool, name, help string) {
		fromEnv(name, "true or false", func(v string) (err error) { *p, err = strconv.ParseBool(v); return err })
		fs.BoolVar(p, name, *p, help)
	}
	integer := func(p *int64, name, help string) {
		fromEnv(name, "an integer", func(v string) (err error) { *p, err = strconv.ParseInt(v, 10, 64); return err })
		fs.Int64Var(p, name, *p, help)
	}
	str(&c.Listen, "listen", "gRPC listen address")
	str(&c.RedisURL, "redis-url", "shared Redis URL (redis:// or rediss://); empty: embedded in-memory Redis")
	boolean(&c.RedisCluster, "redis-cluster", "read --redis-url as a Redis Cluster URL")
	str(&c.PolicyFile, "config", "YAML policy file (defaults and per-breaker overrides)")
	integer(&c.EventsMaxLen, "events-max-len", "entries kept in each breaker's event stream (approximate)")
	dur(&c.EventRetention, "event-retention", "how long an idle breaker's event log is kept")
	dur(&c.DrainDelay, "drain-delay", "time spent NOT_SERVING before stopping")
	dur(&c.ShutdownTimeout, "shutdown-timeout", "bound on the graceful stop")
	dur(&c.HealthInterval, "health-interval", "how often Redis is pinged for health")
	str(&c.LogFormat, "log-format", "text or json")
	fs.BoolVar(&c.ShowVersion, "version", false, "print the version and exit")
	str(&c.TLSCert, "tls-cert", "PEM certificate for the gRPC listener (with --tls-key)")
	str(&c.TLSKey, "tls-key", "PEM private key for the gRPC listener (with --tls-cert)")
	str(&c.TLSClientCA, "tls-client-ca", "PEM CA bundle; when set, clients must present a certificate it signed")
	str(&c.TokensFile, "tokens", "YAML file of bearer tokens with roles (worker, operator); empty: no auth, loopback only")
	boolean(&c.InsecureListenAny, "insecure-listen-any", "allow a non-loopback --listen without --tokens (anyone reaching it may Force)")
	str(&c.HooksFile, "hooks", "YAML file of alert webhooks")
	str(&c.MetricsListen, "metrics-listen", "HTTP address for Prometheus /metrics; empty: no metrics listener")
	dur(&c.ConfigPoll, "config-poll", "how often the --config file is checked for changes (0: only on SIGHUP)")
	if err := errors.Join(errs...); err != nil {
		return c, err
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if c.ShowVersion {
		return c, nil
	}
	return c, c.Validate()
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
	case c.LogFormat != "text" && c.LogFormat != "json":
		return fmt.Errorf("--log-format: must be text or json, got %q", c.LogFormat)
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return errors.New("--tls-cert: --tls-cert and --tls-key go together")
	case c.TLSClientCA != "" && c.TLSCert == "":
		return errors.New("--tls-client-ca: needs --tls-cert and --tls-key")
	case c.TokensFile == "" && !c.InsecureListenAny && !auth.IsLoopback(c.Listen):
		return fmt.Errorf("--listen: %s is not a loopback address and no --tokens are set: anyone reaching it could force breakers; set --tokens, or --insecure-listen-any to accept that", c.Listen)
	case c.ConfigPoll < 0:
		return fmt.Errorf("--config-poll: must not be negative, got %s", c.ConfigPoll)
	}
	return nil
}
