package metrics

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// DefaultMaxBreakerSeries caps the breakers that get series of their own
// (breakerd_breaker_*) when Options.MaxBreakerSeries is 0: only breakers
// that are not closed-and-healthy get them, and at most this many, so a
// fleet-wide outage cannot flood Prometheus. Past the cap the breakers
// kept are chosen by what a worker cannot make up (breakerSeries.keep),
// and breakerd_breaker_series_dropped says how many were left out.
const DefaultMaxBreakerSeries = 500

// breakerSeries are the per-breaker descriptors: series for the breakers
// an alert must name, built once per refresh so a scrape only sends them.
type breakerSeries struct {
	state, openSince, cooldownCap, failedProbes, suspect, dropped *prometheus.Desc
	// cooldownCap returns the cooldown cap of a breaker's effective
	// policy; nil: breakerd_breaker_cooldown_cap_seconds is not exported.
	cap func(breaker string) time.Duration
	// declared reports whether the policy names a breaker itself; nil:
	// none is.
	declared func(breaker string) bool
	max      int // the cap on breakers with series; negative: none get them

	// since remembers, per breaker open or half-open at the last refresh,
	// when this daemon first saw the current open episode start. The
	// stored opened_at_ms moves on every failed probe (each reopening),
	// so the episode's start is the earliest opened_at_ms seen since it
	// began. Only the refresh goroutine touches it.
	since map[string]int64
}

func newBreakerSeries(capOf func(string) time.Duration, declared func(string) bool, most int) *breakerSeries {
	return &breakerSeries{
		state: prometheus.NewDesc(Namespace+"_breaker_state",
			"1 for each breaker that is not closed, by breaker and state (open, half_open, forced_open, forced_closed, paused); at most --max-breaker-series breakers, from the background listing. Every replica reports the same fleet: aggregate with max, not sum.",
			[]string{"breaker", "state"}, nil),
		openSince: prometheus.NewDesc(Namespace+"_breaker_open_since_timestamp_seconds",
			"For an open or half-open breaker: when its open episode began (Redis clock, Unix seconds), the earliest opening this daemon saw since the breaker last left open and half-open.",
			[]string{"breaker"}, nil),
		cooldownCap: prometheus.NewDesc(Namespace+"_breaker_cooldown_cap_seconds",
			"For an open or half-open breaker: its policy's cooldown_cap, the longest one cooldown grows to.",
			[]string{"breaker"}, nil),
		failedProbes: prometheus.NewDesc(Namespace+"_breaker_failed_probes",
			"For an open or half-open breaker: the cooldown's backoff level, the probes that failed since it tripped plus its re-trips while flapping; from 2 on a failed probe raises stuck_open.",
			[]string{"breaker"}, nil),
		suspect: prometheus.NewDesc(Namespace+"_breaker_suspect_worker",
			"1 for each breaker with a worker suspected of a local fault (denied until suspect_until_ms), by breaker and worker.",
			[]string{"breaker", "worker"}, nil),
		dropped: prometheus.NewDesc(Namespace+"_breaker_series_dropped",
			"Breakers that are not closed-and-healthy but got no breakerd_breaker_* series, past the cap (--max-breaker-series).",
			nil, nil),
		cap:      capOf,
		declared: declared,
		max:      most,
		since:    map[string]int64{},
	}
}

func (b *breakerSeries) describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{b.state, b.openSince, b.cooldownCap, b.failedProbes, b.suspect, b.dropped} {
		ch <- d
	}
}

// urgency orders the states that get series, most urgent first.
var urgency = map[pb.State]int{
	pb.State_STATE_OPEN: 0, pb.State_STATE_HALF_OPEN: 0, pb.State_STATE_PAUSED: 1,
	pb.State_STATE_FORCED_OPEN: 2, pb.State_STATE_FORCED_CLOSED: 3, pb.State_STATE_CLOSED: 4,
}

// unhealthy reports whether st gets series: not closed, or closed with a
// live suspect worker.
func unhealthy(st *pb.BreakerState) bool {
	if st.GetState() != pb.State_STATE_CLOSED {
		return true
	}
	return suspected(st)
}

