// Package metrics exposes breakerd's Prometheus metrics: decisions and
// records (from a gRPC interceptor: no Redis round trip added), fleet
// events and transitions (from the live event hub), circuits by state
// (from a view RunCircuits refreshes in the background: a scrape never
// reads Redis), Redis script latency (from a go-redis
// hook), degraded mode, config reloads and the build. Every metric is registered on
// the prometheus.Registerer the caller passes, so that other parts of the
// daemon can add theirs to the same registry.
//
// Each metric, its labels and how to aggregate it: docs/operations.md (Metrics).
package metrics

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/buildinfo"
	"github.com/breakerd/breakerd/internal/store"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Namespace prefixes every metric name.
const Namespace = "breakerd"

// DefaultCircuitsInterval is how often RunCircuits lists the fleet's
// breakers to refresh the circuit gauges.
const DefaultCircuitsInterval = 30 * time.Second

// Options configure Metrics. The zero value of each field means its default.
type Options struct {
	// Circuits lists every breaker that holds state (store.Store.List).
	// It feeds breakerd_circuits and breakerd_open_circuits through a view
	// that RunCircuits (or RefreshCircuits) refreshes: a scrape reads the
	// view and never calls Circuits, so its cost does not grow with the
	// fleet. Nil: those two metrics are not exported.
	Circuits func(ctx context.Context) ([]*pb.BreakerState, error)
	// CircuitsInterval is how often RunCircuits refreshes the view. Default
	// DefaultCircuitsInterval.
	CircuitsInterval time.Duration
	// CircuitsTimeout bounds one refresh. Default: CircuitsInterval.
	CircuitsTimeout time.Duration
	// CooldownCap returns the cooldown cap of a breaker's effective
	// policy, exported per open breaker (breakerd_breaker_cooldown_cap_seconds)
	// so that an alert can compare how long it has been open with what its
	// policy expects. Nil: that series is not exported.
	CooldownCap func(breaker string) time.Duration
	// MaxBreakerSeries caps the breakers with series of their own
	// (breakerd_breaker_*). 0 means DefaultMaxBreakerSeries; negative: no
	// breaker gets series (breakerd_breaker_series_dropped counts them).
	MaxBreakerSeries int
	// Declared reports whether the policy names a breaker itself
	// (policy.Set.Declares): past MaxBreakerSeries such breakers keep
	// their series first. Nil: none is declared.
	Declared func(breaker string) bool
}

// Metrics holds breakerd's collectors. It is safe for concurrent use.
type Metrics struct {
	decisions   *prometheus.CounterVec
	records     *prometheus.CounterVec
	rpcErrors   *prometheus.CounterVec
	events      *prometheus.CounterVec
	transitions *prometheus.CounterVec
	scripts     *prometheus.HistogramVec
	degraded    prometheus.Gauge
	reloads     *prometheus.CounterVec
	reloadOK    prometheus.Gauge
	rpc         *rpcTimer
	circuits    *circuits // nil without Options.Circuits

	// stateLost and evictionRisk say when Redis forgets
	// (docs/reliability.md, "Redis that forgets").
	stateLost    prometheus.Counter
	evictionRisk prometheus.Gauge

	// shadowTransitions and shadowDecisions count shadow mode apart:
	// what shadowed breakers would have done (never in transitions or
	// decisions, so no alert on real opens fires on a shadow trip).
	shadowTransitions *prometheus.CounterVec
	shadowDecisions   *prometheus.CounterVec

	// The hot path's series, resolved once in New so that no RPC builds a
	// label string or hashes label values: a decision's counter, an
	// outcome's counters (not counted, counted), a script's histogram.
	byDecision map[pb.Decision]prometheus.Counter
	byOutcome  map[pb.Outcome][2]prometheus.Counter
	byScript   map[string]prometheus.Observer
}

