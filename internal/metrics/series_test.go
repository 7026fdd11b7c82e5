package metrics_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/metrics"
	"github.com/breakerd/breakerd/internal/protocol"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// fleet is a settable listing for the circuit view.
type fleet struct {
	mu     sync.Mutex
	states []*pb.BreakerState
}

func (f *fleet) set(states ...*pb.BreakerState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.states = states
}

func (f *fleet) list(context.Context) ([]*pb.BreakerState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.states, nil
}

// newFleetMetrics returns metrics whose circuit view lists f, with a
// cooldown cap of 15m for every breaker.
func newFleetMetrics(t *testing.T, f *fleet) (*metrics.Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{Circuits: f.list,
		CooldownCap: func(string) time.Duration { return 15 * time.Minute }})
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// series gathers the named families as sorted "name{labels} value" lines.
func series(t *testing.T, reg prometheus.Gatherer, names ...string) []string {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range families {
		if !contains(names, f.GetName()) {
			continue
		}
		for _, mt := range f.GetMetric() {
			var ls []string
			for _, l := range mt.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			out = append(out, fmt.Sprintf("%s{%s} %g", f.GetName(), strings.Join(ls, ","), mt.GetGauge().GetValue()))
		}
	}
	sort.Strings(out)
	return out
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

var breakerFamilies = []string{"breakerd_breaker_state", "breakerd_breaker_open_since_timestamp_seconds",
	"breakerd_breaker_cooldown_cap_seconds", "breakerd_breaker_failed_probes", "breakerd_breaker_suspect_worker", "breakerd_breaker_series_dropped"}

// Only breakers that are not closed-and-healthy get series: a healthy
// closed breaker, and one whose suspect's denial has ended, get none.
func TestBreakerSeriesNameTheUnhealthyOnly(t *testing.T) {
	f := &fleet{}
	m, reg := newFleetMetrics(t, f)
	f.set(
		&pb.BreakerState{Breaker: "a", State: pb.State_STATE_OPEN, OpenedAtMs: 1000, AsOfMs: 2000, FailedProbes: 2},
		&pb.BreakerState{Breaker: "b", State: pb.State_STATE_HALF_OPEN, OpenedAtMs: 1500, AsOfMs: 2000},
		&pb.BreakerState{Breaker: "c", State: pb.State_STATE_FORCED_CLOSED, AsOfMs: 2000},
		&pb.BreakerState{Breaker: "d", State: pb.State_STATE_CLOSED, SuspectWorker: "w1", SuspectUntilMs: 9000, AsOfMs: 2000},
		&pb.BreakerState{Breaker: "e", State: pb.State_STATE_CLOSED, AsOfMs: 2000},
		&pb.BreakerState{Breaker: "f", State: pb.State_STATE_CLOSED, SuspectWorker: "w2", SuspectUntilMs: 1000, AsOfMs: 2000},
	)
	if err := m.RefreshCircuits(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"breakerd_breaker_cooldown_cap_seconds{breaker=a} 900",
		"breakerd_breaker_cooldown_cap_seconds{breaker=b} 900",
		"breakerd_breaker_failed_probes{breaker=a} 2",
		"breakerd_breaker_failed_probes{breaker=b} 0",
		"breakerd_breaker_open_since_timestamp_seconds{breaker=a} 1",
		"breakerd_breaker_open_since_timestamp_seconds{breaker=b} 1.5",
		"breakerd_breaker_series_dropped{} 0",
		"breakerd_breaker_state{breaker=a,state=open} 1",
		"breakerd_breaker_state{breaker=b,state=half_open} 1",
		"breakerd_breaker_state{breaker=c,state=forced_closed} 1",
		"breakerd_breaker_suspect_worker{breaker=d,worker=w1} 1",
	}
	if diff := cmp.Diff(want, series(t, reg, breakerFamilies...)); diff != "" {
		t.Errorf("per-breaker series (-want +got):\n%s", diff)
	}
}

// A failed probe reopens the breaker (opened_at_ms moves), but its open
// episode began at the first opening: open_since keeps it until the
// breaker leaves open and half-open.
func TestOpenSinceSpansTheEpisode(t *testing.T) {
	f := &fleet{}
	m, reg := newFleetMetrics(t, f)
	step := func(st *pb.BreakerState, want ...string) {
		t.Helper()
		f.set(st)
		if err := m.RefreshCircuits(context.Background()); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, series(t, reg, "breakerd_breaker_open_since_timestamp_seconds")); diff != "" {
			t.Errorf("open_since (-want +got):\n%s", diff)
		}
	}
	// --- trip
	step(&pb.BreakerState{Breaker: "a", State: pb.State_STATE_OPEN, OpenedAtMs: 1000},
		"breakerd_breaker_open_since_timestamp_seconds{breaker=a} 1")
	// --- the probe fails: reopened at 31s, the episode still began at 1s
	step(&pb.BreakerState{Breaker: "a", State: pb.State_STATE_OPEN, OpenedAtMs: 31000},
		"breakerd_breaker_open_since_timestamp_seconds{breaker=a} 1")
	// --- closed: forgotten
	step(&pb.BreakerState{Breaker: "a", State: pb.State_STATE_CLOSED})
	// --- a new episode
	step(&pb.BreakerState{Breaker: "a", State: pb.State_STATE_OPEN, OpenedAtMs: 90000},
		"breakerd_breaker_open_since_timestamp_seconds{breaker=a} 90")
}

