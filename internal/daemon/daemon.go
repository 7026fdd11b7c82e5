package daemon

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/breakerd/breakerd/internal/auth"
	"github.com/breakerd/breakerd/internal/buildinfo"
	"github.com/breakerd/breakerd/internal/events"
	"github.com/breakerd/breakerd/internal/limits"
	"github.com/breakerd/breakerd/internal/logging"
	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/recovery"
	"github.com/breakerd/breakerd/internal/savings"
	"github.com/breakerd/breakerd/internal/secretfile"
	"github.com/breakerd/breakerd/internal/server"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tracing"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// NewLogger returns the daemon's slog logger in the configured format and
// level (internal/logging). A level Validate would refuse logs at info.
func NewLogger(c Config, w io.Writer) *slog.Logger {
	level, _ := logging.ParseLevel(c.LogLevel)
	return logging.New(w, c.LogFormat, level)
}

// Run serves until ctx ends, then shuts down in order: health goes
// NOT_SERVING, the drain delay passes, the gRPC server stops gracefully
// (cut after ShutdownTimeout), and Redis is closed last. ready, when
// non-nil, is called with the gRPC listener's address once the daemon
// serves (RunListeners reports every listener's). The listeners are
// opened last, once everything they serve is built.
func Run(ctx context.Context, c Config, log *slog.Logger, ready func(net.Addr)) error {
	return RunListeners(ctx, c, log, func(l Listeners) {
		if ready != nil {
			ready(l.GRPC)
		}
	})
}

// Listeners are the addresses a daemon serves on, as bound (a port 0 in
// the configuration is the port the system chose).
type Listeners struct {
	GRPC net.Addr
	// HTTP is the HTTP/JSON listener's; nil without --http-listen.
	HTTP net.Addr
}

// RunListeners is Run, reporting every listener's address to ready.
func RunListeners(ctx context.Context, c Config, log *slog.Logger, ready func(Listeners)) error {
	log.Debug("garbage collector", "gogc", tuneGC())
	policies, policySum, err := loadPolicy(c, log)
	if err != nil {
		return err
	}
	tr, err := tracing.Start(ctx, c.Tracing, tracing.Options{Version: buildinfo.Get().Version})
	if err != nil {
		return err
	}
	defer flushTraces(tr, c.ShutdownTimeout, log)
	rdb, channel, closeRedis, err := connect(c, log)
	if err != nil {
		return err
	}
	defer closeRedis()
	d, err := assemble(c, log, rdb, channel, policies, policySum, tr)
	if err != nil {
		return err
	}
	defer d.st.Close()
	lis, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", c.Listen, err)
	}
	defer lis.Close() // the gRPC server closes it too; a second Close is harmless
	httpLis, err := listenHTTP(c)
	if err != nil {
		return err
	}
	defer closeListener(httpLis)
	if httpLis != nil {
		httpLis = d.conns.Listen(httpLis)
	}
	return d.serve(ctx, c, log, d.conns.Listen(lis), httpLis, ready)
}

// loadPolicy reads --config, if set, and returns its policies with the
// SHA-256 of the bytes read (nil without a file: the defaults).
func loadPolicy(c Config, log *slog.Logger) (*policy.Set, *[sha256.Size]byte, error) {
	if c.PolicyFile == "" {
		return policy.NewSet(policy.Default()), nil, nil
	}
	set, sum, err := readPolicy(c.PolicyFile)
	if err != nil {
		return nil, nil, err
	}
	logPolicyWarnings(log, c.PolicyFile, set)
	return set, &sum, nil
}

// flushTraces exports the spans tr still holds, within timeout (a
// collector that does not answer is logged, not waited on).
func flushTraces(tr *tracing.Tracing, timeout time.Duration, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), cmp.Or(timeout, 5*time.Second))
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		log.Warn("tracing: spans not exported at shutdown", "err", err)
	}
}

