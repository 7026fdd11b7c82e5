package mcpgw

import (
	"io"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"

	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
)

// TestToolCallsCarryTheirDecision sets an application TracerProvider
// (otel's global; not parallel) and guards tools/calls through gateways
// dialled as the command dials: each call is an execute_tool span with
// its decision and outcome, and the daemon's Allow span is in its trace
// (traceparent crossed the wire); a denied call's span says so.
func TestToolCallsCarryTheirDecision(t *testing.T) {
	app := tracetest.NewSpanRecorder()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(app)))
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })
	daemon := tracetest.NewSpanRecorder()
	dtp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(daemon))
	b := testredis.Mini(t)
	d := daemontest.StartWith(t, b, daemontest.Options{Store: noJitter(),
		Server: []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(dtp),
			otelgrpc.WithPropagators(propagation.TraceContext{})))}})
	up := newFakeUpstream()
	cfg := Config{Upstreams: []Upstream{{Name: "fake", Transport: up.transport(t)}}}
	var agents []*agent
	for _, worker := range []string{"gw-1", "gw-2"} {
		conn, err := Flags{Breakerd: d.Addr}.dial(newLogger(io.Discard))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		agents = append(agents, connectAgent(t, startGateway(t, b, conn, worker, cfg)))
	}
	breaker := b.Prefix + "mcp:fake:lookup"
	span := "execute_tool lookup" // the tool's name as the agent calls it

	up.failing.Store(true)
	for i := range 5 { // the default policy: 5 failures from 2 workers
		agents[i%2].call(t, "lookup")
	}
	// A call's span ends after its result reaches the agent: wait for it.
	var first []sdktrace.ReadOnlySpan
	daemontest.Eventually(t, "the 5 calls' spans to end", func() bool { first = ended(app, span); return len(first) == 5 })
	wantAttr(t, first[0], "breakerd.decision", "allowed")
	wantAttr(t, first[0], "breakerd.breaker", breaker)
	wantAttr(t, first[0], "breakerd.outcome", "server_error")
	inTrace := false
	for _, s := range ended(daemon, "breakerd.v1.BreakerService/Allow") {
		inTrace = inTrace || s.SpanContext().TraceID() == first[0].SpanContext().TraceID()
	}
	if !inTrace {
		t.Errorf("no daemon Allow span in the tool call's trace %s", first[0].SpanContext().TraceID())
	}
	if res := agents[0].call(t, "lookup"); !res.IsError {
		t.Fatal("a call on the tripped breaker was not denied")
	}
	if up.lookups.Load() != 5 {
		t.Errorf("upstream lookups %d, want 5 (the denied call does not reach it)", up.lookups.Load())
	}
	// The six spans are told apart by their decisions, not their order.
	var all []sdktrace.ReadOnlySpan
	daemontest.Eventually(t, "the denied call's span to end", func() bool { all = ended(app, span); return len(all) == 6 })
	if got := spanDecisions(all); got["allowed"] != 5 || got["denied_open"] != 1 {
		t.Errorf("decisions of the 6 calls' spans = %v, want 5 allowed and 1 denied_open", got)
	}
}

// spanDecisions counts spans by their breakerd.decision.
func spanDecisions(spans []sdktrace.ReadOnlySpan) map[string]int {
	n := map[string]int{}
	for _, s := range spans {
		for _, kv := range s.Attributes() {
			if kv.Key == "breakerd.decision" {
				n[kv.Value.AsString()]++
			}
		}
	}
	return n
}

func ended(r *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func wantAttr(t *testing.T, s sdktrace.ReadOnlySpan, key, want string) {
	t.Helper()
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			if got := kv.Value.String(); got != want {
				t.Errorf("%s %s = %q, want %q", s.Name(), key, got, want)
			}
			return
		}
	}
	t.Errorf("%s has no %s, want %q", s.Name(), key, want)
}