// New registers breakerd's metrics on reg and returns them. It fails when
// a metric of the same name is already registered there.
func New(reg prometheus.Registerer, o Options) (*Metrics, error) {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "decisions_total",
			Help: "Allow answers this daemon gave, by decision (allowed, probe, denied_open, denied_probe_in_flight, denied_forced_open)."},
			[]string{"decision"}),
		records: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "records_total",
			Help: "Outcomes recorded through this daemon, by outcome and whether they moved the breaker (counted true/false)."},
			[]string{"outcome", "counted"}),
		rpcErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "rpc_errors_total",
			Help: "RPCs this daemon answered with a gRPC error, by method and status code."},
			[]string{"method", "code"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "events_total",
			Help: "Fleet-wide events heard on the live feed, by kind. Every replica hears every event: aggregate replicas with max, not sum."},
			[]string{"kind"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "transitions_total",
			Help: "Fleet-wide state changes (automatic and forced) heard on the live feed, by from and to state and by cause (trip, probe_failed, probe_succeeded, cooldown_elapsed, forced, ...). Aggregate replicas with max, not sum."},
			[]string{"from", "to", "cause"}),
		shadowTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "shadow_transitions_total",
			Help: "Fleet-wide state changes of breakers in shadow mode (not enforced: what would have happened), heard on the live feed, by from and to state and by cause. Aggregate replicas with max, not sum."},
			[]string{"from", "to", "cause"}),
		shadowDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "shadow_decisions_total",
			Help: "Allow answers this daemon gave on breakers in shadow mode (all allowed), by the decision enforced mode would have given."},
			[]string{"decision"}),
		scripts: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "redis_script_duration_seconds",
			Help:    "Round-trip time of breakerd's Lua scripts in Redis, by script (allow, record, force, read). A pipeline (a batch read, or concurrent Allow and Record calls coalesced into one round trip) is one observation for each script it carries.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}},
			[]string{"script"}),
		degraded: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "degraded",
			Help: "1 while Redis is unreachable (what the daemon answers then depends on --redis-outage: docs/reliability.md), 0 while it answers."}),
		stateLost: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "redis_state_lost_total",
			Help: "Breaker states this daemon heard (an open period not over, an operator's pin) that it found Redis had lost: a restart without persistence, an eviction or a flush. Each daemon counts what it finds: aggregate replicas with max, not sum."}),
		evictionRisk: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "redis_eviction_risk",
			Help: "1 when Redis (any master of a Cluster) may evict breakerd's keys (a maxmemory limit with a maxmemory-policy other than noeviction), as INFO said when this daemon last checked (at start and whenever Redis came back); 0 otherwise."}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "config_reloads_total",
			Help: "Policy file reloads, by result (ok, error: the previous policy stays in force)."},
			[]string{"result"}),
		reloadOK: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "config_last_reload_successful",
			Help: "1 when the last policy reload succeeded (or none was tried), 0 when it was rejected."}),
		rpc: newRPCTimer(),
	}
	m.reloadOK.Set(1)
	bi := buildinfo.Get()
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "build_info",
		Help: "Always 1; the labels say which build of breakerd this daemon runs (version, commit, Go version)."},
		[]string{"version", "commit", "goversion"})
	build.WithLabelValues(bi.Version, bi.Commit, bi.GoVersion).Set(1)
	cs := []prometheus.Collector{build, m.decisions, m.records, m.rpcErrors, m.events, m.transitions, m.shadowTransitions, m.shadowDecisions, m.scripts, m.degraded, m.reloads, m.reloadOK, m.rpc.vec, m.stateLost, m.evictionRisk}
	if o.Circuits != nil {
		m.circuits = newCircuits(o)
		cs = append(cs, m.circuits)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: register: %w", err)
		}
	}
	m.zeroes()
	return m, nil
}