// parts is what a daemon serves from, built by assemble.
type parts struct {
	st        *store.Store
	hub       *events.Hub
	op        *operate
	hooks     *hookRunner
	checker   *recovery.Checker
	reloaders []*fileReloader
	authn     *auth.Authenticator // nil without --tokens
	srv       *server.Server
	g         *grpc.Server
	hs        *health.Server
	conns     *limits.Conns
	keeper    *keeper
	inMemory  bool             // answers from memory while Redis is away
	tr        *tracing.Tracing // nil: no tracing
}

// assemble builds the store, the event hub, the operating surface, the
// hooks, the recovery checker and the gRPC server under the listener
// limits. It opens nothing that must be closed but the store (d.st).
func assemble(c Config, log *slog.Logger, rdb redis.UniversalClient, channel string, policies *policy.Set, policySum *[sha256.Size]byte, tr *tracing.Tracing) (*parts, error) {
	d := &parts{inMemory: c.RedisOutage != "unavailable", keeper: newKeeper(log, daemonID()), tr: tr}
	outage := store.OutageMemory
	if !d.inMemory {
		outage = store.OutageUnavailable
	}
	var degraded func(bool)                // the metric, once it exists
	var saved func(string, savings.Counts) // likewise
	d.st = store.New(rdb, store.Options{Policies: policies, EventsMaxLen: c.EventsMaxLen, EventRetention: c.EventRetention,
		Channel: channel, Outage: outage, MaxBreakers: c.MaxBreakers, Log: log, DecisionTimeout: cmp.Or(c.RedisDecisionTimeout, store.DefaultDecisionTimeout), OnSaved: func(b string, n savings.Counts) { saved(b, n) },
		// Memory answers once the first listing after the event feed is
		// live has seeded it (RunCircuits starts then: serve).
		Heard: func() <-chan struct{} { return d.hub.Live() },
		OnOutage: func(node string, down bool, cause error) {
			logOutage(log, node, down, d.st.Seeded(), cause)
			degraded(d.st.Degraded())
		}, OnLost: d.keeper.onLost, Tracer: tr.Tracer()})
	err := d.build(c, log, rdb, policySum)
	if err != nil {
		d.st.Close()
		return nil, err
	}
	degraded, saved = d.op.m.SetDegraded, d.op.savings.Count
	d.keeper.st, d.keeper.m = d.st, d.op.m
	return d, nil
}

// The log messages that mark a Redis node going to memory, answering
// again, and a breaker's state lost (each begins its line; the soak's
// observer reads the daemons' logs by them).
const (
	LogToMemory     = "redis unreachable: answering for its breakers from this daemon's in-memory breakers (degraded) until it answers again"
	LogAnswersAgain = "redis answers again (or another node serves its breakers now): its state wins; what was counted in memory is dropped"
	LogStateLost    = "redis lost a breaker's state"
)

// logOutage logs a Redis node going away, with the error that said so
// (cause), or answering again (node "" is a single Redis; on a Cluster,
// one master: the breakers on the others keep answering from Redis).
func logOutage(log *slog.Logger, node string, down, seeded bool, cause error) {
	if node != "" {
		log = log.With("node", node)
	}
	if cause != nil {
		log = log.With("err", cause)
	}
	switch {
	case down && !seeded:
		log.Error("redis unreachable before this daemon's first listing of its breakers: its breakers' calls fail Unavailable (the clients' fallback decides) until it answers again")
	case down:
		log.Error(LogToMemory)
	default:
		log.Info(LogAnswersAgain)
	}
}

