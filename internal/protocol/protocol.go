// Package protocol carries the wire protocol a call arrived by in its
// context, so that code behind both listeners (metrics, logs) can tell a
// gRPC call from one transcoded from HTTP/JSON. It imports only the
// standard library.
package protocol

import "context"

// Name is a wire protocol, as a metric label or log field reads it.
type Name string

const (
	// GRPC is a call on the gRPC listener (the default: a context that
	// carries no protocol came by gRPC).
	GRPC Name = "grpc"
	// HTTP is a call on the HTTP/JSON listener (--http-listen), transcoded
	// to the gRPC service or served by the SSE endpoint.
	HTTP Name = "http"
)

type ctxKey struct{}

// With returns ctx carrying p.
func With(ctx context.Context, p Name) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// From returns the protocol ctx carries, GRPC when it carries none.
func From(ctx context.Context) Name {
	if p, ok := ctx.Value(ctxKey{}).(Name); ok {
		return p
	}
	return GRPC
}

// ErrorDomain is the domain of the google.rpc.ErrorInfo detail breakerd
// attaches to an error another program acts on; its Reason says which.
const ErrorDomain = "breakerd.dev"

// ReasonRedisUnavailable is the ErrorInfo reason of an Unavailable the
// daemon answers itself: it is up, and Redis did not serve the call.
const ReasonRedisUnavailable = "REDIS_UNAVAILABLE"
