package mcpgw

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Call results, the values of breakerd_mcp_tool_calls_total's result
// label.
const (
	// resultOK: the upstream answered, isError false.
	resultOK = "ok"
	// resultIsError: the upstream answered with isError true.
	resultIsError = "is_error"
	// resultDenied: breakerd (or the session's run, or the fallback)
	// denied the call; the upstream was not called.
	resultDenied = "denied"
	// resultUpstreamError: the upstream could not be reached or did not
	// answer in time.
	resultUpstreamError = "upstream_error"
)

var results = [...]string{resultOK, resultIsError, resultDenied, resultUpstreamError}

// gatewayMetrics are the gateway's Prometheus metrics (docs/mcp.md,
// Metrics). The per-upstream counters are resolved once, in newMetrics.
type gatewayMetrics struct {
	calls          *prometheus.CounterVec
	byUpstream     map[string]map[string]prometheus.Counter // upstream -> result -> counter
	listChanges    prometheus.Counter
	sessionsOpened prometheus.Counter
	refused        *prometheus.CounterVec // by refusal reason
}

// Refusal reasons, the values of breakerd_mcp_sessions_refused_total's
// reason label.
const (
	refusedMaxSessions = "max_sessions" // --max-sessions are open
	refusedClientShare = "client_share" // the client holds its share
	refusedOrigin      = "origin"       // a foreign Origin (any request)
)

// newMetrics builds the gateway's metrics for g's upstreams and, when reg
// is not nil, registers them there with the gauges that read g.
func newMetrics(g *Gateway, reg prometheus.Registerer) (*gatewayMetrics, error) {
	m := &gatewayMetrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "breakerd_mcp_tool_calls_total",
			Help: "Upstream tool calls the gateway answered, by upstream and result: ok, is_error (the upstream answered isError), denied (breakerd denied it; the upstream was not called), upstream_error (unreachable, or no answer in time)."},
			[]string{"upstream", "result"}),
		listChanges: prometheus.NewCounter(prometheus.CounterOpts{Name: "breakerd_mcp_tool_list_changes_total",
			Help: "Changes of a session's tool list sent to its agent (notifications/tools/list_changed): tools taken off because their breaker denies."}),
		sessionsOpened: prometheus.NewCounter(prometheus.CounterOpts{Name: "breakerd_mcp_sessions_total",
			Help: "Downstream MCP sessions that joined the gateway."}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "breakerd_mcp_sessions_refused_total",
			Help: "HTTP requests to /mcp refused by the session bounds or the Origin check, by reason: max_sessions, client_share (the client address holds its share), origin (403)."},
			[]string{"reason"}),
		byUpstream: map[string]map[string]prometheus.Counter{},
	}
	for _, r := range []string{refusedMaxSessions, refusedClientShare, refusedOrigin} {
		m.refused.WithLabelValues(r)
	}
	for _, u := range g.o.Config.Upstreams {
		m.byUpstream[u.Name] = map[string]prometheus.Counter{}
		for _, r := range results {
			m.byUpstream[u.Name][r] = m.calls.WithLabelValues(u.Name, r)
		}
	}
	if reg == nil {
		return m, nil
	}
	sessions := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "breakerd_mcp_sessions",
		Help: "Downstream MCP sessions open now."}, func() float64 {
		g.mu.Lock()
		defer g.mu.Unlock()
		return float64(len(g.sessions))
	})
	degraded := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "breakerd_mcp_degraded",
		Help: "1 while breakerd is unreachable and tool calls are judged by the fallback (as /healthz's degraded), 0 otherwise."}, func() float64 {
		if g.Health().Status != "ok" {
			return 1
		}
		return 0
	})
	for _, c := range []prometheus.Collector{m.calls, m.listChanges, m.sessionsOpened, m.refused, sessions, degraded} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// call counts one upstream tool call's result.
func (m *gatewayMetrics) call(upstream, result string) {
	if c, ok := m.byUpstream[upstream][result]; ok {
		c.Inc()
		return
	}
	m.calls.WithLabelValues(upstream, result).Inc()
}
