package limits

import (
	"context"
	"net/http"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
)

// Track wraps h so that each request counts as a call on its connection
// (Conns.ConnContext put it there): it starts the connection's idle
// clock again, and marks it authenticated when api reports r as a call
// to the API and h answers it with a status below 400 (the successful
// call that authenticates a connection when the daemon has no tokens;
// with tokens, the token check calls Authenticate first).
func Track(h http.Handler, api func(*http.Request) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cn := connOf(r.Context())
		if cn == nil {
			h.ServeHTTP(w, r)
			return
		}
		cn.beginCall()
		defer cn.endCall()
		if cn.authenticated() || !api(r) {
			h.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(&statusWriter{ResponseWriter: w, cn: cn}, r)
	})
}

// statusWriter marks its connection authenticated on a status below 400.
type statusWriter struct {
	http.ResponseWriter
	cn    *Conn
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote && code < 400 && code >= 200 {
		w.cn.authenticate()
	}
	w.wrote = w.wrote || code >= 200
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

// Flush sends what is written so far (http.Flusher).
func (w *statusWriter) Flush() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Calls reports a gRPC server's calls to their connections (Conns): each
// call starts its connection's idle clock again, and a call to a method
// open reports false for (one that needs a token) marks its connection
// authenticated as soon as identified reports a known token in its
// context (the tap's), once it sends a message on a stream, or once it
// is answered without an error (the successful call of a daemon without
// tokens). Install it on a server with Conns.Calls' ServerOption and
// Registrar.
//
// It does what a gRPC stats handler would, at the same points of a call,
// without one: a server with a stats handler copies every call's metadata
// and builds an event for each step of it (a fifth of what a healthy
// Allow allocated). A nil *Calls reports nothing.
type Calls struct {
	c          *Conns
	identified func(context.Context) bool
	open       func(string) bool
}

// Calls returns the Calls that report a gRPC server's calls to c.
func (c *Conns) Calls(identified func(context.Context) bool, open func(method string) bool) *Calls {
	return &Calls{c: c, identified: identified, open: open}
}

// ServerOption is the stream interceptor that reports each stream; give
// it to the server before any other stream interceptor, so that it sees
// the streams they refuse, and puts the connection in the context of
// those that need it (OpenStreamCap).
func (t *Calls) ServerOption() grpc.ServerOption {
	return grpc.ChainStreamInterceptor(t.stream)
}

// Registrar returns g for registering services with each unary call
// reported before its request is decoded, so before a gate refuses it
// (WrapService) or an interceptor runs; nil t registers them unchanged.
func (t *Calls) Registrar(g *grpc.Server) Registrar { return Registrar{Server: g, calls: t} }

// Registrar is a gRPC server whose RegisterService reports the calls of
// each unary method (Calls.Registrar); it serves as reflection's server
// too.
type Registrar struct {
	*grpc.Server
	calls *Calls
}

// RegisterService registers sd's methods on the server, each unary
// method's calls reported (Wrap).
func (r Registrar) RegisterService(sd *grpc.ServiceDesc, impl any) {
	r.Server.RegisterService(r.Wrap(sd), impl)
}

// Wrap returns what RegisterService registers for sd: a copy whose unary
// methods report their calls; sd itself when there is nothing to report
// to. Register the copy on r's server yourself to keep it, for calls made
// in process (inproc.NewService).
func (r Registrar) Wrap(sd *grpc.ServiceDesc) *grpc.ServiceDesc {
	if r.calls == nil {
		return sd
	}
	out := *sd
	out.Methods = append([]grpc.MethodDesc(nil), sd.Methods...)
	for i, m := range out.Methods {
		out.Methods[i].Handler = r.calls.unary("/"+sd.ServiceName+"/"+m.MethodName, m.Handler)
	}
	return &out
}

// begin finds the connection of a call to method (the HTTP listener's,
// for a call it hands to the server; else by the call's two addresses)
// and counts the call on it. It returns the call's context carrying the
// connection, the connection (nil when it is none of c's) and whether
// method is open.
func (t *Calls) begin(ctx context.Context, method string) (context.Context, *Conn, bool) {
	cn := connOf(ctx)
	if cn == nil {
		if p, ok := peer.FromContext(ctx); ok {
			cn = t.c.byEnds(p.LocalAddr, p.Addr)
		}
		if cn == nil {
			return ctx, nil, false
		}
		ctx = withConn(ctx, cn)
	}
	open := t.open(method)
	cn.beginCall()
	if !open && !cn.authenticated() && t.identified != nil && t.identified(ctx) {
		cn.authenticate()
	}
	return ctx, cn, open
}

// unary reports the calls of the unary method h serves.
func (t *Calls) unary(method string, h grpc.MethodHandler) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
		ctx, cn, open := t.begin(ctx, method)
		if cn == nil {
			return h(srv, ctx, dec, in)
		}
		defer cn.endCall()
		resp, err := h(srv, ctx, dec, in)
		if err == nil && !open {
			cn.authenticate()
		}
		return resp, err
	}
}

// stream reports a stream.
func (t *Calls) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	ctx, cn, open := t.begin(ss.Context(), info.FullMethod)
	if cn == nil {
		return h(srv, ss)
	}
	defer cn.endCall()
	err := h(srv, &callStream{ServerStream: ss, ctx: ctx, cn: cn, open: open})
	if err == nil && !open {
		cn.authenticate()
	}
	return err
}

// callStream is a stream Calls reports: its context carries its
// connection, and a message it sends authenticates the connection unless
// its method is open.
type callStream struct {
	grpc.ServerStream
	ctx  context.Context
	cn   *Conn
	open bool
}

func (s *callStream) Context() context.Context { return s.ctx }

func (s *callStream) SendMsg(m any) error {
	err := s.ServerStream.SendMsg(m)
	if err == nil && !s.open {
		s.cn.authenticate()
	}
	return err
}