// build makes everything of d but the store.
func (d *parts) build(c Config, log *slog.Logger, rdb redis.UniversalClient, policySum *[sha256.Size]byte) error {
	d.hub = events.NewHub(rdb, d.st.Channel(), log)
	d.hub.Observe(d.st.ObserveEvent)
	d.hub.SetLimits(events.Limits{Streams: int(c.WatchMaxStreams)})
	grpcOpts, authn, tokensReloader, err := trustOptions(c, log)
	if err != nil {
		return err
	}
	d.authn = authn
	op, opOpts, err := newOperate(c, log, rdb, d.st, d.hub)
	if err != nil {
		return err
	}
	d.op = op
	if policySum != nil {
		d.reloaders = append(d.reloaders, newPolicyReloader(c.PolicyFile, *policySum, log, d.st.SetPolicies, op.m.ConfigReloaded))
	}
	hookRunner, hooksReloader, err := newDispatcher(c, rdb, d.st, d.hub, op.reg, log)
	if err != nil {
		return err
	}
	d.hooks = hookRunner
	for _, r := range []*fileReloader{tokensReloader, hooksReloader} {
		if r != nil {
			r.result = op.m.ConfigReloaded
			d.reloaders = append(d.reloaders, r)
		}
	}
	if d.checker, err = recovery.New(recovery.Options{Store: d.st, ID: d.keeper.id, Log: log, Registerer: op.reg}); err != nil {
		return err
	}
	d.hub.Observe(d.checker.Observe)
	lim := listenerLimits(c)
	conns, lowered := limits.NewConns(lim)
	if lowered != "" {
		log.Warn("--max-conns lowered to "+lowered, "max_conns", conns.Limit())
	}
	d.conns = conns
	quotas := server.Limits{NewBreakersPerMinute: int(c.NewBreakersPerMinute), AlertsPerMinute: int(c.AlertsPerMinute), Log: log}
	// A call with a known token (the tap's), or any call to the API that
	// succeeds, takes its connection out of the pre-auth pool.
	identified := func(ctx context.Context) bool { _, ok := auth.Caller(ctx); return ok }
	d.srv = server.New(d.st, d.hub).WithLimits(quotas).WithListener(lim).WithHeartbeat(c.HTTPHeartbeat).
		WithCalls(conns.Calls(identified, auth.Open))
	d.hub.SetStateReader(d.srv.State)
	d.g, d.hs = d.srv.NewGRPC(append(append(d.tr.ServerOptions(), grpcOpts...), opOpts...)...)
	return nil
}

// serve runs the background work (the hub, reloads, health, recovery
// checks, hooks), serves lis (and httpLis, when set) until ctx ends and
// then stops in order.
func (d *parts) serve(ctx context.Context, c Config, log *slog.Logger, lis, httpLis net.Listener, ready func(Listeners)) error {
	// The hub outlives the signal: Watch streams keep flowing through the
	// drain delay and end when the servers stop.
	hubCtx, stopHub := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHub()
	wait, err := d.background(hubCtx, c, log)
	defer wait()
	if err != nil {
		stopHub()
		return err
	}
	api, err := newHTTPServer(c, log, httpLis, httpAPIDeps{grpc: d.g, health: d.hs, tracing: d.tr, auth: d.authn, hub: d.hub, store: d.st, srv: d.srv, conns: d.conns})
	if err != nil {
		stopHub()
		return err
	}
	serveErr := make(chan error, 2)
	go func() { serveErr <- d.g.Serve(lis) }()
	if api != nil {
		go func() { serveErr <- api.serve() }()
	}
	log.Info("breakerd serving", "addr", lis.Addr().String(), "policy_file", c.PolicyFile, "max_conns", d.conns.Limit())
	if ready != nil {
		l := Listeners{GRPC: lis.Addr()}
		if httpLis != nil {
			l.HTTP = httpLis.Addr()
		}
		ready(l)
	}
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		stopHub()
		return fmt.Errorf("serve: %w", err)
	}
	d.stop(c, log, api, stopHub)
	return nil
}

// stop goes NOT_SERVING, waits the drain delay, then stops the HTTP and
// gRPC servers gracefully, cut after the shutdown timeout; stopHub ends
// every Watch stream, so neither stop waits them out.
func (d *parts) stop(c Config, log *slog.Logger, api *httpAPI, stopHub func()) {
	log.Info("breakerd shutting down", "drain_delay", c.DrainDelay)
	d.hs.Shutdown()
	time.Sleep(c.DrainDelay)
	backstop := time.AfterFunc(c.ShutdownTimeout, func() {
		log.Warn("graceful stop timed out; cutting in-flight calls")
		d.g.Stop()
		api.close()
	})
	defer backstop.Stop()
	stopped := make(chan struct{})
	go func() {
		// HTTP first: a transcoded call runs inside the gRPC server, whose
		// GracefulStop would cut it rather than wait.
		api.shutdown()
		d.g.GracefulStop()
		close(stopped)
	}()
	stopHub()
	<-stopped
}