// Past the cap (DefaultMaxBreakerSeries breakers), the most urgent states keep their
// series and the rest are counted as dropped.
func TestBreakerSeriesAreCapped(t *testing.T) {
	f := &fleet{}
	m, reg := newFleetMetrics(t, f)
	var states []*pb.BreakerState
	states = append(states, &pb.BreakerState{Breaker: "forced", State: pb.State_STATE_FORCED_CLOSED})
	for i := range metrics.DefaultMaxBreakerSeries + 3 {
		states = append(states, &pb.BreakerState{Breaker: fmt.Sprintf("open-%04d", i), State: pb.State_STATE_OPEN, OpenedAtMs: 1000})
	}
	f.set(states...)
	if err := m.RefreshCircuits(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "breakerd_breaker_state"); err != nil || n != metrics.DefaultMaxBreakerSeries {
		t.Errorf("breakerd_breaker_state series = %d (%v), want the cap %d", n, err, metrics.DefaultMaxBreakerSeries)
	}
	got := series(t, reg, "breakerd_breaker_series_dropped", "breakerd_breaker_state")
	if !contains(got, "breakerd_breaker_series_dropped{} 4") {
		t.Errorf("dropped: want 4 (3 open past the cap and the forced-closed one), got %v", got[:1])
	}
	if contains(got, "breakerd_breaker_state{breaker=forced,state=forced_closed} 1") {
		t.Error("a forced-closed breaker kept its series while open ones were dropped")
	}
}

// RPCs are timed by method, code and protocol: a call transcoded from
// HTTP/JSON (protocol.HTTP in its context) is told from a gRPC one.
func TestRPCLatencyByMethodCodeAndProtocol(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ic := m.UnaryInterceptor()
	allow := &grpc.UnaryServerInfo{FullMethod: "/breakerd.v1.BreakerService/Allow"}
	ok := func(context.Context, any) (any, error) {
		return &pb.AllowResponse{Decision: pb.Decision_DECISION_ALLOWED}, nil
	}
	bad := func(context.Context, any) (any, error) {
		return nil, status.Error(codes.InvalidArgument, "breaker: empty")
	}
	httpCtx := protocol.With(context.Background(), protocol.HTTP)
	for _, call := range []struct {
		ctx context.Context
		h   grpc.UnaryHandler
	}{{context.Background(), ok}, {context.Background(), ok}, {httpCtx, ok}, {httpCtx, bad}} {
		_, _ = ic(call.ctx, &pb.AllowRequest{}, allow, call.h)
	}
	got := histogramCounts(t, reg, "breakerd_rpc_duration_seconds")
	want := map[string]uint64{
		"code=OK,method=Allow,protocol=grpc":              2,
		"code=OK,method=Allow,protocol=http":              1,
		"code=InvalidArgument,method=Allow,protocol=http": 1,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("breakerd_rpc_duration_seconds sample counts (-want +got):\n%s", diff)
	}
}

// The interceptor's hot path allocates nothing once a series is resolved:
// timing and counting add no garbage per RPC.
func TestRPCTimingAllocatesNothing(t *testing.T) {
	m, err := metrics.New(prometheus.NewRegistry(), metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ic := m.UnaryInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: "/breakerd.v1.BreakerService/Allow"}
	resp := &pb.AllowResponse{Decision: pb.Decision_DECISION_ALLOWED}
	h := func(context.Context, any) (any, error) { return resp, nil }
	ctx, req := protocol.With(context.Background(), protocol.HTTP), &pb.AllowRequest{}
	_, _ = ic(ctx, req, info, h)
	if n := testing.AllocsPerRun(100, func() { _, _ = ic(ctx, req, info, h) }); n != 0 {
		t.Errorf("allocations per intercepted Allow = %v, want 0", n)
	}
}

// histogramCounts returns each series' sample count of a histogram
// family, keyed by its sorted labels.
func histogramCounts(t *testing.T, g prometheus.Gatherer, name string) map[string]uint64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, mt := range f.GetMetric() {
			var ls []string
			for _, l := range mt.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(ls)
			out[strings.Join(ls, ",")] = mt.GetHistogram().GetSampleCount()
		}
	}
	return out
}

// TestRPCLatencyExemplarsNameTheTrace: an RPC served inside a sampled
// span (the daemon traces) leaves its trace id as the latency sample's
// exemplar, which an OpenMetrics scrape of Handler shows; an RPC outside
// one leaves none.
func TestRPCLatencyExemplarsNameTheTrace(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ic := m.UnaryInterceptor()
	h := func(context.Context, any) (any, error) {
		return &pb.AllowResponse{Decision: pb.Decision_DECISION_ALLOWED}, nil
	}
	tid := trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled})
	_, _ = ic(context.Background(), &pb.RecordRequest{}, &grpc.UnaryServerInfo{FullMethod: "/breakerd.v1.BreakerService/Record"}, h)
	_, _ = ic(trace.ContextWithSpanContext(context.Background(), sc), &pb.AllowRequest{},
		&grpc.UnaryServerInfo{FullMethod: "/breakerd.v1.BreakerService/Allow"}, h)

	srv := httptest.NewServer(metrics.Handler(reg))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/openmetrics-text") {
		t.Fatalf("Content-Type %q, want OpenMetrics", ct)
	}
	var allow, record []string
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "breakerd_rpc_duration_seconds_bucket{") || !strings.Contains(line, " # {") {
			continue
		}
		if strings.Contains(line, `method="Allow"`) {
			allow = append(allow, line)
		} else if strings.Contains(line, `method="Record"`) {
			record = append(record, line)
		}
	}
	if len(allow) != 1 || !strings.Contains(allow[0], `# {trace_id="`+tid.String()+`"}`) {
		t.Errorf("Allow's exemplars %q, want one naming trace %s", allow, tid)
	}
	if len(record) != 0 {
		t.Errorf("Record's exemplars %q, want none (no span)", record)
	}
}
