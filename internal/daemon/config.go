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
)

// Config is the daemon's configuration. Every field has a flag and a
// BREAKERD_* environment variable (the flag wins); tests build it directly.
type Config struct {
	// Listen is the gRPC address. Default 127.0.0.1:7070 (loopback only).
	// Flag --listen, env BREAKERD_LISTEN.
	Listen string
	// RedisURL is the shared Redis, e.g. redis://127.0.0.1:6379/0 or
	// rediss://user:pass@host:6380. Empty: an embedded in-memory Redis whose
	// state is neither shared nor persisted. Flag --redis-url, env
	// BREAKERD_REDIS_URL.
	RedisURL string
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
	// LogFormat is text or json. Default text. Flag --log-format, env
	// BREAKERD_LOG_FORMAT.
	LogFormat string
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
	env := func(name string) string {
		return getenv("BREAKERD_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_")))
	}
	var errs []error
	str := func(p *string, name, help string) {
		if v := env(name); v != "" {
			*p = v
		}
		fs.StringVar(p, name, *p, help)
	}
	dur := func(p *time.Duration, name, help string) {
		if v := env(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("BREAKERD_%s: %q is not a duration", strings.ToUpper(strings.ReplaceAll(name, "-", "_")), v))
			}
			*p = d
		}
		fs.DurationVar(p, name, *p, help)
	}
	str(&c.Listen, "listen", "gRPC listen address")
	str(&c.RedisURL, "redis-url", "shared Redis URL (redis:// or rediss://); empty: embedded in-memory Redis")
	str(&c.PolicyFile, "config", "YAML policy file (defaults and per-breaker overrides)")
	if v := env("events-max-len"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("BREAKERD_EVENTS_MAX_LEN: %q is not an integer", v))
		}
		c.EventsMaxLen = n
	}
	fs.Int64Var(&c.EventsMaxLen, "events-max-len", c.EventsMaxLen, "entries kept in each breaker's event stream (approximate)")
	dur(&c.EventRetention, "event-retention", "how long an idle breaker's event log is kept")
	dur(&c.DrainDelay, "drain-delay", "time spent NOT_SERVING before stopping")
	dur(&c.ShutdownTimeout, "shutdown-timeout", "bound on the graceful stop")
	dur(&c.HealthInterval, "health-interval", "how often Redis is pinged for health")
	str(&c.LogFormat, "log-format", "text or json")
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
	case c.ConfigPoll < 0:
		return fmt.Errorf("--config-poll: must not be negative, got %s", c.ConfigPoll)
	}
	return nil
}
