package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/savings"
)

// The sources of breakerd_calls_avoided_total: where a call was refused.
const (
	SourceDaemonDenial = "daemon_denial"
	SourceClientDenial = "client_denial"
	SourceToolRemoved  = "tool_removed"
)

// Savings counts the calls the breakers kept from going out, and the
// spend that avoided by the policies' cost_per_call (an estimate). It is
// safe for concurrent use.
type Savings struct {
	calls  *prometheus.CounterVec
	spend  *prometheus.CounterVec
	costOf func(breaker string) *policy.Cost
	// bySource are the hot path's series, resolved once.
	bySource [3]prometheus.Counter
}

// NewSavings registers breakerd_calls_avoided_total and
// breakerd_spend_avoided_estimate_total on reg; costOf returns a
// breaker's cost_per_call (nil: none).
func NewSavings(reg prometheus.Registerer, costOf func(breaker string) *policy.Cost) (*Savings, error) {
	s := &Savings{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "calls_avoided_total",
			Help: "Calls to a dependency not made because its breaker refused them, by source: daemon_denial (an Allow this daemon denied), client_denial (refused in a client's own process, fast mode or the open cache, as reported to this daemon), tool_removed (a run that started without the tool, as reported to this daemon). Each call is counted by one daemon: sum over replicas."},
			[]string{"source"}),
		spend: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "spend_avoided_estimate_total",
			Help: "An estimate of the spend avoided: the calls counted in breakerd_calls_avoided_total times their breaker's policy cost_per_call, by the cost's currency (breakers without a cost_per_call add nothing). Sum over replicas."},
			[]string{"currency"}),
		costOf: costOf,
	}
	for _, c := range []prometheus.Collector{s.calls, s.spend} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for i, src := range []string{SourceDaemonDenial, SourceClientDenial, SourceToolRemoved} {
		s.bySource[i] = s.calls.WithLabelValues(src)
	}
	return s, nil
}

// Count adds the calls breaker saved (savings.Options.OnSaved).
func (s *Savings) Count(breaker string, c savings.Counts) {
	for i, n := range []int64{c.DaemonDenials, c.ClientDenials, c.ToolsRemoved} {
		if n > 0 {
			s.bySource[i].Add(float64(n))
		}
	}
	if cost := s.costOf(breaker); cost != nil && c.Calls() > 0 {
		s.spend.WithLabelValues(cost.Currency).Add(cost.Estimate(c.Calls()))
	}
}
