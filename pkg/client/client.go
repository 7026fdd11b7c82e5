// Package client is what workers import to ask breakerd before a tool call
// and to report after it, and what an agent loop uses to keep broken tools
// out of the model's toolset.
//
// One call: Call asks, runs the call only if allowed, classifies what it
// returned and records it:
//
//	c, err := client.Dial("127.0.0.1:7070", client.WithWorkerID("worker-7"))
//	...
//	err = c.Call(ctx, "web_search", func(ctx context.Context) error {
//		return search(ctx, query) // its own retries stay inside: one call, one outcome
//	})
//	if d, ok := client.AsDenial(err, "web_search"); ok {
//		// the dependency was not called; give the model d.JSON() as the tool result
//	}
//
// One agent run: NewRun scopes a run; Run.Available filters the toolset in
// one round trip, a removed tool stays removed for the run, Run.Notice is
// the text for the model and Run.Degraded what the final answer carries.
//
// Cheaper: WithFastMode keeps a view of every breaker it uses, pushed by
// breakerd's Watch stream, so that an Allow on a closed or open circuit
// costs no round trip and outcomes go out in background batches (a
// success on a healthy breaker not at all); see fast.go and docs/go-client.md's
// "Fast mode" for what it trades. WithOpenCache is its denial-only subset:
// only the denials cost no round trip.
//
// When breakerd does not answer within the Allow budget (WithAllowBudget,
// 50ms by default), that one call is answered from a breaker local to this
// worker (or fails closed, WithFallback) and marked Degraded; the late
// answer still updates the client (a PROBE it granted is handed back at
// once). After DownAfterFailures consecutive failures to reach breakerd
// the whole client answers from the fallback and reconnects in the
// background: an agent is never blocked by the breaker service itself.
// A request breakerd would refuse (a bad name) is an error for the
// caller, checked before any round trip, and never an outage.
//
// The package imports only grpc, the generated breakerd.v1 stubs and
// breakerd's dependency-free internal/limits.
package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/limits"
	"github.com/breakerd/breakerd/internal/probe"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Clock tells the time for the client's own decisions: the local fallback
// breaker, cached denials and a Run's timestamps. A Clock that also has
// After(time.Duration) <-chan time.Time (time.After's signature) times
// the client's background health checks once no daemon answers, too.
// Implementations must be safe for concurrent use.
type Clock interface {
	Now() time.Time
}

