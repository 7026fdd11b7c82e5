package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"

	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/buildinfo"
	"github.com/breakerd/breakerd/internal/metrics"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

func TestNamesPassPromlintAndRegisterOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(reg, metrics.Options{Circuits: func(context.Context) ([]*pb.BreakerState, error) { return nil, nil }}); err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	// Another part of the daemon registers on the same registry; a second
	// breakerd set on it is refused, not a panic.
	if _, err := metrics.New(reg, metrics.Options{}); err == nil {
		t.Error("registering breakerd's metrics twice on one registry succeeded")
	}
}

func TestScrapesReadTheViewNeverRedis(t *testing.T) {
	var lists atomic.Int64
	var fail atomic.Bool
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{
		Circuits: func(context.Context) ([]*pb.BreakerState, error) {
			lists.Add(1)
			if fail.Load() {
				return nil, errors.New("redis down")
			}
			return []*pb.BreakerState{
				{State: pb.State_STATE_OPEN}, {State: pb.State_STATE_OPEN}, {State: pb.State_STATE_HALF_OPEN},
				{State: pb.State_STATE_FORCED_OPEN}, {State: pb.State_STATE_FORCED_CLOSED}, {State: pb.State_STATE_CLOSED},
			}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "breakerd_open_circuits"); err != nil || n != 0 || lists.Load() != 0 {
		t.Errorf("before the first refresh: breakerd_open_circuits has %d series (%v) after %d Lists; want absent, and no List from a scrape", n, err, lists.Load())
	}
	if err := m.RefreshCircuits(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP breakerd_open_circuits Breakers fleet-wide that deny calls: open, half_open, forced_open and paused. Every replica reports the same fleet: aggregate with max, not sum.
# TYPE breakerd_open_circuits gauge
breakerd_open_circuits 4
`
	for range 100 {
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "breakerd_open_circuits"); err != nil {
			t.Fatal(err)
		}
	}
	if n := lists.Load(); n != 1 {
		t.Errorf("one refresh and 100 scrapes listed %d times, want 1: scrapes read the view", n)
	}
	if n, err := testutil.GatherAndCount(reg, "breakerd_circuits"); err != nil || n != 5 {
		t.Errorf("breakerd_circuits has %d series (%v), want 5 (open, half_open, forced_open, forced_closed, paused)", n, err)
	}

	fail.Store(true)
	if err := m.RefreshCircuits(context.Background()); err == nil {
		t.Error("RefreshCircuits with Redis down succeeded")
	}
	if n, err := testutil.GatherAndCount(reg, "breakerd_open_circuits"); err != nil || n != 0 {
		t.Errorf("after a failed refresh: breakerd_open_circuits has %d series (%v), want it absent, not stale", n, err)
	}
	if got := testutil.ToFloat64(counterOf(t, reg, "breakerd_circuits_list_errors_total")); got != 1 {
		t.Errorf("breakerd_circuits_list_errors_total = %v, want 1", got)
	}

	// RunCircuits refreshes at once, then per interval, until ctx ends.
	fail.Store(false)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.RunCircuits(ctx); close(done) }()
	for lists.Load() < 3 {
		runtime.Gosched() // waiting for the goroutine's first refresh, not for time
	}
	cancel()
	<-done
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "breakerd_open_circuits"); err != nil {
		t.Errorf("after RunCircuits: %v", err)
	}
}

// counterOf returns the single-series collector name in reg as a
// Collector for testutil.ToFloat64.
func counterOf(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: "copy"})
			c.Add(mf.GetMetric()[0].GetCounter().GetValue())
			return c
		}
	}
	t.Fatalf("no single series %s", name)
	return nil
}

// BenchmarkScrape shows a scrape's cost independent of the fleet's size:
// the circuit gauges read the background view, so 100 breakers and
// 100,000 cost the same per scrape (compare ns/op across the sub-benchmarks).
func BenchmarkScrape(b *testing.B) {
	for _, n := range []int{100, 10_000, 100_000} {
		b.Run(fmt.Sprintf("breakers=%d", n), func(b *testing.B) {
			states := make([]*pb.BreakerState, n)
			for i := range states {
				states[i] = &pb.BreakerState{State: pb.State(1 + i%6)}
			}
			reg := prometheus.NewRegistry()
			m, err := metrics.New(reg, metrics.Options{Circuits: func(context.Context) ([]*pb.BreakerState, error) { return states, nil }})
			if err != nil {
				b.Fatal(err)
			}
			if err := m.RefreshCircuits(context.Background()); err != nil {
				b.Fatal(err)
			}
			h := metrics.Handler(reg)
			req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("scrape: HTTP %d", w.Code)
				}
			}
		})
	}
}

func TestScriptLatencyIsNamedEvenOnTheEvalFallback(t *testing.T) {
	b := testredis.Mini(t)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b.Client.AddHook(m.RedisHook())
	st := store.New(b.Client, store.Options{})
	ctx := context.Background()
	if _, err := st.Allow(ctx, "x", "w1"); err != nil { // NOSCRIPT, then EVAL
		t.Fatal(err)
	}
	if _, err := st.Allow(ctx, "x", "w1"); err != nil { // EVAL loaded it: EVALSHA
		t.Fatal(err)
	}
	if _, err := st.BatchGet(ctx, []string{"x", "y"}); err != nil {
		t.Fatal(err)
	}
	// allow: EVALSHA miss, EVAL, EVALSHA. read: one pipeline of EVALSHA
	// (NOSCRIPT), then one of EVAL.
	want := map[string]uint64{"allow": 3, "read": 2}
	for script, n := range want {
		if got := histCount(t, reg, script); got != n {
			t.Errorf("redis_script_duration_seconds_count{script=%q} = %d, want %d", script, got, n)
		}
	}
}

func histCount(t *testing.T, g prometheus.Gatherer, script string) uint64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "breakerd_redis_script_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "script" && l.GetValue() == script {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}

func TestBuildInfoNamesTheBuild(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(reg, metrics.Options{}); err != nil {
		t.Fatal(err)
	}
	bi := buildinfo.Get()
	want := fmt.Sprintf(`# HELP breakerd_build_info Always 1; the labels say which build of breakerd this daemon runs (version, commit, Go version).
# TYPE breakerd_build_info gauge
breakerd_build_info{commit=%q,goversion=%q,version=%q} 1
`, bi.Commit, bi.GoVersion, bi.Version)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "breakerd_build_info"); err != nil {
		t.Error(err)
	}
}

// TestRecordBatchCountsEachOutcome: a fast-mode client's RecordBatch
// counts each of its outcomes as a Record would.
func TestRecordBatchCountsEachOutcome(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{Circuits: func(context.Context) ([]*pb.BreakerState, error) { return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	req := &pb.RecordBatchRequest{Records: []*pb.RecordRequest{
		{Outcome: pb.Outcome_OUTCOME_SUCCESS}, {Outcome: pb.Outcome_OUTCOME_TIMEOUT}, {Outcome: pb.Outcome_OUTCOME_TIMEOUT}}}
	resp := &pb.RecordBatchResponse{Results: []*pb.RecordResponse{{Counted: false}, {Counted: true}, {Counted: true}}}
	info := &grpc.UnaryServerInfo{FullMethod: "/breakerd.v1.BreakerService/RecordBatch"}
	if _, err := m.UnaryInterceptor()(context.Background(), req, info, func(context.Context, any) (any, error) { return resp, nil }); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "breakerd_records_total" {
			continue
		}
		for _, mt := range f.GetMetric() {
			var outcome, counted string
			for _, l := range mt.GetLabel() {
				switch l.GetName() {
				case "outcome":
					outcome = l.GetValue()
				case "counted":
					counted = l.GetValue()
				}
			}
			if v := mt.GetCounter().GetValue(); v != 0 {
				got[outcome+"/"+counted] = v
			}
		}
	}
	if want := map[string]float64{"success/false": 1, "timeout/true": 2}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("breakerd_records_total after one batch: %v, want %v", got, want)
	}
}

// An open_fraction_cap event (a trip a group's cap stopped) is counted by
// kind, and is no transition (the breaker stays closed).
func TestOpenFractionCapIsCountedAsAnEvent(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m.ObserveEvent(&pb.Event{Kind: pb.EventKind_EVENT_KIND_OPEN_FRACTION_CAP, From: pb.State_STATE_CLOSED, To: pb.State_STATE_CLOSED})
	// Every kind is exported from the start; only this one moved.
	var want strings.Builder
	want.WriteString("# HELP breakerd_events_total " + eventsHelp(t, reg) + "\n# TYPE breakerd_events_total counter\n")
	var kinds []string
	for v := range pb.EventKind_name {
		if v != 0 {
			kinds = append(kinds, breaker.EnumName(pb.EventKind(v)))
		}
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		n := 0
		if k == "open_fraction_cap" {
			n = 1
		}
		fmt.Fprintf(&want, "breakerd_events_total{kind=%q} %d\n", k, n)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want.String()), "breakerd_events_total"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg, "breakerd_transitions_total"); err != nil || n != 0 {
		t.Errorf("transitions counted: %d series (%v), want none", n, err)
	}
}

// eventsHelp is breakerd_events_total's help text.
func eventsHelp(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "breakerd_events_total" {
			return mf.GetHelp()
		}
	}
	t.Fatal("no breakerd_events_total")
	return ""
}

// TestShadowIsCountedApart: shadow transitions and shadow decisions have
// their own counters; transitions_total and decisions_total count only
// what is enforced, so an alert on real opens never fires on a shadow
// trip.
func TestShadowIsCountedApart(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{Circuits: func(context.Context) ([]*pb.BreakerState, error) { return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	m.ObserveEvent(&pb.Event{Kind: pb.EventKind_EVENT_KIND_TRANSITION, From: pb.State_STATE_CLOSED, To: pb.State_STATE_OPEN, Shadow: true, Cause: "trip"})
	m.ObserveEvent(&pb.Event{Kind: pb.EventKind_EVENT_KIND_TRANSITION, From: pb.State_STATE_CLOSED, To: pb.State_STATE_OPEN, Cause: "rate_limit"})
	m.ObserveEvent(&pb.Event{Kind: pb.EventKind_EVENT_KIND_TRANSITION, From: pb.State_STATE_OPEN, To: pb.State_STATE_HALF_OPEN, Shadow: true, Cause: "cooldown_elapsed"})
	// A cause this build does not know (a newer daemon's) keeps the label
	// within its fixed set.
	m.ObserveEvent(&pb.Event{Kind: pb.EventKind_EVENT_KIND_TRANSITION, From: pb.State_STATE_CLOSED, To: pb.State_STATE_OPEN, Cause: "<a newer cause>"})
	info := &grpc.UnaryServerInfo{FullMethod: "/breakerd.v1.BreakerService/Allow"}
	for _, resp := range []*pb.AllowResponse{
		{Decision: pb.Decision_DECISION_ALLOWED, ShadowDecision: pb.Decision_DECISION_DENIED_OPEN},
		{Decision: pb.Decision_DECISION_ALLOWED, ShadowDecision: pb.Decision_DECISION_PROBE},
		{Decision: pb.Decision_DECISION_ALLOWED},
	} {
		if _, err := m.UnaryInterceptor()(context.Background(), &pb.AllowRequest{}, info, func(context.Context, any) (any, error) { return resp, nil }); err != nil {
			t.Fatal(err)
		}
	}
	want := `
# HELP breakerd_shadow_decisions_total Allow answers this daemon gave on breakers in shadow mode (all allowed), by the decision enforced mode would have given.
# TYPE breakerd_shadow_decisions_total counter
breakerd_shadow_decisions_total{decision="denied_open"} 1
breakerd_shadow_decisions_total{decision="probe"} 1
# HELP breakerd_shadow_transitions_total Fleet-wide state changes of breakers in shadow mode (not enforced: what would have happened), heard on the live feed, by from and to state and by cause. Aggregate replicas with max, not sum.
# TYPE breakerd_shadow_transitions_total counter
breakerd_shadow_transitions_total{cause="cooldown_elapsed",from="open",to="half_open"} 1
breakerd_shadow_transitions_total{cause="trip",from="closed",to="open"} 1
# HELP breakerd_transitions_total Fleet-wide state changes (automatic and forced) heard on the live feed, by from and to state and by cause (trip, probe_failed, probe_succeeded, cooldown_elapsed, forced, ...). Aggregate replicas with max, not sum.
# TYPE breakerd_transitions_total counter
breakerd_transitions_total{cause="other",from="closed",to="open"} 1
breakerd_transitions_total{cause="rate_limit",from="closed",to="open"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "breakerd_shadow_decisions_total",
		"breakerd_shadow_transitions_total", "breakerd_transitions_total"); err != nil {
		t.Error(err)
	}
	if got := testutil.ToFloat64(mustDecision(t, reg, "allowed")); got != 3 {
		t.Errorf("decisions_total{allowed} = %g, want 3 (every shadow answer is allowed)", got)
	}
}

func mustDecision(t *testing.T, reg *prometheus.Registry, decision string) prometheus.Collector {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "breakerd_decisions_total" {
			continue
		}
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "decision" && l.GetValue() == decision {
					return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "x", Help: "x"}, func() float64 { return mt.GetCounter().GetValue() })
				}
			}
		}
	}
	t.Fatalf("no breakerd_decisions_total{decision=%q}", decision)
	return nil
}
