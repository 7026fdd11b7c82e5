// Package tracing puts the daemon's decisions in its callers' traces:
// an OTLP exporter set up from the standard OpenTelemetry environment
// (Env), the gRPC and HTTP server handlers that continue a caller's W3C
// trace context, and the tracer the store wraps each decision script in.
// Without an exporter configured nothing is installed.
package tracing

import (
	"context"
	"fmt"
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/breakerd/breakerd/internal/inproc"
)

// Scope is the instrumentation scope of breakerd's own spans.
const Scope = "github.com/breakerd/breakerd"

// Tracing is a running trace pipeline: a tracer provider exporting over
// OTLP. Its methods are safe for concurrent use.
type Tracing struct {
	tp          *sdktrace.TracerProvider
	tracer      trace.Tracer // tp's, for Scope
	propagators propagation.TextMapPropagator
}

// Options are what Start adds to the environment's settings.
type Options struct {
	// Version is service.version (OTEL_RESOURCE_ATTRIBUTES may override).
	Version string
}

// Start builds the exporter e names and a tracer provider batching to
// it; nil when e is off. service.name is breakerd unless OTEL_SERVICE_NAME
// or OTEL_RESOURCE_ATTRIBUTES names another. Shutdown flushes it.
func Start(ctx context.Context, e Env, o Options) (*Tracing, error) {
	if !e.On {
		return nil, nil
	}
	var exp sdktrace.SpanExporter
	var err error
	switch {
	case e.Protocol == ProtocolGRPC && e.Endpoint != "":
		exp, err = otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(e.Endpoint))
	case e.Protocol == ProtocolGRPC:
		exp, err = otlptracegrpc.New(ctx)
	case e.Endpoint != "":
		exp, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(e.Endpoint))
	default:
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter (%s): %w", e.Protocol, err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", "breakerd")}
	if o.Version != "" {
		attrs = append(attrs, attribute.String("service.version", o.Version))
	}
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res)}
	if e.Sampler != nil {
		opts = append(opts, sdktrace.WithSampler(e.Sampler))
	}
	return newTracing(sdktrace.NewTracerProvider(opts...)), nil
}

// newTracing is the Tracing of tp.
func newTracing(tp *sdktrace.TracerProvider) *Tracing {
	return &Tracing{tp: tp, tracer: tp.Tracer(Scope),
		propagators: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})}
}

// Shutdown exports the spans still batched and stops the exporter,
// within ctx. A nil Tracing has nothing to do.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// Tracer returns breakerd's tracer (store.Options.Tracer); nil from a
// nil Tracing, which means no spans.
func (t *Tracing) Tracer() trace.Tracer {
	if t == nil {
		return nil
	}
	return t.tracer
}

// ServerOptions are the gRPC server's: interceptors that give each RPC a
// server span continuing the caller's trace context (traceparent in the
// metadata), as otelgrpc's would (grpc.go). Health checks are not traced.
// They go first, so the span covers the other interceptors. None from a
// nil Tracing.
func (t *Tracing) ServerOptions() []grpc.ServerOption {
	if t == nil {
		return nil
	}
	return []grpc.ServerOption{inproc.UnaryInterceptors(t.unary), grpc.ChainStreamInterceptor(t.stream)}
}

// Handler wraps the HTTP/JSON API in otelhttp's handler, so a request's
// span continues the caller's trace context (the traceparent header); h
// as it is from a nil Tracing. The request goes on with the HTTP span's
// own context in its headers, so the transcoded RPC's span (ServerOptions)
// is the HTTP span's child rather than its sibling.
func (t *Tracing) Handler(h http.Handler) http.Handler {
	if t == nil {
		return h
	}
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.propagators.Inject(r.Context(), propagation.HeaderCarrier(r.Header))
		h.ServeHTTP(w, r)
	})
	return otelhttp.NewHandler(inner, "breakerd.http", otelhttp.WithTracerProvider(t.tp), otelhttp.WithPropagators(t.propagators),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method + " " + r.URL.Path }))
}