// background starts the hub, the reloads and metrics, the health checks,
// the recovery checks and the hooks, all until ctx ends, and returns once
// the hooks are ready to see the first call's events (or a health
// interval has passed: Redis away at start). wait waits for them to end.
func (d *parts) background(ctx context.Context, c Config, log *slog.Logger) (wait func(), err error) {
	hubDone := make(chan error, 1)
	go func() { hubDone <- d.hub.Run(ctx, nil) }()
	checksDone := make(chan struct{})
	keeperDone := make(chan struct{})
	hooksDone := make(chan error, 1)
	savingsDone := make(chan struct{})
	go func() {
		defer close(savingsDone)
		d.st.Savings().Run(ctx, savingsFlush, func(err error) { log.Warn("savings: flush failed; kept for the next", "err", err) })
	}()
	wait = func() {
		<-savingsDone
		<-keeperDone
		if err := <-hubDone; err != nil && !errors.Is(err, context.Canceled) {
			log.Warn("event hub ended with an error", "err", err)
		}
		<-hooksDone
		<-checksDone
		log.Info("breakerd stopped")
	}
	// Before health can turn SERVING: SIGHUP is handled from then on.
	if err := d.op.start(ctx, c, log, d.reloaders, d.conns); err != nil {
		close(checksDone)
		close(keeperDone)
		hooksDone <- nil
		return wait, err
	}
	// The first check runs before the daemon serves, so that scripts are
	// loaded before the first call when Redis is up; later ones poll.
	go func() { defer close(keeperDone); d.keeper.run(ctx) }()
	checkHealth := healthChecker(ctx, healthDeps{st: d.st, hs: d.hs, every: c.HealthInterval, log: log,
		degraded: d.op.m.SetDegraded, inMemory: d.inMemory, redisBack: d.keeper.check})
	checkHealth()
	go pollHealth(ctx, checkHealth, c.HealthInterval)
	// Once the scripts are loaded and the event feed is live, and then
	// every --circuits-interval, whether or not metrics are served: one
	// listing feeds the circuit gauges and seeds the outage memory
	// (store.ListSeeding; the first one begun with the feed live lets the
	// memory answer: store.Options.Heard).
	go func() {
		select {
		case <-d.hub.Live():
			d.op.m.RunCircuits(ctx)
		case <-ctx.Done():
		}
	}()
	go func() { defer close(checksDone); runRecoveryChecks(ctx, d.hub.Live(), d.checker, d.st, log) }()
	hooksReady := make(chan struct{})
	go func() { hooksDone <- d.hooks.run(ctx, hooksReady) }()
	// Serve once the hooks have marked where they start, so an event of
	// the first calls is not taken for one from before the hooks existed.
	select {
	case <-hooksReady:
	case <-time.After(c.HealthInterval):
		log.Warn("alert hooks not ready yet (Redis unreachable?): serving; events before they start are not delivered")
	}
	return wait, nil
}

// savingsFlush is how often a daemon writes the Allow denials it
// counted to Redis (savings.Index.Run): a savings read on another daemon
// lags this daemon's denials by at most this much.
const savingsFlush = time.Second

// runRecoveryChecks runs the policies' recovery checks until ctx ends,
// starting from the breakers open once the hub's subscription is live
// (live closes then; one List) and then from the events the hub hears. A
// List taken before the subscription was live would miss a breaker that
// opened between the two (a trip in the daemon's first moments, on a busy
// machine), and nothing would check it before its cooldown.
func runRecoveryChecks(ctx context.Context, live <-chan struct{}, ck *recovery.Checker, st *store.Store, log *slog.Logger) {
	select {
	case <-live:
	case <-ctx.Done():
		return
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	open, err := st.List(lctx, pb.State_STATE_OPEN)
	cancel()
	if err != nil && ctx.Err() == nil {
		log.Warn("recovery checks: could not list the open breakers at start; checking those that open from now on", "err", err)
	}
	ck.Seed(open)
	_ = ck.Run(ctx)
}

// daemonID names this daemon in the fleet (the recovery check lease, and
// the actor of the transitions its checks cause): host name and a random
// suffix, so two daemons on one host differ.
func daemonID() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "breakerd@" + host + "-" + hex.EncodeToString(b)
}