// after is time.After on the client's clock when it has After (Clock).
func (c *Client) after(d time.Duration) <-chan time.Time {
	if a, ok := c.o.clock.(interface {
		After(time.Duration) <-chan time.Time
	}); ok {
		return a.After(d)
	}
	return time.After(d)
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// DefaultAllowBudget bounds how long Allow waits for breakerd before it
// answers from the local fallback.
const DefaultAllowBudget = 50 * time.Millisecond

// DefaultRPCTimeout bounds each Allow and BatchGet RPC, an answer that
// missed its budget included.
const DefaultRPCTimeout = 2 * time.Second

// DownAfterFailures is how many consecutive failures to reach breakerd
// (connection refused or reset, Unavailable, an RPC's own timeout) switch
// the whole client to its fallback. A slow answer is not a failure, and
// neither is a request breakerd refuses.
const DownAfterFailures = 3

// Client talks to breakerd for one worker. It is safe for concurrent use.
// ForWorker returns more Clients, one per worker id, sharing this one's
// connection and background work.
type Client struct {
	*core
	// id is the worker id this handle reports as; badWorker is the
	// InvalidArgument for an id breakerd would refuse, checked once (nil
	// when it is valid).
	id        string
	badWorker error
	worked    *sync.Map // breaker name -> true: this worker has recorded a SUCCESS there
	// handle: made by ForWorker; Close leaves the shared core alone.
	handle bool
}

// core is what the Clients of one connection share: the connection, the
// fast view and its sender, the open cache, the local fallback and the
// client's view of breakerd's reachability.
type core struct {
	conn   *grpc.ClientConn // nil when built by New
	api    pb.BreakerServiceClient
	health healthpb.HealthClient
	o      options
	cache  *openCache // nil without WithOpenCache (or with fast mode)
	view   *view      // nil without WithFastMode
	out    *sender    // nil without WithFastMode
	local  *localBreaker
	known  *lastKnown   // the breakers breakerd last said deny (known.go)
	tally  savingsTally // what the client refused itself, until reported
	target string       // what Dial was given, for Check's error

	down     atomic.Bool  // answering from the local fallback
	answered atomic.Bool  // breakerd has answered at least once
	streak   atomic.Int64 // consecutive failures to reach breakerd
	// firstUntil ends the first-contact window (UnixNano, wall time; 0
	// before the first call): calls before it wait until it, calls after
	// it the Allow budget.
	firstUntil atomic.Int64
	// heard is when the Watch stream last delivered anything, an event or
	// a heartbeat (the client's clock, UnixNano; 0: never).
	heard atomic.Int64
	// silence is how long the Watch stream may deliver nothing before it
	// is dropped (3 x the announced heartbeat; 0: none announced yet).
	silence atomic.Int64
	stats   struct {
		budgetMisses, lateAnswers, probesReleased, outages, watchBreaks atomic.Int64
		lastWatchErr                                                    atomic.Pointer[string]
	}

	mu        sync.Mutex
	closed    bool
	downSince time.Time
	ctx       context.Context // ends at Close: background work
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

type options struct {
	worker        string
	classify      Classifier
	ignore        func(error) bool // WithIgnore
	dial          []grpc.DialOption
	clock         Clock
	budget        time.Duration
	firstBudget   time.Duration
	recordTimeout time.Duration
	fallback      FallbackMode
	local         LocalPolicy
	openCache     bool
	fast          bool
	retry         time.Duration
	listTimeout   time.Duration
	rpcTimeout    time.Duration
	logger        *slog.Logger
	staleBound    time.Duration // WithStaleViewBound
	onOutage      func(down bool, err error)
	savings       time.Duration // WithSavingsInterval
	tokenGiven    bool          // WithToken was given: EnvToken is not read
	// after starts the Allow budget's timer for a call on breaker (tests
	// replace it to make chosen calls miss their budget).
	after func(breaker string, d time.Duration) (<-chan time.Time, func() bool)
}

// Option configures a Client.
type Option func(*options)

// WithWorkerID sets the id this worker reports as. Default: the host name
// and process id ("host-1234"). Quorum counts distinct worker ids, so two
// processes must not share one.
func WithWorkerID(id string) Option { return func(o *options) { o.worker = id } }

// WithDialOptions adds grpc dial options (TLS credentials, interceptors).
// Without transport credentials among them, Dial connects in plaintext.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dial = append(o.dial, opts...) }
}

// WithClassifier replaces how Call turns a call's error into an outcome.
// Default: DefaultClassifier. Wrap it to add your own error types.
func WithClassifier(cl Classifier) Option { return func(o *options) { o.classify = cl } }

// WithIgnore names the errors that are not the dependency's fault (the
// tool's own bugs, a validation it does before the call), as pybreaker's
// exclude and resilience4j's ignoreExceptions do: Call records an error
// for which ignore returns true as OUTCOME_INVALID_ARGUMENT, never
// counted (a probe's lease is released without a verdict), before any
// classifier reads it. ignore must be safe for concurrent use.
func WithIgnore(ignore func(error) bool) Option { return func(o *options) { o.ignore = ignore } }

// WithClock sets the clock of the local fallback breaker, the cached
// denials and Runs. Default: the system clock.
func WithClock(c Clock) Option { return func(o *options) { o.clock = c } }

// WithAllowBudget bounds how long Allow (and Run.Available) wait for
// breakerd before answering from the fallback. Default DefaultAllowBudget
// (50ms); 0 waits as long as the caller's context allows.
func WithAllowBudget(d time.Duration) Option { return func(o *options) { o.budget = d } }

// WithFirstContactBudget bounds how long the first RPC, before breakerd
// has ever answered this client, waits: it also sets up the connection,
// which can take longer than the Allow budget. A daemon that refuses the
// connection fails at once either way. Default 1s.
func WithFirstContactBudget(d time.Duration) Option { return func(o *options) { o.firstBudget = d } }

// WithRecordTimeout bounds the Record that Call sends after the call,
// which goes out even when the caller's context has ended. Default 2s.
func WithRecordTimeout(d time.Duration) Option { return func(o *options) { o.recordTimeout = d } }

// WithFallback sets what the client answers while breakerd is unreachable.
// Default FailOpenLocal.
func WithFallback(m FallbackMode) Option { return func(o *options) { o.fallback = m } }

// WithLocalPolicy tunes the local fallback breaker. Default: breakerd's
// defaults (see LocalPolicy).
func WithLocalPolicy(p LocalPolicy) Option { return func(o *options) { o.local = p } }

// WithOpenCache turns on the local cache of known-open circuits: the
// client subscribes to breakerd's Watch stream (and resyncs from List on
// each connect), so an Allow on a circuit it knows is open is answered
// with no round trip until the retry_after breakerd gave. Off by default:
// it holds one stream per client and runs one List per (re)connect.
func WithOpenCache() Option { return func(o *options) { o.openCache = true } }

// WithFastMode answers Allow in-process from a view of each breaker
// pushed by breakerd's Watch stream (one stream with run notices, and one
// BatchGet of the known breakers per (re)connect), and sends outcomes in
// background RecordBatch calls, successes on a healthy breaker not at all.
// Only a half-open breaker whose probe is due, a breaker the view does not
// know yet, and every Allow of a closed breaker while the stream is down
// go to breakerd; a stream silent for 3 heartbeats is dropped, and the
// denials of a view no longer heard are Degraded, then bounded
// (WithStaleViewBound; docs/go-client.md, "Stalled streams").
// Record returns at once (its response only notes what happened to the
// outcome); Flush waits for the queue; Close flushes it first (within the
// record timeout). The trade: after a trip elsewhere, this client may
// allow calls until the event reaches it (milliseconds). It needs a token
// not limited to some breakers (its Watch names none); the workers of one
// process share one stream, view and queue through ForWorker. It includes
// and replaces WithOpenCache. Default: off (strict: every Allow and Record
// is a round trip).
func WithFastMode() Option { return func(o *options) { o.fast = true } }

// WithReconnectInterval sets the first wait before the client checks
// whether an unreachable breakerd is back (grpc.health.v1), each later
// wait doubling to 30s (the schedule a hung daemon is passed over by),
// and how long the Watch stream waits before resubscribing. Default 1s.
func WithReconnectInterval(d time.Duration) Option { return func(o *options) { o.retry = d } }

// WithLogger logs the client's background events (breakerd unreachable,
// back, watch stream breaks; each said once, not once per retry).
// Default: slog.Default(), so that a client that cannot reach any daemon
// says so; a nil logger logs nothing.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// DefaultStaleViewBound is how long after its Watch stream last
// delivered anything (an event or a heartbeat) the fast-mode view or the
// open cache still answers a denial it holds, marked Degraded.
const DefaultStaleViewBound = time.Minute

// WithStaleViewBound sets how long a view that no longer hears its Watch
// stream still answers the denials it holds (DefaultStaleViewBound); past
// it, Allow asks breakerd (or its fallback) instead. It also bounds how
// long the fallback holds a denial heard with no end (a force, a pause).
func WithStaleViewBound(d time.Duration) Option { return func(o *options) { o.staleBound = d } }

// WithRPCTimeout bounds each Allow and BatchGet RPC to breakerd, an
// answer that arrives after the Allow budget included (it still updates
// the client). An RPC that runs past it is a failure to reach breakerd.
// Default DefaultRPCTimeout (2s), and never less than the Allow budget.
// With WithAllowBudget(0) the caller's context bounds the RPC instead.
func WithRPCTimeout(d time.Duration) Option { return func(o *options) { o.rpcTimeout = d } }

// WithOutageHook calls fn once each time the client switches to its
// fallback (down true, with the last failure) and once when breakerd
// answers again (down false, nil): the signal to alert on or export as a
// metric. fn runs on the goroutine that saw the change, outside the
// client's locks (it may call the client), and should return quickly.
func WithOutageHook(fn func(down bool, err error)) Option {
	return func(o *options) { o.onOutage = fn }
}

// Dial returns a Client for breakerd at target: one daemon ("host:port"),
// several ("host1:port,host2:port"), or any grpc target, such as
// "dns:///breakerd.internal:7070" for a DNS name with several records.
// The client keeps a connection to every daemon it resolves and spreads
// its calls over those that are up and answer (round robin, passing over
// a daemon that hangs: answeringPolicy); a call that one daemon cannot
// take (it cannot be reached, or answers Unavailable) is tried on
// another within the Allow budget, and only when none answers
// does the fallback decide (docs/reliability.md, "Clients and several
// daemons"). It does not wait for a connection. The error is a malformed
// target, naming the address.
//
// An empty target is EnvAddr's value, and without WithToken the token is
// EnvToken's, when set (docs/configuration.md, "The clients'
// environment").
func Dial(target string, opts ...Option) (*Client, error) {
	o := newOptions(opts)
	target, err := fromEnvironment(target, &o)
	if err != nil {
		return nil, err
	}
	given := target
	target, resolve, err := resolveTarget(target)
	if err != nil {
		return nil, err
	}
	dial := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// Reconnect within seconds of breakerd's return (grpc's default
		// backoff grows to 2 minutes): the fallback is for outages.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
		grpc.WithDefaultServiceConfig(serviceConfig),
		// A daemon that hangs sends no byte, not even a ping's ack: its
		// connection is closed after keepaliveTime of silence in a call
		// and keepaliveTimeout more, and grpc reconnects in the background.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout}),
	}, resolve...)
	dial = append(append(dial, TraceDialOptions()...), o.dial...)
	conn, err := grpc.NewClient(target, dial...)
	if err != nil {
		return nil, fmt.Errorf("client: dial %s: %w", target, err)
	}
	c := newClient(conn, o)
	c.conn, c.target = conn, given
	return c, nil
}

