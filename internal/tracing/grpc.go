package tracing

import (
	"context"
	"net"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// The daemon's RPC spans carry what otelgrpc's server spans do (semconv
// 1.43.0: named for the method, rpc.system.name, rpc.method,
// server.address and server.port, rpc.response.status_code, an error
// status for a server fault), started by interceptors of the daemon's own
// rather than otelgrpc's stats handler: an RPC the sampler drops costs the
// trace context's extraction,
// the sampling decision and a span that records nothing, no attributes,
// no metric instruments, no per-event work (docs/performance.md#what-tracing-costs).

// healthPrefix is the health service's methods, which are not traced.
const healthPrefix = "/grpc.health.v1.Health/"

// serverKind is the RPC span's one start option, made once.
var serverKind = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}

// unary traces each unary RPC but the health checks.
func (t *Tracing) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if strings.HasPrefix(info.FullMethod, healthPrefix) {
		return h(ctx, req)
	}
	ctx, span := t.startRPC(ctx, info.FullMethod)
	res, err := h(ctx, req)
	endRPC(span, err)
	return res, err
}

// stream traces each stream but the health watches, for its whole life.
func (t *Tracing) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if strings.HasPrefix(info.FullMethod, healthPrefix) {
		return h(srv, ss)
	}
	ctx, span := t.startRPC(ss.Context(), info.FullMethod)
	err := h(srv, tracedStream{ServerStream: ss, ctx: ctx})
	endRPC(span, err)
	return err
}

// tracedStream is a stream whose context holds its span.
type tracedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s tracedStream) Context() context.Context { return s.ctx }

// startRPC starts the span of the RPC fullMethod names, continuing the
// trace context the caller's metadata carries. Its attributes are built
// only when the span records.
func (t *Tracing) startRPC(ctx context.Context, fullMethod string) (context.Context, trace.Span) {
	ctx = t.propagators.Extract(ctx, incoming{ctx})
	name := strings.TrimPrefix(fullMethod, "/")
	ctx, span := t.tracer.Start(ctx, name, serverKind...)
	if span.IsRecording() {
		attrs := append(make([]attribute.KeyValue, 0, 4), semconv.RPCSystemNameGRPC, semconv.RPCMethod(name))
		if p, ok := peer.FromContext(ctx); ok && p.LocalAddr != nil {
			attrs = appendServerAddr(attrs, p.LocalAddr.String())
		}
		span.SetAttributes(attrs...)
	}
	return ctx, span
}

// appendServerAddr appends server.address and server.port, as hostport
// has them.
func appendServerAddr(attrs []attribute.KeyValue, hostport string) []attribute.KeyValue {
	h, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return append(attrs, semconv.ServerAddress(hostport))
	}
	attrs = append(attrs, semconv.ServerAddress(h))
	if port, err := strconv.Atoi(p); err == nil {
		attrs = append(attrs, semconv.ServerPort(port))
	}
	return attrs
}

// endRPC ends span with the RPC's status: rpc.response.status_code, and
// an error status for the codes that say the server failed (as otelgrpc
// judges them; a caller's mistake or a denial is not the server's).
func endRPC(span trace.Span, err error) {
	if !span.IsRecording() {
		return
	}
	s := status.Convert(err)
	switch s.Code() {
	case grpccodes.Unknown, grpccodes.DeadlineExceeded, grpccodes.Unimplemented, grpccodes.Internal,
		grpccodes.Unavailable, grpccodes.DataLoss:
		span.SetStatus(codes.Error, s.Message())
	}
	span.SetAttributes(semconv.RPCResponseStatusCode(codeName(s.Code())))
	span.End()
}

// codeNames are the codes as the gRPC specification spells them, by
// value.
var codeNames = [...]string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
	"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
	"UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}

// codeName is code as the gRPC specification spells it.
func codeName(code grpccodes.Code) string {
	if int(code) < len(codeNames) {
		return codeNames[code]
	}
	return "CODE(" + strconv.Itoa(int(code)) + ")"
}

// incoming is the metadata of ctx's incoming RPC as the propagators read
// it: one value looked up where it is, the metadata not copied.
type incoming struct{ ctx context.Context }

func (c incoming) Get(key string) string {
	if v := metadata.ValueFromIncomingContext(c.ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (incoming) Set(string, string) {}

func (c incoming) Keys() []string {
	md, _ := metadata.FromIncomingContext(c.ctx)
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	return keys
}