// suspected reports whether st names a suspect worker still denied.
func suspected(st *pb.BreakerState) bool {
	return st.GetSuspectWorker() != "" && st.GetSuspectUntilMs() > st.GetAsOfMs()
}

// keep sorts sel by which breakers keep their series past the cap, first
// first. A worker can name any number of breakers and open them (two
// workers are a quorum), and pick names that sort first, so the order
// puts first what it cannot make up: the breakers the policy declares,
// then the operator's states before the ones workers cause (urgency),
// more distinct workers behind the failures (each a token of its own,
// where tokens are per worker), and an open episode that began earlier
// (a flood opened now does not push out an outage under way). The name
// only breaks ties, so the choice is the same on every replica.
func (b *breakerSeries) keep(sel []*pb.BreakerState) []*pb.BreakerState {
	declared := func(st *pb.BreakerState) int {
		if b.declared != nil && b.declared(st.GetBreaker()) {
			return 0
		}
		return 1
	}
	began := func(st *pb.BreakerState) int64 {
		at := st.GetOpenedAtMs()
		if prev, ok := b.since[st.GetBreaker()]; ok && (at == 0 || prev < at) {
			at = prev
		}
		if at == 0 {
			return math.MaxInt64
		}
		return at
	}
	slices.SortFunc(sel, func(x, y *pb.BreakerState) int {
		return cmp.Or(cmp.Compare(declared(x), declared(y)),
			cmp.Compare(urgency[x.GetState()], urgency[y.GetState()]),
			cmp.Compare(y.GetDistinctWorkers(), x.GetDistinctWorkers()),
			cmp.Compare(began(x), began(y)),
			cmp.Compare(x.GetBreaker(), y.GetBreaker()))
	})
	return sel
}

// build turns one listing into the per-breaker series, at most
// MaxBreakerSeries breakers' worth, and forgets the episodes of breakers
// no longer open.
func (b *breakerSeries) build(states []*pb.BreakerState) []prometheus.Metric {
	// A name listed twice (a listing racing a write) gets one set of
	// series: a duplicate would fail the scrape.
	var sel []*pb.BreakerState
	named := map[string]bool{}
	for _, st := range states {
		if unhealthy(st) && !named[st.GetBreaker()] {
			named[st.GetBreaker()] = true
			sel = append(sel, st)
		}
	}
	dropped := max(0, len(sel)-max(0, b.max))
	sel = b.keep(sel)[:len(sel)-dropped]
	out := []prometheus.Metric{prometheus.MustNewConstMetric(b.dropped, prometheus.GaugeValue, float64(dropped))}
	seen := make(map[string]int64, len(sel))
	for _, st := range sel {
		name := st.GetBreaker()
		if s := st.GetState(); s != pb.State_STATE_CLOSED {
			out = append(out, prometheus.MustNewConstMetric(b.state, prometheus.GaugeValue, 1, name, StateLabel(s)))
		}
		if suspected(st) {
			out = append(out, prometheus.MustNewConstMetric(b.suspect, prometheus.GaugeValue, 1, name, st.GetSuspectWorker()))
		}
		if s := st.GetState(); s != pb.State_STATE_OPEN && s != pb.State_STATE_HALF_OPEN || st.GetOpenedAtMs() == 0 {
			continue
		}
		since := st.GetOpenedAtMs()
		if prev, ok := b.since[name]; ok && prev < since {
			since = prev
		}
		seen[name] = since
		out = append(out, prometheus.MustNewConstMetric(b.openSince, prometheus.GaugeValue, float64(since)/1000, name),
			prometheus.MustNewConstMetric(b.failedProbes, prometheus.GaugeValue, float64(st.GetFailedProbes()), name))
		if b.cap != nil {
			out = append(out, prometheus.MustNewConstMetric(b.cooldownCap, prometheus.GaugeValue, b.cap(name).Seconds(), name))
		}
	}
	b.since = seen
	return out
}
