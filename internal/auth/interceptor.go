package auth

import (
	"context"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// servicePrefix starts every breakerd.v1 method name.
const servicePrefix = "/" + "breakerd.v1.BreakerService" + "/"

// workerMethods are the breakerd.v1 methods a worker token may call. Every
// other breakerd.v1 method (Force, and any added later) needs an operator.
var workerMethods = map[string]bool{
	"Allow": true, "Record": true, "Get": true, "BatchGet": true, "List": true, "Watch": true,
}

// openPrefixes are services that stay open without a token: health checks
// (load balancers, the image's healthcheck) and reflection (grpcurl).
var openPrefixes = []string{
	"/grpc.health.v1.Health/",
	"/grpc.reflection.v1.ServerReflection/",
	"/grpc.reflection.v1alpha.ServerReflection/",
}

// Authenticator checks bearer tokens on every call. Its token table can be
// swapped while serving (Set), for a config reload. It is safe for
// concurrent use.
type Authenticator struct {
	tokens atomic.Pointer[Tokens]
}

// New returns an Authenticator over t.
func New(t *Tokens) *Authenticator {
	a := &Authenticator{}
	a.tokens.Store(t)
	return a
}

// Set replaces the token table; calls already authenticated keep theirs.
func (a *Authenticator) Set(t *Tokens) { a.tokens.Store(t) }

type ctxKey struct{}

// FromContext returns the caller's identity, set by the interceptors.
func FromContext(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(ctxKey{}).(Identity)
	return id, ok
}

// ServerOptions returns the interceptors that enforce the tokens (chained,
// so they compose with other interceptors).
func (a *Authenticator) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(a.unary),
		grpc.ChainStreamInterceptor(a.stream),
	}
}

// authorize returns the caller's identity for method, or the status error:
// Unauthenticated without a known token, PermissionDenied for the wrong
// role. ok is false for open methods (no identity needed).
func (a *Authenticator) authorize(ctx context.Context, method string) (Identity, bool, error) {
	for _, p := range openPrefixes {
		if strings.HasPrefix(method, p) {
			return Identity{}, false, nil
		}
	}
	token, err := bearer(ctx)
	if err != nil {
		return Identity{}, false, err
	}
	id, found := a.tokens.Load().Lookup(token)
	if !found {
		return Identity{}, false, status.Error(codes.Unauthenticated, "authorization: unknown bearer token")
	}
	short, isBreakerd := strings.CutPrefix(method, servicePrefix)
	if id.Role != RoleOperator && !(isBreakerd && workerMethods[short]) {
		return Identity{}, false, status.Errorf(codes.PermissionDenied,
			"authorization: token %q has role %s, which may not call %s (operator only)", id.Name, id.Role, method)
	}
	return id, true, nil
}

// bearer reads "authorization: Bearer <token>" from the call's metadata.
func bearer(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) == 0 {
		return "", status.Error(codes.Unauthenticated, `authorization: missing; send metadata "authorization: Bearer <token>"`)
	}
	scheme, token, ok := strings.Cut(vals[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return "", status.Error(codes.Unauthenticated, `authorization: want "Bearer <token>"`)
	}
	return strings.TrimSpace(token), nil
}

// workerRequest is any request that names the worker it acts for.
type workerRequest interface{ GetWorkerId() string }

func (a *Authenticator) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	id, ok, err := a.authorize(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	if !ok {
		return h(ctx, req)
	}
	// A worker token acts only as its own workers, so one process cannot
	// make up the second worker of a quorum.
	if r, isW := req.(workerRequest); isW && !id.MayActAs(r.GetWorkerId()) {
		return nil, status.Errorf(codes.PermissionDenied, "worker_id: token %q may not act as worker %q", id.Name, r.GetWorkerId())
	}
	// A Force is recorded under the token's name, whatever the request says.
	if r, isF := req.(*pb.ForceRequest); isF {
		r.Operator = id.Name
	}
	return h(context.WithValue(ctx, ctxKey{}, id), req)
}

func (a *Authenticator) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	id, ok, err := a.authorize(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	if !ok {
		return h(srv, ss)
	}
	return h(srv, &identityStream{ServerStream: ss, ctx: context.WithValue(ss.Context(), ctxKey{}, id)})
}

type identityStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *identityStream) Context() context.Context { return s.ctx }