// EnvAddr and EnvToken name the environment variables Dial reads when
// its caller leaves the target empty or gives no WithToken. The Python
// and TypeScript clients, which speak HTTP/JSON, read their daemons' URLs
// from BREAKERD_URL instead; the token is the same.
const (
	EnvAddr  = "BREAKERD_ADDR"
	EnvToken = "BREAKERD_TOKEN"
)

// fromEnvironment fills what Dial's caller left out: an empty target from
// EnvAddr (an error naming it when unset), and, without WithToken, the
// token from EnvToken.
func fromEnvironment(target string, o *options) (string, error) {
	if target == "" {
		target = strings.TrimSpace(os.Getenv(EnvAddr))
		if target == "" {
			return "", fmt.Errorf("client: dial: no target given and %s is not set (docs/configuration.md#the-clients-environment)", EnvAddr)
		}
	}
	if t := os.Getenv(EnvToken); t != "" && !o.tokenGiven {
		o.dial = append(o.dial, grpc.WithPerRPCCredentials(bearerToken(t)))
	}
	return target, nil
}

// keepaliveTime is how long a connection with a call open may hear
// nothing before the client pings the daemon (above the daemons' default
// --keepalive-min-time, 10s); keepaliveTimeout how long the ping's ack
// may take before the connection is closed.
const keepaliveTime, keepaliveTimeout = 20 * time.Second, 5 * time.Second

// serviceConfig is how the connection treats several daemons: a
// subchannel to each, calls spread over the ready ones that answer
// (answeringPolicy: round robin, passing over a daemon that hangs), and
// a call that failed on one daemon because it could not take it
// (UNAVAILABLE: refused, reset, a daemon that cannot serve;
// DEADLINE_EXCEEDED answered by a daemon) tried again on the next, up to
// 5 attempts (grpc's cap) with a few milliseconds between them. The
// caller's deadline bounds every attempt together.
const serviceConfig = `{
  "loadBalancingConfig": [{"breakerd_answering": {}}],
  "methodConfig": [{
    "name": [{"service": "breakerd.v1.BreakerService"}],
    "retryPolicy": {
      "maxAttempts": 5,
      "initialBackoff": "0.002s",
      "maxBackoff": "0.02s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE", "DEADLINE_EXCEEDED"]
    }
  }]
}`

// daemonsScheme names the resolver of a comma-separated list of daemons.
const daemonsScheme = "breakerd-daemons"

// resolveTarget turns a comma-separated list of daemon addresses into a
// grpc target served by a resolver of its own (grpc's manual resolver,
// local to the connection); any other target goes to grpc as it is.
func resolveTarget(target string) (string, []grpc.DialOption, error) {
	if !strings.Contains(target, ",") {
		return target, nil, nil
	}
	var addrs []resolver.Address
	for _, a := range strings.Split(target, ",") {
		a = strings.TrimSpace(a)
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			return "", nil, fmt.Errorf("client: dial %s: daemon address %q: %w", target, a, err)
		}
		// Each daemon's own host name is what TLS checks its certificate
		// against, as with a target of one daemon.
		addrs = append(addrs, resolver.Address{Addr: a, ServerName: host})
	}
	r := manual.NewBuilderWithScheme(daemonsScheme)
	r.InitialState(resolver.State{Addresses: addrs})
	return daemonsScheme + ":///" + target, []grpc.DialOption{grpc.WithResolvers(r)}, nil
}

// New returns a Client over an existing connection; Close leaves it open.
// Dial options are ignored.
func New(conn grpc.ClientConnInterface, opts ...Option) *Client {
	return newClient(conn, newOptions(opts))
}

