package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/breakerd/breakerd/internal/tracing"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Tracing's cost (docs/observability.md): the strict pair on daemons that
// export their spans over OTLP/HTTP to a receiver in their own process,
// sampling 1 % of the traces they start and every one, beside the default
// daemon (tracing off) in the same rounds. The bench's callers send no
// traceparent, so each daemon samples as a caller without tracing meets it.

// Serve kinds of the traced daemons.
const (
	ServeDaemonTraceSome = "daemon-trace-0.01" // parentbased_traceidratio 0.01
	ServeDaemonTraceAll  = "daemon-trace-1"    // parentbased_always_on
)

// traceKinds are the traced daemons every target runs.
var traceKinds = []string{ServeDaemonTraceSome, ServeDaemonTraceAll}

// traceSampling is each traced daemon's sampling ratio.
var traceSampling = map[string]float64{ServeDaemonTraceSome: 0.01, ServeDaemonTraceAll: 1}

// maxTraceCost is the least ops/s of the strict pair at 0.01 sampling
// over tracing off's, within a round.
const maxTraceCost = 0.95

var traceRatios = []ratio{
	{"pair-1k-trace-0.01", "pair-1k-raw", maxTraceCost},
	{"pair-1k-trace-1", "pair-1k-raw", 0},
}

func traceScenarios() []scenario {
	on := func(kind string) func(*target) pb.BreakerServiceClient {
		return func(t *target) pb.BreakerServiceClient { return t.traced[kind] }
	}
	return []scenario{
		{"pair-1k-trace-0.01", "pairs", ServeDaemonTraceSome, rawPairOn(on(ServeDaemonTraceSome), spread, "", 0), 0, nil},
		{"pair-1k-trace-1", "pairs", ServeDaemonTraceAll, rawPairOn(on(ServeDaemonTraceAll), spread, "", 0), 0, nil},
	}
}

// serveTraced runs the traced daemon kind names on redisAddr, exporting
// to a spanSink of its own, until stop.
func serveTraced(ctx context.Context, redisAddr, kind string) (addr string, stop func(), err error) {
	addr, _, stop, err = serveTracedSink(ctx, redisAddr, kind)
	return addr, stop, err
}

// serveTracedSink is serveTraced, returning the sink too.
func serveTracedSink(ctx context.Context, redisAddr, kind string) (addr string, sink *spanSink, stop func(), err error) {
	ratio, ok := traceSampling[kind]
	if !ok {
		return "", nil, nil, fmt.Errorf("bench: no traced daemon %q", kind)
	}
	if sink, err = newSpanSink(); err != nil {
		return "", nil, nil, err
	}
	tr := tracing.Env{On: true, Protocol: tracing.ProtocolHTTP, Endpoint: sink.url,
		Sampler: sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))}
	a, stopD, err := serveDaemon(ctx, redisAddr, "", false, tr)
	if err != nil {
		sink.close()
		return "", nil, nil, err
	}
	return a.grpc, sink, func() { stopD(); sink.close() }, nil
}

// spanSink is an OTLP/HTTP trace receiver that decodes each export, counts
// its spans and drops them: a collector that costs its host what decoding
// costs.
type spanSink struct {
	url   string // the exporter's endpoint URL (…/v1/traces)
	srv   *http.Server
	spans atomic.Int64
}

func newSpanSink() (*spanSink, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("span sink: %w", err)
	}
	s := &spanSink{url: "http://" + lis.Addr().String() + "/v1/traces"}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.export)}
	go func() { _ = s.srv.Serve(lis) }()
	return s, nil
}

func (s *spanSink) export(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var in coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &in)
	}
	if err == nil && r.URL.Path != "/v1/traces" {
		err = errors.New("not /v1/traces")
	}
	if err != nil {
		http.Error(w, "span sink: "+err.Error(), http.StatusBadRequest)
		return
	}
	for _, rs := range in.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			s.spans.Add(int64(len(ss.GetSpans())))
		}
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK) // an empty ExportTraceServiceResponse is no bytes
}

func (s *spanSink) close() { _ = s.srv.Close() }

// traceReport prints what tracing costs the daemon: each traced row's
// daemon CPU per RPC beside tracing off's (pair-1k-raw, the default
// daemon). Off installs nothing (no stats handler, no span around a
// script), so off is the build without tracing but for one nil check per
// script: the ceiling rows are the reference a build can be held to.
func traceReport(w io.Writer, rows map[string]row) {
	off, ok := rows["pair-1k-raw"]
	if !ok {
		return
	}
	var lines []string
	for _, name := range []string{"pair-1k-trace-0.01", "pair-1k-trace-1"} {
		r, ok := rows[name]
		if !ok {
			continue
		}
		line := fmt.Sprintf("  %s: %.0f pairs/s, %.2f Redis commands per pair", name, r.rate, r.cmdsPerOp)
		if r.cpuMeasured && off.cpuMeasured && off.cpuPerRPC > 0 {
			line += fmt.Sprintf("; daemon CPU %s µs per RPC, %.2fx tracing off's %s µs", us(r.cpuPerRPC, true),
				float64(r.cpuPerRPC)/float64(off.cpuPerRPC), us(off.cpuPerRPC, true))
		}
		lines = append(lines, line)
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "tracing (OTLP/HTTP to a receiver in the daemon's process; off: pair-1k-raw, %.0f pairs/s, %.2f Redis commands per pair):\n",
		off.rate, off.cmdsPerOp)
	fmt.Fprintln(w, strings.Join(lines, "\n"))
}
