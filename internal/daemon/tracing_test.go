package daemon

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/breakerd/breakerd/internal/tests/otlptest"
	"github.com/breakerd/breakerd/internal/tracing"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestDaemonSpansJoinTheCallersTrace runs the production assembly with
// the OTLP environment set, over each protocol, and calls Allow over gRPC
// (traceparent from otelgrpc's client handler) and over HTTP/JSON (a
// traceparent header): the spans the daemon exports to an in-process
// receiver carry the caller's trace id, its Allow span is the caller's
// span's child, and the Redis script's span is the Allow span's child.
func TestDaemonSpansJoinTheCallersTrace(t *testing.T) {
	for _, protocol := range []string{tracing.ProtocolGRPC, tracing.ProtocolHTTP} {
		t.Run(strings.ReplaceAll(protocol, "/", "_"), func(t *testing.T) {
			rcv := otlptest.NewHTTP(t)
			if protocol == tracing.ProtocolGRPC {
				rcv = otlptest.NewGRPC(t)
			}
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.Endpoint)
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
			t.Setenv("OTEL_SERVICE_NAME", "")
			cfg, err := ParseConfig([]string{"--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"}, os.Getenv, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if !cfg.Tracing.On || cfg.Tracing.Protocol != protocol {
				t.Fatalf("ParseConfig: Tracing = %+v, want on over %s", cfg.Tracing, protocol)
			}
			caller, grpcTraceID, httpTraceID := callTraced(t, cfg)
			spans := rcv.Spans()
			for _, sp := range spans {
				t.Logf("%s %q trace %s span %s parent %s", sp.Service, sp.GetName(), sp.TraceID(), sp.SpanID(), sp.ParentID())
			}
			// gRPC: the server span's parent is otelgrpc's client span.
			allow := findSpan(t, spans, grpcTraceID, "breakerd.v1.BreakerService/Allow")
			if allow.Service != "breakerd" || !caller[allow.ParentID()] {
				t.Errorf("gRPC Allow span: service %q, parent %s; want breakerd, a child of the caller's client span", allow.Service, allow.ParentID())
			}
			script := findSpan(t, spans, grpcTraceID, "EVALSHA allow")
			if script.ParentID() != allow.SpanID() || script.Attr("db.system.name") != "redis" {
				t.Errorf("script span: parent %s, db.system.name %q; want %s (the Allow span), redis", script.ParentID(), script.Attr("db.system.name"), allow.SpanID())
			}
			// HTTP/JSON: otelhttp's span is the tool span's child, and the
			// transcoded call's span is the HTTP span's.
			front := findSpan(t, spans, httpTraceID, "POST /breakerd.v1.BreakerService/Allow")
			if !caller[front.ParentID()] {
				t.Errorf("HTTP Allow span's parent = %s, want the caller's span", front.ParentID())
			}
			inner := findSpan(t, spans, httpTraceID, "breakerd.v1.BreakerService/Allow")
			if inner.ParentID() != front.SpanID() {
				t.Errorf("transcoded Allow span's parent = %s, want the HTTP span %s", inner.ParentID(), front.SpanID())
			}
			if s := findSpan(t, spans, httpTraceID, "EVALSHA allow"); s.ParentID() != inner.SpanID() {
				t.Errorf("script span's parent = %s, want the transcoded Allow span %s", s.ParentID(), inner.SpanID())
			}
		})
	}
}

// callTraced serves cfg, makes one traced Allow over gRPC and one over
// HTTP/JSON, then stops the daemon (which flushes its spans). It returns
// the caller's span ids and the two calls' trace ids.
func callTraced(t *testing.T, cfg Config) (caller map[string]bool, grpcTrace, httpTrace string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan Listeners, 1), make(chan error, 1)
	go func() {
		done <- RunListeners(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), func(l Listeners) { ready <- l })
	}()
	var l Listeners
	select {
	case l = <-ready:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prop := propagation.TraceContext{}
	conn, err := grpc.NewClient(l.GRPC.String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(prop))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tctx, tool := tp.Tracer("test").Start(context.Background(), "execute_tool search")
	if _, err := pb.NewBreakerServiceClient(conn).Allow(tctx, &pb.AllowRequest{Breaker: "search", WorkerId: "w1"}); err != nil {
		t.Fatal(err)
	}
	tool.End()
	grpcTrace = tool.SpanContext().TraceID().String()
	hctx, hspan := tp.Tracer("test").Start(context.Background(), "execute_tool fetch")
	req, _ := http.NewRequestWithContext(hctx, http.MethodPost, "http://"+l.HTTP.String()+"/breakerd.v1.BreakerService/Allow",
		strings.NewReader(`{"breaker":"fetch","worker_id":"w1"}`))
	req.Header.Set("Content-Type", "application/json")
	prop.Inject(hctx, propagation.HeaderCarrier(req.Header))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(res.Body); res.StatusCode != http.StatusOK {
		t.Fatalf("HTTP Allow = %d %s", res.StatusCode, b)
	}
	res.Body.Close()
	hspan.End()
	httpTrace = hspan.SpanContext().TraceID().String()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not return a minute after its context ended")
	}
	caller = map[string]bool{}
	for _, s := range rec.Ended() {
		caller[s.SpanContext().SpanID().String()] = true
	}
	return caller, grpcTrace, httpTrace
}

// findSpan returns the span named name in trace traceID, failing t when
// there is none.
func findSpan(t *testing.T, spans []otlptest.Span, traceID, name string) otlptest.Span {
	t.Helper()
	for _, sp := range spans {
		if sp.TraceID() == traceID && sp.GetName() == name {
			return sp
		}
	}
	t.Fatalf("no span %q in trace %s among the %d received", name, traceID, len(spans))
	return otlptest.Span{}
}