// zeroes makes every decision, outcome, script, reload result and event
// kind show from the start, at 0, so that an alert's increase() sees the
// first stuck_open or open_fraction_cap as a rise from 0, not a new series.
func (m *Metrics) zeroes() {
	m.byDecision = map[pb.Decision]prometheus.Counter{}
	for v := range pb.Decision_name {
		if v != 0 {
			m.byDecision[pb.Decision(v)] = m.decisions.WithLabelValues(breaker.EnumName(pb.Decision(v)))
		}
	}
	m.byOutcome = map[pb.Outcome][2]prometheus.Counter{}
	for v := range pb.Outcome_name {
		if v != 0 {
			name := breaker.EnumName(pb.Outcome(v))
			m.byOutcome[pb.Outcome(v)] = [2]prometheus.Counter{
				m.records.WithLabelValues(name, "false"),
				m.records.WithLabelValues(name, "true")}
		}
	}
	m.byScript = map[string]prometheus.Observer{}
	for _, name := range []string{"allow", "record", "force", "read"} {
		m.byScript[name] = m.scripts.WithLabelValues(name)
	}
	for _, r := range []string{"ok", "error"} {
		m.reloads.WithLabelValues(r)
	}
	for v := range pb.EventKind_name {
		if v != 0 {
			m.events.WithLabelValues(breaker.EnumName(pb.EventKind(v)))
		}
	}
}

// StateLabel is the label value of a state (open, half_open, ...).
func StateLabel(s pb.State) string { return breaker.EnumName(s) }

// UnaryInterceptor times every unary RPC and counts Allow decisions,
// Record outcomes and RPC errors from the requests and responses passing
// through: no Redis call.
func (m *Metrics) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := h(ctx, req)
		code := status.Code(err)
		m.rpc.observe(ctx, info.FullMethod, code, time.Since(start))
		if err != nil {
			m.rpcErrors.WithLabelValues(methodName(info.FullMethod), code.String()).Inc()
			return resp, err
		}
		switch r := resp.(type) {
		case *pb.AllowResponse:
			if c, ok := m.byDecision[r.GetDecision()]; ok {
				c.Inc()
			} else {
				m.decisions.WithLabelValues(breaker.EnumName(r.GetDecision())).Inc()
			}
			if d := r.GetShadowDecision(); d != pb.Decision_DECISION_UNSPECIFIED {
				m.shadowDecisions.WithLabelValues(breaker.EnumName(d)).Inc()
			}
		case *pb.RecordResponse:
			if q, ok := req.(*pb.RecordRequest); ok {
				m.countRecord(q, r)
			}
		case *pb.RecordBatchResponse:
			// A fast-mode client's batch: each outcome counts as its own
			// Record would.
			if q, ok := req.(*pb.RecordBatchRequest); ok && len(q.GetRecords()) == len(r.GetResults()) {
				for i, res := range r.GetResults() {
					m.countRecord(q.GetRecords()[i], res)
				}
			}
		}
		return resp, err
	}
}

// countRecord counts one Record outcome and whether it counted.
func (m *Metrics) countRecord(q *pb.RecordRequest, r *pb.RecordResponse) {
	if cs, ok := m.byOutcome[q.GetOutcome()]; ok {
		i := 0
		if r.GetCounted() {
			i = 1
		}
		cs[i].Inc()
		return
	}
	m.records.WithLabelValues(breaker.EnumName(q.GetOutcome()), strconv.FormatBool(r.GetCounted())).Inc()
}

// ObserveEvent counts one event heard on the fleet's live feed.
func (m *Metrics) ObserveEvent(e *pb.Event) {
	m.events.WithLabelValues(breaker.EnumName(e.GetKind())).Inc()
	if e.GetFrom() == e.GetTo() || e.GetKind() == pb.EventKind_EVENT_KIND_STATE_LOST { // an alert about a past state, not a change
		return
	}
	vec := m.transitions
	if e.GetShadow() {
		vec = m.shadowTransitions
	}
	vec.WithLabelValues(StateLabel(e.GetFrom()), StateLabel(e.GetTo()), CauseLabel(e)).Inc()
}

// CauseLabel is the cause label of an event: its cause when this build
// knows it (breaker.Cause.Known), else "other" (an entry written before
// events carried causes, or by a newer daemon), so the label's values
// stay a fixed set.
func CauseLabel(e *pb.Event) string {
	if c := breaker.Cause(e.GetCause()); c.Known() {
		return string(c)
	}
	return "other"
}

