package hooks

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the dispatcher's counters, labelled by hook name and event.
type metrics struct {
	delivered *prometheus.CounterVec
	failures  *prometheus.CounterVec
	abandoned *prometheus.CounterVec
}

func newMetrics() *metrics {
	return &metrics{
		delivered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "breakerd_webhook_deliveries_total",
			Help: "Events delivered to a webhook (a 2xx answer), by hook and event.",
		}, []string{"hook", "event"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "breakerd_webhook_failures_total",
			Help: "Failed webhook attempts (an error or a non-2xx answer; each is retried), by hook and event.",
		}, []string{"hook", "event"}),
		abandoned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "breakerd_webhook_abandoned_total",
			Help: "Events given up on after the hook's give_up_after (each also logged as an error), by hook and event.",
		}, []string{"hook", "event"}),
	}
}

func (m *metrics) register(r prometheus.Registerer) error {
	return errors.Join(r.Register(m.delivered), r.Register(m.failures), r.Register(m.abandoned))
}
