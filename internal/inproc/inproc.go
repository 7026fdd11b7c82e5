// Package inproc calls a gRPC service's unary methods in process: the
// method handler the server registered, through the unary interceptors the
// server runs, with no transport between, so that another front (the
// HTTP/JSON API) runs each call as the gRPC server would.
package inproc

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// UnaryInterceptors returns the server option grpc.ChainUnaryInterceptor
// would, which Chain also finds among a server's options. Give a server
// its unary interceptors this way so that calls made in process run them
// too: one given as a bare grpc.ChainUnaryInterceptor runs on the
// server's own calls only.
func UnaryInterceptors(ints ...grpc.UnaryServerInterceptor) grpc.ServerOption {
	return unaryOption{ServerOption: grpc.ChainUnaryInterceptor(ints...), ints: ints}
}

// unaryOption is grpc.ChainUnaryInterceptor's option, which the server
// applies as it is, with its interceptors where Chain can read them.
type unaryOption struct {
	grpc.ServerOption
	ints []grpc.UnaryServerInterceptor
}

// Chain returns the unary interceptors UnaryInterceptors put in opts as
// one, run as a server given opts runs them: in the order given, the
// first outermost. Nil when there are none.
func Chain(opts []grpc.ServerOption) grpc.UnaryServerInterceptor {
	var ints []grpc.UnaryServerInterceptor
	for _, o := range opts {
		if u, ok := o.(unaryOption); ok {
			ints = append(ints, u.ints...)
		}
	}
	switch len(ints) {
	case 0:
		return nil
	case 1:
		return ints[0]
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return ints[0](ctx, req, info, next(ints[1:], info, h))
	}
}

// next is the handler an interceptor calls: the rest of ints, then h.
func next(ints []grpc.UnaryServerInterceptor, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) grpc.UnaryHandler {
	if len(ints) == 0 {
		return h
	}
	return func(ctx context.Context, req any) (any, error) {
		return ints[0](ctx, req, info, next(ints[1:], info, h))
	}
}

// Service is a gRPC service's unary methods, called in process. It is
// safe for concurrent use.
type Service struct {
	name    string
	impl    any
	methods map[string]grpc.MethodHandler
	chain   grpc.UnaryServerInterceptor
}

// NewService returns sd's unary methods on impl, each call run through
// chain (Chain of the server's options; nil for none). sd is the
// description the server registered, its handlers wrapped as registered.
func NewService(sd *grpc.ServiceDesc, impl any, chain grpc.UnaryServerInterceptor) *Service {
	s := &Service{name: sd.ServiceName, impl: impl, methods: make(map[string]grpc.MethodHandler, len(sd.Methods)), chain: chain}
	for _, m := range sd.Methods {
		s.methods[m.MethodName] = m.Handler
	}
	return s
}

// Name is the service's full name ("breakerd.v1.BreakerService").
func (s *Service) Name() string { return s.name }

// Has reports whether method (a short name, "Allow") is one of the
// service's unary methods.
func (s *Service) Has(method string) bool {
	_, ok := s.methods[method]
	return ok
}

// Call runs method (a short name): its handler decodes the request with
// dec, then runs through the interceptors, as the server runs a call. ctx
// carries what the server's transport would have put there (the incoming
// metadata, the peer, the deadline). The error is a status error, as the
// server would send it: one that is not (a context's, say) is converted as
// the server converts it.
func (s *Service) Call(ctx context.Context, method string, dec func(any) error) (any, error) {
	h, ok := s.methods[method]
	if !ok {
		return nil, status.Errorf(codes.Unimplemented, "unknown method %s for service %s", method, s.name)
	}
	res, err := h(s.impl, ctx, dec, s.chain)
	if err == nil {
		return res, nil
	}
	if _, ok := status.FromError(err); ok {
		return nil, err
	}
	return nil, status.FromContextError(err).Err()
}