// SetDegraded sets breakerd_degraded.
func (m *Metrics) SetDegraded(degraded bool) {
	if degraded {
		m.degraded.Set(1)
	} else {
		m.degraded.Set(0)
	}
}

// StateLost counts a breaker state found lost by Redis
// (breakerd_redis_state_lost_total).
func (m *Metrics) StateLost() { m.stateLost.Inc() }

// SetEvictionRisk sets breakerd_redis_eviction_risk.
func (m *Metrics) SetEvictionRisk(risk bool) {
	if risk {
		m.evictionRisk.Set(1)
	} else {
		m.evictionRisk.Set(0)
	}
}

// ConfigReloaded counts a policy reload: err nil for one that took effect.
func (m *Metrics) ConfigReloaded(err error) {
	if err != nil {
		m.reloads.WithLabelValues("error").Inc()
		m.reloadOK.Set(0)
		return
	}
	m.reloads.WithLabelValues("ok").Inc()
	m.reloadOK.Set(1)
}

// RedisHook returns a go-redis hook that times breakerd's scripts (EVALSHA,
// and EVAL on the NOSCRIPT fallback). Other commands pass untimed.
func (m *Metrics) RedisHook() redis.Hook { return scriptHook{m} }

type scriptHook struct{ m *Metrics }

func (scriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h scriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := scriptOf(cmd)
		if name == "" {
			return next(ctx, cmd)
		}
		start := time.Now()
		err := next(ctx, cmd)
		h.m.observeScript(name, time.Since(start))
		return err
	}
}

// observeScript adds one observation to a script's latency histogram.
func (m *Metrics) observeScript(name string, d time.Duration) {
	if o, ok := m.byScript[name]; ok {
		o.Observe(d.Seconds())
		return
	}
	m.scripts.WithLabelValues(name).Observe(d.Seconds())
}

func (h scriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		// The scripts the pipeline carries, each named once: a batch read
		// carries one, a coalesced batch of decisions allow and record.
		var names [4]string
		n := 0
	scan:
		for _, c := range cmds {
			name := scriptOf(c)
			if name == "" {
				continue
			}
			for _, seen := range names[:n] {
				if seen == name {
					continue scan
				}
			}
			if n < len(names) {
				names[n] = name
				n++
			}
		}
		if n == 0 {
			return next(ctx, cmds)
		}
		start := time.Now()
		err := next(ctx, cmds)
		d := time.Since(start)
		for _, name := range names[:n] {
			h.m.observeScript(name, d)
		}
		return err
	}
}

// scriptOf names the breakerd script a command runs, or "".
func scriptOf(cmd redis.Cmder) string {
	args := cmd.Args()
	if len(args) < 2 {
		return ""
	}
	s, _ := args[1].(string)
	switch cmd.Name() {
	case "evalsha", "evalsha_ro":
		return store.ScriptName(s)
	case "eval", "eval_ro":
		sum := sha1.Sum([]byte(s))
		return store.ScriptName(hex.EncodeToString(sum[:]))
	}
	return ""
}

// RefreshCircuits lists the breakers once (Options.Circuits, bounded by
// CircuitsTimeout) and replaces the view the circuit gauges read. After a
// failed List the gauges are absent until the next success (not stale),
// breakerd_circuits_list_errors_total counts it, and the error is
// returned. A no-op without Options.Circuits.
func (m *Metrics) RefreshCircuits(ctx context.Context) error {
	if m.circuits == nil {
		return nil
	}
	return m.circuits.refresh(ctx)
}

