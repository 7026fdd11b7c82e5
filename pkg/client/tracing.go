package client

import (
	"context"
	"reflect"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// The attributes a guarded call's span carries (docs/observability.md,
// "Attributes"): the OpenTelemetry GenAI conventions' where they have a
// name (semconv 1.40.0), breakerd's own under breakerd.
const (
	attrBreaker        = "breakerd.breaker"
	attrDecision       = "breakerd.decision"
	attrDegraded       = "breakerd.degraded"
	attrDaemonDegraded = "breakerd.daemon_degraded"
	attrCached         = "breakerd.cached"
	attrDenialStatus   = "breakerd.denial.status"
	attrDenialScope    = "breakerd.denial.scope"
	attrDenyUntil      = "breakerd.deny_until_ms"
	attrOutcome        = "breakerd.outcome"
	attrCounted        = "breakerd.outcome.counted"
	eventToolRemoved   = "breakerd.tool_removed"
	attrTool           = "breakerd.tool"
	attrBatchSize      = "breakerd.batch.size"
	spanRecordBatch    = "breakerd.record_batch"
)

// tracerScope is the instrumentation scope of the client's own spans.
const tracerScope = "github.com/breakerd/breakerd/pkg/client"

// tracerProvider returns the application's TracerProvider (otel's
// global), or nil while none is set (or a no-op one is): then the client
// installs nothing and starts no span.
func tracerProvider() trace.TracerProvider {
	tp := otel.GetTracerProvider()
	t := reflect.TypeOf(tp)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.PkgPath() {
	case "go.opentelemetry.io/otel/internal/global", "go.opentelemetry.io/otel/trace/noop":
		return nil
	}
	return tp
}

// TraceDialOptions carry the caller's W3C trace context to breakerd
// (otelgrpc's client handler) when the application has a TracerProvider;
// none otherwise. Dial adds them; a connection made for New (an MCP
// gateway's) adds them itself.
func TraceDialOptions() []grpc.DialOption {
	tp := tracerProvider()
	if tp == nil {
		return nil
	}
	return []grpc.DialOption{grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp),
		otelgrpc.WithPropagators(propagation.TraceContext{})))}
}

// traceDecision records p on ctx's span when it is recording (nothing,
// and no allocation, otherwise).
func traceDecision(ctx context.Context, p *Permit) {
	span := trace.SpanFromContext(ctx)
	if p == nil || !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.String(attrBreaker, p.Breaker), attribute.String(attrDecision, enumWord(p.Decision.String(), "DECISION_")),
		attribute.Bool(attrDegraded, p.Degraded), attribute.Bool(attrDaemonDegraded, p.DaemonDegraded), attribute.Bool(attrCached, p.Cached))
	if d := p.Denial; d != nil {
		span.SetAttributes(attribute.String(attrDenialStatus, d.GetStatus()),
			attribute.String(attrDenialScope, enumWord(d.GetScope().String(), "DENIAL_SCOPE_")), attribute.Int64(attrDenyUntil, d.GetDenyUntilMs()))
	}
}

// traceOutcome records an outcome sent (or kept locally) on ctx's span
// when it is recording.
func traceOutcome(ctx context.Context, r Result, res *pb.RecordResponse) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.String(attrOutcome, enumWord(r.Outcome.String(), "OUTCOME_")), attribute.Bool(attrCounted, res.GetCounted()))
}

// traceRemoved is a tool a run removed, as an event on ctx's span.
func traceRemoved(ctx context.Context, u Unavailable) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.AddEvent(eventToolRemoved, trace.WithAttributes(attribute.String(attrTool, u.Tool), attribute.String(attrBreaker, u.Breaker),
		attribute.String(attrDenialStatus, u.Status), attribute.Bool(attrDegraded, u.Degraded)))
}

// toolSpan starts the guarded call's own span, named as the GenAI
// conventions name a tool's execution ("execute_tool <name>"), when ctx
// has no recording span and the application has a TracerProvider; it
// returns ctx and a no-op end otherwise.
func toolSpan(ctx context.Context, breaker string) (context.Context, func()) {
	if trace.SpanFromContext(ctx).IsRecording() {
		return ctx, func() {}
	}
	tp := tracerProvider()
	if tp == nil {
		return ctx, func() {}
	}
	ctx, span := tp.Tracer(tracerScope, trace.WithSchemaURL(semconv.SchemaURL)).Start(ctx, "execute_tool "+breaker,
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(semconv.GenAIOperationNameExecuteTool, semconv.GenAIToolName(breaker)))
	return ctx, func() { span.End() }
}

// enumWord is a proto enum's name as an attribute value: without its
// prefix, lower case ("DECISION_DENIED_OPEN" is "denied_open").
func enumWord(name, prefix string) string {
	return strings.ToLower(strings.TrimPrefix(name, prefix))
}

// batchSpan starts the span of a fast-mode batch of outcomes when the
// application has a TracerProvider and a queued outcome came from a
// traced call: a root of its own ("breakerd.record_batch"), linked to
// each such call's span, never its child, since one batch carries many
// calls' outcomes. Each outcome carries its call's trace id on the wire
// (RecordRequest.trace_id). It returns ctx and a no-op end otherwise.
func batchSpan(ctx context.Context, batch []queued) (context.Context, func(error)) {
	var links []trace.Link
	for _, q := range batch {
		if q.link.IsValid() {
			links = append(links, trace.Link{SpanContext: q.link})
		}
	}
	tp := tracerProvider()
	if len(links) == 0 || tp == nil {
		return ctx, func(error) {}
	}
	ctx, span := tp.Tracer(tracerScope).Start(ctx, spanRecordBatch, trace.WithNewRoot(), trace.WithLinks(links...),
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attribute.Int(attrBatchSize, len(batch))))
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}
