package client

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"

	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestGuardedCallsJoinTheTrace sets an application TracerProvider (otel's
// global; not parallel, and put back to a no-op one after) and makes
// guarded calls to a daemon that traces with a provider of its own: a
// call without a span of the caller's gets its own "execute_tool" span
// carrying the decision and the outcome, and the daemon's Allow span is in
// its trace (traceparent crossed the wire); a denied call inside the
// caller's span marks that span with the denial; a tool a run removes is
// an event on the caller's span, and a later call of it a span of its own
// with the denial.
func TestGuardedCallsJoinTheTrace(t *testing.T) {
	app := tracetest.NewSpanRecorder()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(app)))
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })
	daemon := tracetest.NewSpanRecorder()
	dtp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(daemon))
	be := testredis.Mini(t)
	d := daemontest.StartWith(t, be, daemontest.Options{Store: store.Options{Tracer: dtp.Tracer("breakerd")},
		Server: []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(dtp),
			otelgrpc.WithPropagators(propagation.TraceContext{})))}})
	c1, c2 := dial(t, d.Addr, "w1"), dial(t, d.Addr, "w2")
	name := be.Breaker("search")
	ctx := context.Background()

	// A call of its own: the client's span, the daemon's in its trace.
	if err := c1.Call(ctx, name, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	own := lastEnded(t, app, "execute_tool "+name)
	wantAttrs(t, own, map[string]any{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, attrBreaker: name,
		attrDecision: "allowed", attrDegraded: false, attrOutcome: "success"})
	// The daemon ends its Allow span once its answer is sent, which on a
	// busy host can be after the client has read it.
	var allow sdktrace.ReadOnlySpan
	eventually(t, "the daemon's Allow span, in the call's trace", func() bool {
		allow = endedSpan(daemon, "breakerd.v1.BreakerService/Allow", own.SpanContext().TraceID())
		return allow != nil
	})
	if script := lastEnded(t, daemon, "EVALSHA allow"); script.Parent().SpanID() != allow.SpanContext().SpanID() {
		t.Errorf("script span's parent = %s, want the Allow span", script.Parent().SpanID())
	}

	// A failure that counts says so.
	_ = c1.Call(ctx, name, func(context.Context) error {
		return &OutcomeError{Outcome: pb.Outcome_OUTCOME_SERVER_ERROR, Message: "HTTP 503"}
	})
	wantAttrs(t, lastEnded(t, app, "execute_tool "+name), map[string]any{attrOutcome: "server_error", attrCounted: true})

	// A denial inside the caller's span marks that span, and no other
	// span of the client's is started.
	trip(t, c1, c2, name)
	runCtx, runSpan := otel.Tracer("agent").Start(ctx, "invoke_agent")
	before := toolSpans(app)
	if err := c1.Call(runCtx, name, func(context.Context) error { t.Error("a denied call ran"); return nil }); err == nil {
		t.Fatal("Call on an open breaker = nil, want a denial")
	}
	// The denied call's Allow is the only one in the caller's trace so far
	// (found by trace, not as the last Allow span ended: an Allow of the
	// trip that missed its budget on a busy host may end after it; the
	// daemon ends its span once its answer is sent).
	eventually(t, "the denied call's Allow span at the daemon, in the caller's trace", func() bool {
		return endedIn(daemon, "breakerd.v1.BreakerService/Allow", runSpan.SpanContext().TraceID())
	})
	run := NewRun(c1)
	if _, err := run.Available(runCtx, []Tool{{Name: "web_search", Breaker: name}, {Name: "calc", Breaker: be.Breaker("calc")}}); err != nil {
		t.Fatal(err)
	}
	runSpan.End()
	got := lastEnded(t, app, "invoke_agent")
	wantAttrs(t, got, map[string]any{attrBreaker: name, attrDecision: "denied_open", attrDenialStatus: "circuit_open", attrDenialScope: "breaker"})
	if until := attrOf(got, attrDenyUntil); until == nil || until.(int64) <= 0 {
		t.Errorf("%s = %v, want the denial's end", attrDenyUntil, until)
	}
	if n := toolSpans(app) - before; n != 0 {
		t.Errorf("%d execute_tool spans inside the caller's span, want none: the client marks the caller's", n)
	}
	var removed []string
	for _, e := range got.Events() {
		if e.Name == eventToolRemoved {
			for _, kv := range e.Attributes {
				if kv.Key == attrTool {
					removed = append(removed, kv.Value.AsString())
				}
			}
		}
	}
	if len(removed) != 1 || removed[0] != "web_search" {
		t.Errorf("tool_removed events for %v, want [web_search]", removed)
	}

	// A call of the removed tool is denied with no round trip, and its
	// span says so.
	if err := run.Call(ctx, Tool{Name: "web_search", Breaker: name}, func(context.Context) error { return nil }); err == nil {
		t.Fatal("Call of a removed tool = nil, want a denial")
	}
	wantAttrs(t, lastEnded(t, app, "execute_tool web_search"), map[string]any{attrBreaker: name, attrDecision: "denied_open",
		attrCached: true, attrDenialStatus: "circuit_open"})
}

// endedIn reports whether a span named name ended in trace id.
func endedIn(r *tracetest.SpanRecorder, name string, id trace.TraceID) bool {
	return endedSpan(r, name, id) != nil
}

// endedSpan is the span named name that r saw end in trace id, or nil.
func endedSpan(r *tracetest.SpanRecorder, name string, id trace.TraceID) sdktrace.ReadOnlySpan {
	for _, s := range r.Ended() {
		if s.Name() == name && s.SpanContext().TraceID() == id {
			return s
		}
	}
	return nil
}

// TestNoTracerProviderInstallsNothing: without an application
// TracerProvider (otel's default, or a no-op one) Dial adds no handler
// and Call starts no span.
func TestNoTracerProviderInstallsNothing(t *testing.T) {
	if tracerProvider() != nil || TraceDialOptions() != nil {
		t.Fatal("tracing installed with no TracerProvider set")
	}
	if ctx, _ := toolSpan(context.Background(), "x"); ctx != context.Background() {
		t.Error("toolSpan started a span with no TracerProvider set")
	}
}

// toolSpans counts the execute_tool spans r has seen end.
func toolSpans(r *tracetest.SpanRecorder) int {
	n := 0
	for _, s := range r.Ended() {
		if strings.HasPrefix(s.Name(), "execute_tool ") {
			n++
		}
	}
	return n
}

func lastEnded(t *testing.T, r *tracetest.SpanRecorder, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	spans := r.Ended()
	for i := len(spans) - 1; i >= 0; i-- {
		if spans[i].Name() == name {
			return spans[i]
		}
	}
	t.Fatalf("no span %q ended among %d", name, len(spans))
	return nil
}

func attrOf(s sdktrace.ReadOnlySpan, key string) any {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.AsInterface()
		}
	}
	return nil
}

func wantAttrs(t *testing.T, s sdktrace.ReadOnlySpan, want map[string]any) {
	t.Helper()
	for k, v := range want {
		if got := attrOf(s, k); got != v {
			t.Errorf("span %q: %s = %v, want %v", s.Name(), k, got, v)
		}
	}
}
