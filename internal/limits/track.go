package limits

import (
	"context"
	"net/http"

	"google.golang.org/grpc/stats"
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
		defer cn.begin()()
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

// StatsHandler returns the gRPC stats handler that reports a server's
// calls to c: each call starts its connection's idle clock again, and a
// call to a method open reports false for (one that needs a token)
// marks its connection authenticated as soon as identified reports a
// known token in its context (the tap's), or once it sends a response
// or ends without an error (the successful call of a daemon without
// tokens). Give it to the server with grpc.StatsHandler.
func (c *Conns) StatsHandler(identified func(context.Context) bool, open func(method string) bool) stats.Handler {
	return &connStats{c: c, identified: identified, open: open}
}

type connStats struct {
	c          *Conns
	identified func(context.Context) bool
	open       func(string) bool
}

// rpcKey carries what the handler keeps of one call.
type rpcKey struct{}

// rpcState is one call's: its connection, whether its method is open,
// and whether it began (Begin counted it busy on cn).
type rpcState struct {
	cn    *Conn
	open  bool
	begun bool
}

// TagConn finds the connection's *Conn: already in ctx for a call the
// HTTP listener hands to the gRPC server, else by its two addresses.
func (s *connStats) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	if connOf(ctx) != nil {
		return ctx
	}
	key := connAddr(info.LocalAddr, info.RemoteAddr)
	s.c.mu.Lock()
	cn := s.c.byAddr[key]
	s.c.mu.Unlock()
	if cn == nil {
		return ctx
	}
	return withConn(ctx, cn)
}

func (s *connStats) HandleConn(context.Context, stats.ConnStats) {}

func (s *connStats) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	cn := connOf(ctx)
	if cn == nil {
		return ctx
	}
	return context.WithValue(ctx, rpcKey{}, &rpcState{cn: cn, open: s.open(info.FullMethodName)})
}

// HandleRPC sees each of a call's events; only four concern the
// connection, and the rest return before looking at the call's context.
func (s *connStats) HandleRPC(ctx context.Context, st stats.RPCStats) {
	switch st.(type) {
	case *stats.Begin, *stats.InHeader, *stats.OutPayload, *stats.End:
	default:
		return
	}
	rs, ok := ctx.Value(rpcKey{}).(*rpcState)
	if !ok || st.IsClient() {
		return
	}
	cn := rs.cn
	switch ev := st.(type) {
	case *stats.Begin:
		cn.beginCall()
		rs.begun = true
	case *stats.InHeader:
		if !rs.open && !cn.authenticated() && s.identified != nil && s.identified(ctx) {
			cn.authenticate()
		}
	case *stats.OutPayload:
		if !rs.open {
			cn.authenticate()
		}
	case *stats.End:
		if rs.begun {
			rs.begun = false
			cn.endCall()
		}
		if !rs.open && ev.Error == nil {
			cn.authenticate()
		}
	}
}
