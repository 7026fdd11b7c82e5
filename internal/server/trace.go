package server

import (
	"context"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
)

// callTrace is the W3C trace id of the call ctx serves, "" when it has
// none: its span's (the daemon traces: its interceptor took the caller's
// traceparent), else the traceparent the caller sent, read as it is (a
// daemon that exports no traces still links an open event to the
// caller's trace). A malformed header is no trace id, never an error:
// the caller's tracing is not breakerd's to judge.
func callTrace(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		return sc.TraceID().String()
	}
	v := metadata.ValueFromIncomingContext(ctx, "traceparent")
	// version "-" trace id "-" parent id "-" flags: 00-<32 hex>-<16 hex>-<2 hex>
	if len(v) != 1 || len(v[0]) < 55 || v[0][2] != '-' || v[0][35] != '-' {
		return ""
	}
	return v[0][3:35] // store.ValidTraceID judges it
}