// RunCircuits refreshes the circuit view at once and then every
// CircuitsInterval until ctx ends: one List per interval per daemon,
// whatever the scrape rate. Refresh errors are counted, not returned.
func (m *Metrics) RunCircuits(ctx context.Context) {
	if m.circuits == nil {
		return
	}
	t := time.NewTicker(m.circuits.o.CircuitsInterval)
	defer t.Stop()
	for {
		_ = m.circuits.refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// circuits exports breakerd_circuits{state}, breakerd_open_circuits and
// the per-breaker series (breakers.go) from the view the last refresh left. List reads the shared Redis, so
// every replica exports the same fleet-wide numbers.
type circuits struct {
	o       Options
	byState *prometheus.Desc
	open    *prometheus.Desc
	errors  prometheus.Counter

	refreshing sync.Mutex // one refresh at a time: it owns series
	series     *breakerSeries

	mu       sync.Mutex
	counts   map[pb.State]int    // nil: no successful refresh yet, or the last one failed
	breakers []prometheus.Metric // the per-breaker series of the last refresh
}

// counted are the states breakerd_circuits reports (closed breakers that
// still hold state, such as a failure run below the threshold, are not
// circuits worth a gauge).
var counted = []pb.State{pb.State_STATE_OPEN, pb.State_STATE_HALF_OPEN, pb.State_STATE_FORCED_OPEN, pb.State_STATE_FORCED_CLOSED, pb.State_STATE_PAUSED}

func newCircuits(o Options) *circuits {
	if o.CircuitsInterval <= 0 {
		o.CircuitsInterval = DefaultCircuitsInterval
	}
	if o.CircuitsTimeout <= 0 {
		o.CircuitsTimeout = o.CircuitsInterval
	}
	if o.MaxBreakerSeries == 0 {
		o.MaxBreakerSeries = DefaultMaxBreakerSeries
	}
	return &circuits{
		o: o,
		byState: prometheus.NewDesc(Namespace+"_circuits",
			"Breakers fleet-wide by state (open, half_open, forced_open, forced_closed, paused), from a List refreshed every "+o.CircuitsInterval.String()+" in the background. Every replica reports the same fleet: aggregate with max, not sum.",
			[]string{"state"}, nil),
		open: prometheus.NewDesc(Namespace+"_open_circuits",
			"Breakers fleet-wide that deny calls: open, half_open, forced_open and paused. Every replica reports the same fleet: aggregate with max, not sum.",
			nil, nil),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "circuits_list_errors_total",
			Help: "Background refreshes of the circuit view whose List failed; breakerd_circuits, breakerd_open_circuits and the breakerd_breaker_* series are absent until the next success."}),
		series: newBreakerSeries(o.CooldownCap, o.Declared, o.MaxBreakerSeries),
	}
}

func (c *circuits) refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.o.CircuitsTimeout)
	defer cancel()
	c.refreshing.Lock()
	defer c.refreshing.Unlock()
	states, err := c.o.Circuits(ctx)
	var counts map[pb.State]int
	var breakers []prometheus.Metric
	if err == nil {
		counts = map[pb.State]int{}
		for _, st := range states {
			counts[st.GetState()]++
		}
		breakers = c.series.build(states)
	} else {
		c.errors.Inc()
	}
	c.mu.Lock()
	c.counts, c.breakers = counts, breakers
	c.mu.Unlock()
	return err
}

func (c *circuits) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.byState
	ch <- c.open
	c.errors.Describe(ch)
	c.series.describe(ch)
}

// Collect reads the view: no Redis call, whatever the fleet's size.
func (c *circuits) Collect(ch chan<- prometheus.Metric) {
	ch <- c.errors
	c.mu.Lock()
	counts, breakers := c.counts, c.breakers
	c.mu.Unlock()
	if counts == nil {
		return
	}
	for _, b := range breakers {
		ch <- b
	}
	for _, s := range counted {
		ch <- prometheus.MustNewConstMetric(c.byState, prometheus.GaugeValue, float64(counts[s]), StateLabel(s))
	}
	denying := counts[pb.State_STATE_OPEN] + counts[pb.State_STATE_HALF_OPEN] + counts[pb.State_STATE_FORCED_OPEN] + counts[pb.State_STATE_PAUSED]
	ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, float64(denying))
}

// Handler serves g's metrics in the Prometheus text format, or in
// OpenMetrics to a scraper that asks for it (its Accept header), which
// carries the RPC latency's trace id exemplars. A collector that fails
// does not fail the scrape: the rest is still served.
func Handler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, EnableOpenMetrics: true})
}