// connect opens the configured Redis through go-redis's universal client
// (standalone, Cluster with --redis-cluster, or Sentinel when the URL names
// a master_name; see RedisOptions), or starts an embedded one. It also names
// the pub/sub channel for live events: pub/sub ignores Redis databases, so
// the channel carries the database number and fleets on different
// databases of one server do not see each other's events. Errors never
// carry the URL's password.
func connect(c Config, log *slog.Logger) (redis.UniversalClient, string, func(), error) {
	if c.RedisURL == "" {
		// miniredis serves only TCP: a random password keeps other local
		// users (who can reach any loopback port) from bypassing tokens.
		pw := make([]byte, 32)
		if _, err := rand.Read(pw); err != nil {
			return nil, "", nil, fmt.Errorf("embedded redis: password: %w", err)
		}
		password := hex.EncodeToString(pw)
		m := miniredis.NewMiniRedis()
		m.RequireAuth(password)
		if err := m.StartAddr("127.0.0.1:0"); err != nil {
			return nil, "", nil, fmt.Errorf("embedded redis: %w", err)
		}
		log.Warn("no --redis-url: using an embedded in-memory Redis; breaker state is neither shared with other daemons nor persisted", "embedded_addr", m.Addr())
		log.Info("embedded redis: loopback only, with a random password held in memory (never logged or written)", "embedded_addr", m.Addr())
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), Password: password})
		return rdb, store.DefaultChannel, func() { _ = rdb.Close(); m.Close() }, nil
	}
	password, err := redisPassword(c, log)
	if err != nil {
		return nil, "", nil, err
	}
	opt, err := RedisOptions(c.RedisURL, c.RedisCluster)
	if err != nil {
		return nil, "", nil, fmt.Errorf("--redis-url %s: %w", RedactURL(c.RedisURL), redactErr(err, c.RedisURL))
	}
	if password != "" {
		opt.Password = password
	}
	opt.MaxRetries = RedisRetries
	// One dial attempt per command: a Redis that refuses connections is
	// an outage to notice from the failing request itself, not after
	// go-redis's five dial retries.
	opt.DialerRetries = 1
	// A command's context bounds its socket I/O too: a decision script
	// past the daemon's own bound (--redis-decision-timeout) drops its
	// connection, stuck on a stalled Redis, instead of holding it until
	// the read timeout; reads keep their callers' (longer) deadlines.
	opt.ContextTimeoutEnabled = true
	rdb := redis.NewUniversalClient(opt)
	channel := fmt.Sprintf("%s:db%d", store.DefaultChannel, opt.DB)
	switch {
	case opt.IsClusterMode:
		channel = store.DefaultChannel // a cluster has only database 0
		log.Info("using redis cluster", "addrs", opt.Addrs, "user", opt.Username, "password", opt.Password != "", "tls", opt.TLSConfig != nil)
	case opt.MasterName != "":
		log.Info("using redis sentinel", "master", opt.MasterName, "sentinels", opt.Addrs, "db", opt.DB, "user", opt.Username, "password", opt.Password != "", "tls", opt.TLSConfig != nil)
	default:
		log.Info("using redis", "addr", opt.Addrs[0], "db", opt.DB, "user", opt.Username, "password", opt.Password != "", "tls", opt.TLSConfig != nil)
	}
	return rdb, channel, func() { _ = rdb.Close() }, nil
}