func newOptions(opts []Option) options {
	host, _ := os.Hostname()
	o := options{
		worker:        fmt.Sprintf("%s-%d", host, os.Getpid()),
		classify:      DefaultClassifier,
		clock:         systemClock{},
		budget:        DefaultAllowBudget,
		firstBudget:   time.Second,
		recordTimeout: 2 * time.Second,
		retry:         time.Second,
		listTimeout:   5 * time.Second,
		rpcTimeout:    DefaultRPCTimeout,
		staleBound:    DefaultStaleViewBound,
		logger:        slog.Default(),
		savings:       DefaultSavingsInterval,
		after: func(_ string, d time.Duration) (<-chan time.Time, func() bool) {
			t := time.NewTimer(d)
			return t.C, t.Stop
		},
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.retry <= 0 {
		o.retry = time.Second
	}
	if o.rpcTimeout <= 0 {
		o.rpcTimeout = DefaultRPCTimeout
	}
	if o.staleBound <= 0 {
		o.staleBound = DefaultStaleViewBound
	}
	return o
}

func newClient(conn grpc.ClientConnInterface, o options) *Client {
	c := &Client{core: &core{
		api:    pb.NewBreakerServiceClient(conn),
		health: healthpb.NewHealthClient(conn),
		o:      o,
		local:  newLocalBreaker(o.local, o.clock.Now),
		known:  newKnown(o.staleBound, o.local.withDefaults().ProbeTimeout),
	}}
	c.setWorker(o.worker)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	if o.savings > 0 {
		c.wg.Add(1)
		go func() { defer c.wg.Done(); c.reportSavings(c.ctx, o.savings) }()
	}
	if o.fast {
		c.view, c.out = newView(), newSender()
		c.wg.Add(2)
		go func() { defer c.wg.Done(); c.fastWatch(c.ctx, o.retry) }()
		go c.send()
		return c
	}
	if o.openCache {
		c.cache = newOpenCache()
		c.wg.Add(1)
		go func() { defer c.wg.Done(); c.watch(c.ctx, o.retry) }()
	}
	return c
}

func (c *Client) setWorker(id string) {
	c.id, c.worked = id, &sync.Map{}
	if err := limits.WorkerID("worker_id", id); err != nil {
		c.badWorker = status.Error(codes.InvalidArgument, err.Error())
	}
}

// ForWorker returns a Client that reports as worker id and shares c's
// connection, Allow budget and other options, fast view and outcome queue
// (WithFastMode), open cache, local fallback and reachability state: one
// process running many workers holds one connection and, in fast mode or
// with WithOpenCache, one Watch stream for all of them, instead of one
// per worker (breakerd caps streams per daemon and per token). breakerd
// sees each id as its own worker: the quorum counts them apart, a suspect
// denial answers only the id it names, and a credential counts as having
// worked per id. The handle's Stats are c's (shared). Close on the
// handle does nothing; close c once its handles are done with, since
// they stop working with it. An id breakerd would refuse is an
// InvalidArgument from the handle's Allow and Record, checked before any
// round trip, as with WithWorkerID. ForWorker on a handle shares the same
// connection again.
func (c *Client) ForWorker(id string) *Client {
	h := &Client{core: c.core, handle: true}
	h.setWorker(id)
	return h
}

// Close stops the client's background work and closes the connection
// Dial opened. In fast mode it first flushes the queued outcomes for at
// most the record timeout; the sending ends once the batch in flight is
// back, and what is left goes nowhere. On a handle from ForWorker it does
// nothing.
func (c *Client) Close() error {
	if c.handle {
		return nil
	}
	if c.out != nil {
		ctx, cancel := context.WithTimeout(context.Background(), c.o.recordTimeout)
		_ = c.Flush(ctx) // best effort: what is left goes nowhere
		cancel()
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.o.recordTimeout)
	_ = c.FlushSavings(ctx) // best effort, as above
	cancel()
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

// WorkerID returns the id this client reports as.
func (c *Client) WorkerID() string { return c.worker() }

func (c *Client) worker() string { return c.id }

// API returns the raw breakerd.v1 stub, for Get, List, Force and Watch.
func (c *Client) API() pb.BreakerServiceClient { return c.api }

// Unreachable reports whether the client is answering from its fallback
// because DownAfterFailures consecutive attempts failed to reach breakerd,
// and since when (the client's clock).
func (c *Client) Unreachable() (since time.Time, ok bool) {
	if !c.down.Load() {
		return time.Time{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.downSince, true
}

// Stats counts what the client did about breakerd's reachability since it
// was made.
type Stats struct {
	// BudgetMisses counts the Allow and Run.Available calls answered by
	// the fallback, while the client stayed on breakerd, because
	// breakerd's answer missed the budget.
	BudgetMisses int64
	// LateAnswers counts the answers that arrived after their budget and
	// updated the client (a cached denial, a released probe).
	LateAnswers int64
	// ProbesReleased counts the PROBE leases a late answer granted that
	// no caller was waiting for, handed back at once with Record
	// OUTCOME_CANCELED.
	ProbesReleased int64
	// Outages counts the switches to the fallback after DownAfterFailures
	// consecutive failures to reach breakerd.
	Outages int64
	// Fast mode only (WithFastMode): SuccessesSkipped counts the
	// successes not sent because the view showed their breaker closed with
	// no failure run; SuccessesDropped those dropped because the queue was
	// full; StaleNotSent the outcomes not sent because their breaker had
	// moved past their ticket's generation (breakerd would not count them:
	// a failure storm's queue after the trip); OutcomesSent those breakerd
	// acknowledged, in Batches RecordBatch calls; Resyncs the view's
	// resyncs (one per Watch (re)connect).
	SuccessesSkipped, SuccessesDropped, StaleNotSent, OutcomesSent, Batches, Resyncs int64
	// WatchBreaks counts the Watch streams (fast mode's view, or the open
	// cache of WithOpenCache) that breakerd refused or that ended, each
	// retried after WithReconnectInterval; LastWatchError is the last one's
	// error ("" before any). A client whose token may not watch
	// (PermissionDenied) counts one break per retry and never goes live.
	WatchBreaks    int64
	LastWatchError string
	// SavedDenialsReported and ToolsRemovedReported count the calls
	// refused in this process (fast mode's view, the open cache) and the
	// tools runs left out that breakerd acknowledged in ReportSavings
	// (WithSavingsInterval).
	SavedDenialsReported, ToolsRemovedReported int64
	// ViewLive is true while fast mode's view is subscribed and resynced:
	// its answers follow breakerd's events. False before the first
	// subscription, between a break and the next, and without fast mode.
	ViewLive bool
}

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	st := Stats{BudgetMisses: c.stats.budgetMisses.Load(), LateAnswers: c.stats.lateAnswers.Load(),
		ProbesReleased: c.stats.probesReleased.Load(), Outages: c.stats.outages.Load()}
	if c.out != nil {
		st.SuccessesSkipped, st.SuccessesDropped, st.StaleNotSent = c.out.skipped.Load(), c.out.dropped.Load(), c.out.stale.Load()
		st.OutcomesSent, st.Batches, st.Resyncs = c.out.sent.Load(), c.out.batches.Load(), c.view.syncs.Load()
		st.ViewLive = c.view.live.Load()
	}
	st.WatchBreaks = c.stats.watchBreaks.Load()
	c.tally.mu.Lock()
	st.SavedDenialsReported, st.ToolsRemovedReported = c.tally.sentDenials, c.tally.sentRemoved
	c.tally.mu.Unlock()
	if e := c.stats.lastWatchErr.Load(); e != nil {
		st.LastWatchError = *e
	}
	return st
}

// Permit is the answer to Allow.
type Permit struct {
	// Breaker is the dependency asked about.
	Breaker string
	// Decision is ALLOWED, PROBE or one of the DENIED_* values.
	Decision pb.Decision
	// Ticket goes back with Record.
	Ticket *pb.Ticket
	// RetryAfter is, for a denial, how long until asking again can help.
	RetryAfter time.Duration
	// Reason is, for a denial, why: Denial.reason.
	Reason string
	// Denial is, for a denial, breakerd's Denial (which denial, and its
	// words for a model), its times moved onto this client's clock; the
	// local fallback's own (conformance/fallback_denials.json) when
	// breakerd did not answer. DeniedError and AsDenial render it.
	Denial *pb.Denial
	// State is the breaker's state when it answered (nil for a fail-closed
	// denial).
	State *pb.BreakerState
	// Degraded is true when breakerd did not answer and the local fallback
	// decided.
	Degraded bool
	// DaemonDegraded is true when breakerd answered but could not reach its
	// Redis, and decided from its own in-memory breakers (fed by every
	// worker connected to that daemon, not the whole fleet). The outcome
	// still goes to breakerd.
	DaemonDegraded bool
	// Cached is true when the answer came from the client itself, without
	// a round trip: a denial from the open-circuit cache, or any answer
	// from the fast-mode view.
	Cached bool
	// Scope names the breaker that decided a denial when it was not
	// Breaker itself: its parent scope, with DENIED_PARENT_OPEN (the
	// policy's parent, such as a vendor host); Reason and RetryAfter are
	// then the parent's. Empty otherwise.
	Scope string
	// ShadowDecision is set when the breaker is in shadow mode (its
	// policy's shadow, or an operator's setting): Decision is then
	// ALLOWED and this is what enforced mode would have answered (ALLOWED,
	// PROBE or a DENIED_* value). With PROBE the call is the shadow probe:
	// its Record settles it. UNSPECIFIED for an enforced breaker. The
	// fast-mode view answers from memory with ALLOWED, DENIED_OPEN or
	// DENIED_PAUSED (it asks breakerd whenever the shadow probe may be
	// due).
	ShadowDecision pb.Decision

	// late is breakerd's answer to the Allow the fallback answered for
	// it (a missed budget): Record sends the outcome to breakerd once it
	// has come. nil otherwise.
	late *lateAnswer
	// knownProbe: the fallback let this call through as the one call of
	// this client at a breaker known open whose probe was due; its outcome
	// settles it (known.settle).
	knownProbe bool
	// localHas: the local fallback breaker already holds this call's
	// outcome (recordLate): a failure to reach breakerd does not add it
	// twice.
	localHas bool
	// at is when the answer was given (this client's clock), which a
	// denial's words are rendered at.
	at time.Time
}

// lateAnswer is breakerd's answer to an Allow that missed its budget:
// p is set (nil when breakerd never answered) before done is closed.
type lateAnswer struct {
	done chan struct{}
	p    *Permit
}

// probe reports whether the call holds the fleet's probe lease: a PROBE,
// or, in shadow mode, the shadow probe.
func (p *Permit) probe() bool {
	return p.Decision == pb.Decision_DECISION_PROBE || p.ShadowDecision == pb.Decision_DECISION_PROBE
}

// Allowed reports whether the call may go out (ALLOWED or PROBE).
func (p *Permit) Allowed() bool {
	return p.Decision == pb.Decision_DECISION_ALLOWED || p.Decision == pb.Decision_DECISION_PROBE
}

// Allow asks whether a call to breaker may go out. A denial is a Permit
// with Allowed() false, not an error. In order: the name and worker id are
// checked as breakerd checks them (limits.Name); a cached denial (with
// WithOpenCache) answers with no round trip; with WithFastMode, the view
// answers a closed circuit, or one known to deny, with no round trip
// (Permit.Cached); while breakerd is known to be
// unreachable, the fallback answers at once; otherwise breakerd is asked,
// and if it does not answer within the Allow budget, or cannot be reached,
// the fallback answers this call (Permit.Degraded) while the client stays
// on breakerd. Errors: InvalidArgument naming the field (a bad name or
// worker id), the caller's context ending, and any error breakerd returns
// about the request (PermissionDenied, Unauthenticated, Internal...).
// The answer is recorded on ctx's span when it is recording
// (docs/observability.md).
func (c *Client) Allow(ctx context.Context, breaker string) (*Permit, error) {
	p, err := c.allow(ctx, breaker)
	traceDecision(ctx, p)
	return p, err
}

// allow is Allow, untraced.
func (c *Client) allow(ctx context.Context, breaker string) (*Permit, error) {
	if c.view != nil && c.badWorker == nil {
		// A breaker in the view came from breakerd: its name is valid.
		if p := c.fastAllow(breaker); p != nil {
			return c.saved(p), nil
		}
	}
	if err := c.check(breaker); err != nil {
		return nil, err
	}
	if c.cache != nil {
		if p := c.cache.lookup(breaker, c.worker(), c.o.clock.Now(), c.hearing); p != nil {
			return c.saved(p), nil
		}
	}
	if c.down.Load() {
		return c.fallbackAllow(breaker), nil
	}
	var epoch, ver, all uint64
	sent := c.o.clock.Now() // when it was asked: a denial is timed from here, never from a late answer's arrival
	if c.cache != nil {
		epoch = c.cache.begin()
	}
	if c.view != nil {
		ver, all = c.view.stamp(breaker)
	}
	late := &lateAnswer{done: make(chan struct{})}
	req := &pb.AllowRequest{Breaker: breaker, WorkerId: c.worker()}
	res, err, inTime := ask(ctx, c, breaker, c.allowBudget(breaker, sent),
		func(ctx context.Context) (*pb.AllowResponse, error) { return c.api.Allow(ctx, req) },
		func(res *pb.AllowResponse, err error) { c.lateAllow(breaker, epoch, ver, all, sent, res, err, late) })
	switch {
	case !inTime && ctx.Err() != nil:
		return nil, ctx.Err()
	case !inTime:
		c.stats.budgetMisses.Add(1)
		p := c.fallbackAllow(breaker)
		if p.Allowed() {
			p.late = late // the outcome goes to breakerd too, once it answers
		}
		return p, nil
	case err != nil && reachFailure(err):
		return c.fallbackAllow(breaker), nil
	case err != nil:
		return nil, err
	}
	p := permitOf(breaker, res, sent)
	c.known.hear(p, sent)
	if c.cache != nil {
		c.cache.store(p, c.worker(), epoch, c.o.clock.Now())
	}
	if c.view != nil {
		c.fastLearn(p, ver, all, sent)
	}
	return p, nil
}

// permitOf is breakerd's answer res about breaker, asked at at (this
// client's clock), as a Permit.
func permitOf(breaker string, res *pb.AllowResponse, at time.Time) *Permit {
	return &Permit{
		Breaker:    breaker,
		Decision:   res.GetDecision(),
		Ticket:     res.GetTicket(),
		RetryAfter: time.Duration(res.GetRetryAfterMs()) * time.Millisecond,
		Reason:     res.GetReason(),
		Denial:     onClientClock(res.GetDenial(), res.GetState().GetAsOfMs(), at),
		State:      res.GetState(),
		Scope:      res.GetScope(),
		at:         at,

		DaemonDegraded: res.GetDegraded(),
		ShadowDecision: res.GetShadowDecision(),
	}
}

// lateAllow takes an Allow answer that came after its caller had been
// answered by the fallback: a denial goes to the open cache, the answer to
// the fast-mode view (unless an event fenced it), and a PROBE lease, which
// no caller will use, is handed back at once (OUTCOME_CANCELED decides
// nothing), so the fleet's one probe is not held until its timeout.
func (c *Client) lateAllow(breaker string, epoch, ver, all uint64, sent time.Time, res *pb.AllowResponse, err error, late *lateAnswer) {
	if err != nil {
		close(late.done)
		return
	}
	c.stats.lateAnswers.Add(1)
	p := permitOf(breaker, res, sent)
	late.p = p // (a PROBE's lease is handed back below: Record sends its generation alone)
	close(late.done)
	c.known.hear(p, sent)
	if c.cache != nil {
		c.cache.store(p, c.worker(), epoch, c.o.clock.Now())
	}
	if c.view != nil {
		c.fastLearn(p, ver, all, sent)
	}
	if !p.probe() {
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.o.recordTimeout)
	defer cancel()
	if _, err := c.Record(ctx, p, Result{Outcome: pb.Outcome_OUTCOME_CANCELED, Message: "late answer: the caller had been answered by the fallback"}); err != nil {
		c.log("client: releasing the probe lease of a late answer", err)
		return
	}
	c.stats.probesReleased.Add(1)
}

// check refuses a breaker name or worker id breakerd would refuse, with
// the same InvalidArgument naming the field, without a round trip.
func (c *Client) check(breaker string) error {
	if err := limits.Name("breaker", breaker); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return c.badWorker
}

// budget is how long the next call waits for breakerd's answer: the
// Allow budget, or, before breakerd has ever answered, until the end of
// the first-contact window, which the client's first call opens (once per
// client: a daemon that never answers costs it once, not once per call);
// 0 waits as long as the caller's context allows.
func (c *Client) budget() time.Duration {
	b := c.o.budget
	if c.answered.Load() || b <= 0 {
		return b
	}
	now := time.Now().UnixNano()
	c.firstUntil.CompareAndSwap(0, now+int64(c.o.firstBudget))
	return max(b, time.Duration(c.firstUntil.Load()-now))
}

// allowBudget is how long an Allow on breaker asked at now waits: the
// budget, or, at a breaker last known open whose probe is due, as long as
// an RPC may take: only breakerd grants the probe.
func (c *Client) allowBudget(breaker string, now time.Time) time.Duration {
	b := c.budget()
	if b > 0 && c.known.due(breaker, now) {
		b = max(b, c.o.rpcTimeout)
	}
	return b
}

// ask runs rpc against breakerd and waits for its answer within the
// budget b (Client.budget, or longer) or until ctx ends. With a budget, the RPC itself is detached from
// ctx's cancellation and bounded by the RPC timeout or ctx's deadline,
// whichever comes first (rpcEnd), and by Close: when the wait ends
// first, inTime is false and late gets the answer when it comes.
// With none (WithAllowBudget(0)), ctx bounds both. Every answer,
// in time or late, updates the client's count of failures to reach
// breakerd.
func ask[T any](ctx context.Context, c *Client, breaker string, b time.Duration, rpc func(context.Context) (T, error), late func(T, error)) (res T, err error, inTime bool) {
	var (
		rctx   context.Context
		cancel context.CancelFunc
	)
	if b > 0 { // (withBudget: a daemon back from a loss is spared it: pick.go)
		rctx, cancel = context.WithDeadline(withBudget(context.WithoutCancel(ctx)), rpcEnd(ctx, max(c.o.rpcTimeout, b)))
	} else { // no budget: the caller waits for the RPC, which a stalled daemon cannot hold past its timeout
		rctx, cancel = context.WithDeadline(ctx, rpcEnd(ctx, c.o.rpcTimeout))
	}
	stop := context.AfterFunc(c.ctx, cancel)
	type answer struct {
		res T
		err error
	}
	ch := make(chan answer, 1)
	var mu sync.Mutex
	waiting := true
	go func() {
		defer stop()
		defer cancel()
		r, e := rpc(rctx)
		c.noteReach(e)
		mu.Lock()
		w := waiting
		if w {
			ch <- answer{r, e}
		}
		mu.Unlock()
		if !w && late != nil {
			late(r, e)
		}
	}()
	var timer <-chan time.Time
	if b > 0 {
		t, stopTimer := c.o.after(breaker, b)
		defer stopTimer()
		timer = t
	}
	select {
	case a := <-ch:
		return a.res, a.err, true
	case <-timer:
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	select {
	case a := <-ch: // it answered as the wait ended
		return a.res, a.err, true
	default:
	}
	waiting = false
	return res, err, false
}

// rpcEnd is when an RPC begun now for a caller with ctx ends: after
// timeout, or at the caller's deadline if that comes first. Every attempt
// at every daemon (serviceConfig's retries) shares it: a daemon tried
// after another failed gets what is left, never a fresh bound.
func rpcEnd(ctx context.Context, timeout time.Duration) time.Time {
	end := time.Now().Add(timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(end) {
		return dl
	}
	return end
}

// fallbackAllow answers for breakerd when it did not: failing closed,
// or, at a breaker breakerd last said denies, that denial until its end
// and then one call of this client at a time (known.fallback), or else
// the local breaker.
func (c *Client) fallbackAllow(name string) *Permit {
	if c.o.fallback == FailClosed {
		d := fallbackDenial(pb.Decision_DECISION_DENIED_OPEN, breaker.Forever, 0)
		return &Permit{Breaker: name, Decision: d.GetDecision(), Degraded: true, Reason: d.GetReason(), Denial: d,
			at: c.o.clock.Now()}
	}
	held, probe, ok := c.known.fallback(name, c.o.clock.Now())
	if ok && !probe {
		return held
	}
	p := c.local.allow(name)
	if probe {
		if p.Allowed() {
			p.knownProbe = true
		} else {
			c.known.release(name)
		}
	}
	return p
}

// reachFailure tells a failure to reach breakerd (connection refused or
// reset, and grpc's other transport failures, all Unavailable; the RPC's
// own deadline) from everything else: an error about the request itself
// (InvalidArgument; Internal from grpc's encoder for invalid UTF-8;
// ResourceExhausted for an oversize message), a server-side error about
// one breaker (Internal), or the caller's cancellation.
func reachFailure(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// noteReach counts an RPC's result toward DownAfterFailures: an answer
// resets the count, a failure to reach breakerd adds one, and anything
// else leaves it.
func (c *Client) noteReach(err error) {
	switch {
	case err == nil:
		c.answered.Store(true)
		c.streak.Store(0)
	case reachFailure(err):
		if c.streak.Add(1) >= DownAfterFailures {
			c.markDown(err)
		}
	}
}

// markDown switches to the fallback, says so once (log, outage hook,
// Stats.Outages), and starts checking for breakerd's return in the
// background.
func (c *Client) markDown(err error) {
	c.mu.Lock()
	if c.closed || c.down.Load() {
		c.mu.Unlock()
		return
	}
	c.down.Store(true)
	c.downSince = c.o.clock.Now()
	c.mu.Unlock()
	c.stats.outages.Add(1)
	c.log(fmt.Sprintf("client: breakerd unreachable (%d consecutive failures); answering from the local fallback", DownAfterFailures), err)
	if c.o.onOutage != nil {
		c.o.onOutage(true, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.wg.Add(1)
		go c.reconnect()
	}
}

// reconnect polls breakerd's health on the client's back-off schedule
// (recheckAfter from the reconnect interval, on the client's clock) until it
// is SERVING again, then forgets the local verdicts and returns to
// asking breakerd.
func (c *Client) reconnect() {
	defer c.wg.Done()
	for n := 0; ; n++ {
		select {
		case <-c.ctx.Done():
			return
		case <-c.after(recheckAfter(c.o.retry, n)):
		}
		ctx, cancel := context.WithTimeout(c.ctx, c.o.retry)
		res, err := c.health.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && res.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			c.mu.Lock()
			c.local.reset()
			c.streak.Store(0)
			c.down.Store(false)
			c.mu.Unlock()
			c.log("client: breakerd answers again", nil)
			if c.o.onOutage != nil {
				c.o.onOutage(false, nil)
			}
			return
		}
	}
}

func (c *Client) log(msg string, err error) {
	if c.o.logger == nil {
		return
	}
	if err != nil {
		c.o.logger.Warn(msg, "worker", c.worker(), "err", err)
		return
	}
	c.o.logger.Info(msg, "worker", c.worker())
}

// Result is the outcome of one tool call, after its own retries.
type Result struct {
	Outcome pb.Outcome
	// RetryAfter is the dependency's Retry-After, with OUTCOME_RATE_LIMITED.
	RetryAfter time.Duration
	// Deadline is the caller's remaining time budget, with
	// OUTCOME_RATE_LIMITED: the 429 counts when RetryAfter exceeds it.
	Deadline time.Duration
	// Latency is how long the call took, retries included.
	Latency time.Duration
	// Message is a short description of a failure ("HTTP 503"); never a
	// payload or a secret. At most 256 bytes are sent.
	Message string
	// CredentialWorked, with OUTCOME_UNAUTHENTICATED, says the credential
	// had worked on this breaker before, so the 401 means it was revoked
	// and breakerd pauses the breaker. The client also sets it by itself
	// once this worker has recorded a SUCCESS on the breaker.
	CredentialWorked bool
}

// Record reports the result of the call p admitted. A degraded permit's
// result goes to the local fallback breaker (no round trip). With
// WithFastMode it returns at once: the outcome is queued for a background
// RecordBatch, or not sent (a success on a breaker the view shows closed
// with no failure run; a success when the queue is full), and the
// response's Note says which; Flush waits for the queue. Durations go
// out clamped to what breakerd accepts (0 to 7 days, limits.MaxDurationMs),
// keeping whether the Retry-After exceeds the deadline. When breakerd
// cannot be reached the result goes to the local breaker too (and counts
// toward DownAfterFailures), and Record returns a response noting it
// rather than an error. Errors: InvalidArgument naming the field (a bad
// name or worker id, checked before any round trip; a bad outcome), and
// any other error breakerd returns about the request. The outcome, and
// whether it counted, are recorded on ctx's span when it is recording.
func (c *Client) Record(ctx context.Context, p *Permit, r Result) (*pb.RecordResponse, error) {
	res, err := c.record(ctx, p, r)
	if err == nil {
		traceOutcome(ctx, r, res)
	}
	return res, err
}

// record is Record, untraced.
func (c *Client) record(ctx context.Context, p *Permit, r Result) (*pb.RecordResponse, error) {
	if p.Degraded {
		c.local.record(p.Breaker, p.Ticket, r)
		if p.knownProbe {
			c.known.settle(p.Breaker, r.Outcome, c.o.clock.Now(), c.local.pol.CooldownBase)
		}
		if p.late != nil {
			c.recordLate(p, r)
			return &pb.RecordResponse{Note: "recorded by the local fallback; sent to breakerd once its late answer comes"}, nil
		}
		return &pb.RecordResponse{Note: "recorded by the local fallback: breakerd unreachable"}, nil
	}
	if err := c.check(p.Breaker); err != nil {
		return nil, err
	}
	if c.out != nil {
		return c.fastRecord(ctx, p, r), nil
	}
	_, worked := c.worked.Load(p.Breaker)
	retryMs, deadlineMs := wireWait(r.RetryAfter, r.Deadline)
	res, err := c.api.Record(ctx, &pb.RecordRequest{
		Breaker:          p.Breaker,
		WorkerId:         c.worker(),
		Ticket:           p.Ticket,
		Outcome:          r.Outcome,
		RetryAfterMs:     retryMs,
		DeadlineMs:       deadlineMs,
		LatencyMs:        limits.ClampMs(r.Latency.Milliseconds()),
		Message:          oneLine(r.Message, maxMessageBytes),
		CredentialWorked: r.Outcome == pb.Outcome_OUTCOME_UNAUTHENTICATED && (r.CredentialWorked || worked),
		RecordId:         newRecordID(), // every attempt (grpc retries it) counts once
	})
	c.noteReach(err)
	if err == nil && r.Outcome == pb.Outcome_OUTCOME_SUCCESS {
		c.worked.Store(p.Breaker, true)
	}
	if err != nil && reachFailure(err) && !callerCanceled(ctx) {
		if !p.localHas {
			c.local.record(p.Breaker, nil, r)
		}
		return &pb.RecordResponse{Note: "recorded by the local fallback: breakerd unreachable"}, nil
	}
	return res, err
}

// wireWait returns a Retry-After and a deadline as the milliseconds
// breakerd accepts (0 to limits.MaxDurationMs), keeping whether the wait
// exceeds the deadline: a wait of 30 days against 10 days left is sent as
// 7 days against 7 days less 1ms.
func wireWait(retryAfter, deadline time.Duration) (retryMs, deadlineMs int64) {
	retryMs, deadlineMs = limits.ClampMs(retryAfter.Milliseconds()), limits.ClampMs(deadline.Milliseconds())
	if retryAfter > deadline && retryMs <= deadlineMs && retryMs > 0 {
		deadlineMs = retryMs - 1
	}
	return retryMs, deadlineMs
}

// ErrAllow is wrapped by Call's error when Allow itself failed (fn was
// not run), so that a caller can tell it from fn's own failure.
var ErrAllow = errors.New("client: allow")

// Call asks breakerd, runs fn if allowed, and records fn's outcome as the
// classifier reads its error. It returns fn's error unchanged, or, when
// the call was denied, a *CircuitOpenError or *ProbeInFlightError without
// running fn (AsDenial renders either for the model). fn's own retries
// stay inside fn: one exhausted call is one outcome. The caller's own
// cancellation is not recorded (whenever ctx is cancelled by the time fn
// returns an error, whatever the error and the classifier say); if the
// call was the fleet's probe, Call records OUTCOME_CANCELED instead (also
// when fn panics), which releases the lease at once without a verdict. A
// deadline that passed is not a cancellation: it is recorded (TIMEOUT).
// Call waits for its Record no longer than the Allow budget, and never
// past ctx's deadline: the Record goes on in the background, bounded by
// the record timeout, and breakerd still counts it (docs/reliability.md).
// Other errors: Allow's, wrapped ("client: allow web_search: ...",
// wrapping ErrAllow), with fn not run; a failure to Record (other than
// breakerd being unreachable) that comes while Call waits, joined to fn's
// result (one that comes later is logged).
//
// The decision and the outcome are recorded on ctx's span; without a
// recording one, and with an application TracerProvider set, on a span
// of Call's own, "execute_tool <breaker>" (docs/observability.md).
func (c *Client) Call(ctx context.Context, breaker string, fn func(ctx context.Context) error) error {
	ctx, end := toolSpan(ctx, breaker)
	defer end()
	p, err := c.Allow(ctx, breaker)
	if err != nil {
		return fmt.Errorf("%w %q: %w", ErrAllow, breaker, err)
	}
	if !p.Allowed() {
		return DeniedError(p)
	}
	// The Record goes on in the background once Call stops waiting for
	// it (settle): fn's result is never held back past the caller.
	record := func(r Result) (*pb.RecordResponse, error) {
		res, err, inTime := c.settle(ctx, p, r)
		if inTime && err == nil {
			traceOutcome(ctx, r, res)
		}
		return res, err
	}
	settled := false
	if p.probe() {
		// The fleet's one probe (or shadow probe): if fn panics or the caller gives up, hand
		// the lease back at once (OUTCOME_CANCELED decides nothing) rather
		// than make every worker wait out the probe timeout.
		defer func() {
			if !settled {
				_, _ = record(Result{Outcome: pb.Outcome_OUTCOME_CANCELED})
			}
		}()
	}
	start := c.o.clock.Now()
	callErr := fn(ctx)
	if callErr != nil && callerCanceled(ctx) {
		// The caller gave up, however fn words it: nothing is counted, and
		// a probe hands its lease back (the deferred CANCELED).
		return callErr
	}
	r, ok := c.outcomeOf(ctx, callErr)
	if !ok {
		return callErr
	}
	r.Latency = c.o.clock.Now().Sub(start) // the client's clock (WithClock)
	settled = true
	if _, err := record(r); err != nil {
		return errors.Join(callErr, fmt.Errorf("client: record %s: %w", breaker, err))
	}
	return callErr
}

// ignoredMessage is the operator's words for an error WithIgnore names.
const ignoredMessage = "ignored by the worker (WithIgnore): not the dependency's fault"

// outcomeOf is what Call records for fn's error err: an error WithIgnore
// names is OUTCOME_INVALID_ARGUMENT; any other goes to the classifier.
func (c *Client) outcomeOf(ctx context.Context, err error) (Result, bool) {
	if err != nil && c.o.ignore != nil && c.o.ignore(err) {
		return Result{Outcome: pb.Outcome_OUTCOME_INVALID_ARGUMENT, Message: ignoredMessage}, true
	}
	return c.o.classify(ctx, err)
}

// CallValidated is Call for a tool whose output can be checked: fn's
// output goes through validate (when non-nil), and a validation error is
// returned as a *MalformedOutputError and recorded as
// OUTCOME_MALFORMED_OUTPUT, a counted failure (the dependency answered,
// but not usefully). It returns fn's output when the call was made and
// validated.
func CallValidated[T any](ctx context.Context, c *Client, breaker string, fn func(ctx context.Context) (T, error), validate func(T) error) (T, error) {
	var out T
	err := c.Call(ctx, breaker, func(ctx context.Context) error {
		v, err := fn(ctx)
		if err != nil {
			return err
		}
		if validate != nil {
			if verr := validate(v); verr != nil {
				return &MalformedOutputError{Err: verr}
			}
		}
		out = v
		return nil
	})
	return out, err
}

// maxMessageBytes is the most of a failure message breakerd keeps.
const maxMessageBytes = 256

// oneLine makes a failure message fit a one-line reason (limits.OneLine).
func oneLine(v string, n int) string { return limits.OneLine(v, n) }

// newRecordID is a Record's id (RecordRequest.record_id), made once per
// Record: random, as the daemon's own ids and lease tokens are.
func newRecordID() string { return probe.NewToken() }