// RedisOptions reads --redis-url (and --redis-cluster) into the options of
// go-redis's universal client. Three forms (go-redis's ParseURL,
// ParseClusterURL and ParseFailoverURL, whose query options such as
// dial_timeout=3s or pool_size=20 all apply):
//
//   - standalone: redis://[user:pass@]host:port/db, or rediss:// for TLS;
//   - Cluster (cluster true): redis://[user:pass@]host1:port?addr=host2:port&addr=host3:port,
//     any subset of the nodes;
//   - Sentinel: redis://[sentinel-user:sentinel-pass@]sentinel1:port/db?master_name=NAME&addr=sentinel2:port
//     with the master's own credentials as username=...&password=... in the query.
//
// Errors name what go-redis could not parse; master_name with cluster is
// an error (Sentinel-managed clusters are not supported).
func RedisOptions(rawURL string, cluster bool) (*redis.UniversalOptions, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	sentinel := u.Query().Has("master_name")
	switch {
	case cluster && sentinel:
		return nil, errors.New("master_name (Sentinel) and --redis-cluster exclude each other")
	case cluster:
		o, err := redis.ParseClusterURL(rawURL)
		if err != nil {
			return nil, err
		}
		return &redis.UniversalOptions{IsClusterMode: true, Addrs: o.Addrs, ClientName: o.ClientName,
			Username: o.Username, Password: o.Password, TLSConfig: o.TLSConfig, Protocol: o.Protocol,
			DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout,
			PoolSize: o.PoolSize, PoolTimeout: o.PoolTimeout, MinIdleConns: o.MinIdleConns, MaxIdleConns: o.MaxIdleConns,
			ConnMaxIdleTime: o.ConnMaxIdleTime, ConnMaxLifetime: o.ConnMaxLifetime,
			MinRetryBackoff: o.MinRetryBackoff, MaxRetryBackoff: o.MaxRetryBackoff}, nil
	case sentinel:
		o, err := redis.ParseFailoverURL(rawURL)
		if err != nil {
			return nil, err
		}
		return &redis.UniversalOptions{Addrs: o.SentinelAddrs, MasterName: o.MasterName, DB: o.DB, ClientName: o.ClientName,
			SentinelUsername: o.SentinelUsername, SentinelPassword: o.SentinelPassword,
			Username: o.Username, Password: o.Password, TLSConfig: o.TLSConfig, Protocol: o.Protocol,
			DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout,
			PoolSize: o.PoolSize, PoolTimeout: o.PoolTimeout, MinIdleConns: o.MinIdleConns, MaxIdleConns: o.MaxIdleConns,
			ConnMaxIdleTime: o.ConnMaxIdleTime, ConnMaxLifetime: o.ConnMaxLifetime,
			MinRetryBackoff: o.MinRetryBackoff, MaxRetryBackoff: o.MaxRetryBackoff}, nil
	default:
		o, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, err
		}
		return &redis.UniversalOptions{Addrs: []string{o.Addr}, DB: o.DB, ClientName: o.ClientName,
			Username: o.Username, Password: o.Password, TLSConfig: o.TLSConfig, Protocol: o.Protocol,
			DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout,
			PoolSize: o.PoolSize, PoolTimeout: o.PoolTimeout, MinIdleConns: o.MinIdleConns, MaxIdleConns: o.MaxIdleConns,
			ConnMaxIdleTime: o.ConnMaxIdleTime, ConnMaxLifetime: o.ConnMaxLifetime,
			MinRetryBackoff: o.MinRetryBackoff, MaxRetryBackoff: o.MaxRetryBackoff}, nil
	}
}

// redisPassword reads --redis-password-file, if set. A URL that carries a
// password as well is logged: the file wins.
func redisPassword(c Config, log *slog.Logger) (string, error) {
	if c.RedisPasswordFile == "" {
		return "", nil
	}
	pw, worldReadable, err := secretfile.ReadPassword(c.RedisPasswordFile)
	if err != nil {
		return "", fmt.Errorf("--redis-password-file: %w", err)
	}
	warnReadable(log, "--redis-password-file", c.RedisPasswordFile, worldReadable)
	if RedactURL(c.RedisURL) != c.RedisURL {
		log.Warn("--redis-url carries a password too; --redis-password-file wins", "redis_url", RedactURL(c.RedisURL))
	}
	return pw, nil
}

// RedisRetries bounds go-redis's retries of a failed command: a breaker
// must answer fast, and a worker's client has its own budget and fallback.
// A retry may send a script Redis already ran (its reply lost): the
// decision scripts are safe to run twice (internal/replylost).
const RedisRetries = 1

// healthDeps are what the health check reads and sets.
type healthDeps struct {
	st       *store.Store
	hs       *health.Server
	every    time.Duration // bounds each check
	log      *slog.Logger
	degraded func(bool) // breakerd_degraded
	inMemory bool       // --redis-outage memory: the daemon answers while Redis is away
	// redisBack runs when Redis answers first, and whenever it comes back
	// (unreachable before, or lacking the scripts: a restart).
	redisBack func(context.Context)
}

// healthChecker returns a check that loads any script Redis lacks and sets
// the health status by one rule, the same at start and later
// (docs/reliability.md#health): SERVING while the daemon answers calls,
// i.e. while Redis answers, or with inMemory once its memory is seeded
// (answering from memory, degraded, while Redis is away: store.Seeded);
// NOT_SERVING otherwise. Each check is
// bounded by every. With inMemory, a Redis that cannot serve the check is
// the store's outage (store.Check), which the store logs once when it
// begins and once when it ends; the check logs only what the store does
// not say: a failure that is no outage (NOPERM, a bad reply) or one the
// store cannot pin on a node (a Cluster).
func healthChecker(ctx context.Context, h healthDeps) func() {
	first, up, serving, told := true, false, false, false
	return func() {
		cctx, cancel := context.WithTimeout(ctx, h.every)
		loaded, err := h.st.Check(cctx)
		if err == nil && (!up || loaded > 0) {
			if loaded > 0 && !first { // at start, loading them is the plan, not news
				h.log.Info("redis lacked scripts (restart, SCRIPT FLUSH or failover): reloaded", "scripts", loaded)
			}
			h.redisBack(cctx)
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		// Memory not seeded yet answers nothing (store.ErrUnseeded).
		if want := err == nil || h.inMemory && h.st.Seeded(); want != serving || first {
			server.SetServing(h.hs, want)
			serving = want
		}
		switch {
		case err == nil && (first || told):
			h.log.Info("redis ready: health SERVING")
			told = false
		case err == nil:
		case !(up || first):
		case !h.inMemory:
			h.log.Error("redis unreachable: health NOT_SERVING until it answers", "err", err)
			told = true
		case !store.IsUnavailable(err):
			h.log.Error("redis health check failed (not an outage: calls still go to Redis)", "err", err)
			told = true
		case !h.st.Degraded():
			h.log.Warn("redis health check failed: calls still go to Redis; a node's breakers answer from memory once its calls fail", "err", err)
			told = true
		}
		first, up = false, err == nil
		h.degraded(!up || h.st.Degraded())
	}
}

// pollHealth runs check every interval until ctx ends.
func pollHealth(ctx context.Context, check func(), every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			check()
		}
	}
}

// RedisLogger adapts log for go-redis's internal messages (pool dial
// failures and the like), so they come out in the daemon's log format:
// the library's line is the message, as it wrote it (most already start
// with "redis: "), tagged component=go-redis. Install it with
// redis.SetLogger.
func RedisLogger(log *slog.Logger) interface {
	Printf(ctx context.Context, format string, v ...any)
} {
	return redisLogger{log}
}

type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}

// Registry assembles the daemon from c as Run does, without serving, and
// returns the registry every one of its metrics is registered on (the Go
// and process collectors included), with a func that releases what it
// opened. Its descriptors are the names the daemon can export, including
// counters that appear in a scrape only after their first event: the
// alert rules and the dashboard are checked against them
// (deploy/prometheus/check). With no --redis-url it runs an embedded Redis.
func Registry(c Config, log *slog.Logger) (*prometheus.Registry, func(), error) {
	policies, policySum, err := loadPolicy(c, log)
	if err != nil {
		return nil, nil, err
	}
	rdb, channel, closeRedis, err := connect(c, log)
	if err != nil {
		return nil, nil, err
	}
	d, err := assemble(c, log, rdb, channel, policies, policySum, nil)
	if err != nil {
		closeRedis()
		return nil, nil, err
	}
	return d.op.reg, func() { d.st.Close(); closeRedis() }, nil
}
