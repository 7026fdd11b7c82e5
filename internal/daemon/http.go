package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/breakerd/breakerd/internal/auth"
	"github.com/breakerd/breakerd/internal/events"
	"github.com/breakerd/breakerd/internal/httpapi"
	"github.com/breakerd/breakerd/internal/limits"
	"github.com/breakerd/breakerd/internal/protocol"
	"github.com/breakerd/breakerd/internal/server"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tracing"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// listenHTTP opens the HTTP/JSON listener when c.HTTPListen is set; nil
// when it is not.
func listenHTTP(c Config) (net.Listener, error) {
	if c.HTTPListen == "" {
		return nil, nil
	}
	lis, err := net.Listen("tcp", c.HTTPListen)
	if err != nil {
		return nil, fmt.Errorf("--http-listen %s: %w", c.HTTPListen, err)
	}
	return lis, nil
}

// closeListener closes lis, if any (an early return's cleanup; closing
// one a server closed already is harmless).
func closeListener(lis net.Listener) {
	if lis != nil {
		_ = lis.Close()
	}
}

// httpAPIDeps are what the HTTP/JSON API serves from.
type httpAPIDeps struct {
	grpc   *grpc.Server
	health *health.Server
	auth   *auth.Authenticator
	hub    *events.Hub
	store  *store.Store
	// srv holds the per-token caps the HTTP listener counts in too.
	srv *server.Server
	// conns is the connection cap the listener is under, which its calls
	// report to (limits.Track).
	conns *limits.Conns
	// tracing, when set, continues each request's trace (otelhttp).
	tracing *tracing.Tracing
}

// httpAPI is the HTTP/JSON listener's server.
type httpAPI struct {
	srv     *http.Server
	lis     net.Listener
	tls     bool
	timeout time.Duration
}

// newHTTPServer returns the server of the HTTP/JSON API on lis, with the
// gRPC listener's TLS (c's certificate and client CA) and tokens; nil
// when lis is nil (no --http-listen).
func newHTTPServer(c Config, log *slog.Logger, lis net.Listener, d httpAPIDeps) (*httpAPI, error) {
	if lis == nil {
		return nil, nil
	}
	var origins []string
	for o := range strings.SplitSeq(c.HTTPCORSOrigins, ",") {
		if o = strings.TrimSpace(o); o != "" {
			origins = append(origins, o)
		}
	}
	lim := listenerLimits(c).WithDefaults()
	h, err := httpapi.New(httpapi.Options{GRPC: d.grpc, Local: d.srv.InProcess(), Health: d.health, Auth: d.auth,
		MaxBodyBytes: int64(lim.MaxRecvBytes), CORSOrigins: origins, Log: log, Hosts: httpHosts(c),
		Watch: &httpapi.Watch{Hub: d.hub, Store: d.store, Heartbeat: c.HTTPHeartbeat, WithParents: d.srv.WithParents, Reads: snapshotReads(d)}})
	if err != nil {
		return nil, err
	}
	// The listener limits (internal/limits) come first: header and body
	// bounds, and the per-token caps the gRPC listener counts in too.
	reads, watch := d.srv.Gates()
	h = d.tracing.Handler(h)
	srv := lim.HTTPServer(limits.Track(lim.HTTPHandler(h, limits.HTTPOptions{Authenticate: httpCaller(d.auth), Gate: httpGate(reads, watch)}), isAPICall))
	srv.ConnContext = d.conns.ConnContext
	// Every request is marked HTTP once, on the server's base context,
	// rather than each with a copy (httpapi's withProtocol).
	srv.BaseContext = func(net.Listener) context.Context { return protocol.With(context.Background(), protocol.HTTP) }
	srv.ErrorLog = slog.NewLogLogger(log.With("component", "http").Handler(), slog.LevelWarn)
	a := &httpAPI{srv: srv, lis: lis, timeout: c.ShutdownTimeout}
	if c.TLSCert != "" {
		cfg, err := auth.ServerTLS(c.TLSCert, c.TLSKey, c.TLSClientCA)
		if err != nil {
			return nil, err
		}
		srv.TLSConfig, a.tls = cfg, true
	}
	scheme := "http"
	if a.tls {
		scheme = "https"
	}
	log.Info("serving the HTTP/JSON API", "addr", scheme+"://"+lis.Addr().String(), "cors_origins", origins)
	return a, nil
}

// httpHosts is the HTTP listener's guard against DNS rebinding and
// cross-site requests (httpapi.Hosts), on when a browser's request is
// all it takes to call the API: the listener is loopback, or there are
// no tokens. Behind a Service or a balancer, with tokens, every Host
// passes (a page cannot know a token). The listen address's own name,
// when it is one, is allowed with --http-allowed-hosts.
func httpHosts(c Config) *httpapi.Hosts {
	if c.TokensFile != "" && !auth.IsLoopback(c.HTTPListen) {
		return nil
	}
	h := &httpapi.Hosts{}
	if host, _, err := net.SplitHostPort(c.HTTPListen); err == nil && host != "" {
		h.Names = append(h.Names, host)
	}
	for n := range strings.SplitSeq(c.HTTPAllowedHosts, ",") {
		if n = strings.TrimSpace(n); n != "" {
			h.Names = append(h.Names, n)
		}
	}
	return h
}

// httpCaller names the caller of an HTTP request for the per-token caps
// as server.CallerKey does on gRPC, so a token's calls share one count
// over both listeners. A request without a known token counts under its
// connection here; the API's front refuses it in its own words.
func httpCaller(a *auth.Authenticator) func(*http.Request) (string, error) {
	return func(r *http.Request) (string, error) {
		if a == nil {
			return "", nil
		}
		id, err := a.IdentifyHeader(r.Header)
		if err != nil {
			return "", nil
		}
		limits.Authenticate(r.Context())
		return server.TokenKey(id), nil
	}
}

// snapshotReads takes a slot of the caller's read cap for a GET
// /v1/watch snapshot (httpapi.Watch.Reads), under the key its other HTTP
// and gRPC reads count under.
func snapshotReads(d httpAPIDeps) func(*http.Request) (func(), error) {
	reads, _ := d.srv.Gates()
	caller := httpCaller(d.auth)
	return func(r *http.Request) (func(), error) {
		key, _ := caller(r)
		return reads.Acquire(key)
	}
}

// isAPICall reports whether r calls the API (an RPC or the event
// stream), as against the health check and the status page's files: with
// no tokens, an API call that succeeds authenticates its connection.
func isAPICall(r *http.Request) bool {
	return r.URL.Path == "/v1/watch" || strings.HasPrefix(r.URL.Path, "/"+pb.BreakerService_ServiceDesc.ServiceName+"/")
}

// httpGate returns the cap an HTTP request counts against: the reads for
// a transcoded read RPC, the Watch streams for the event stream.
func httpGate(reads, watch limits.Gate) func(*http.Request) *limits.Gate {
	return func(r *http.Request) *limits.Gate {
		if r.URL.Path == "/v1/watch" {
			return &watch
		}
		method, ok := strings.CutPrefix(r.URL.Path, "/"+pb.BreakerService_ServiceDesc.ServiceName+"/")
		if ok && slices.Contains(reads.Methods, method) {
			return &reads
		}
		return nil
	}
}

// serve serves until shutdown; it returns nil after a shutdown.
func (a *httpAPI) serve() error {
	var err error
	if a.tls {
		err = a.srv.ServeTLS(a.lis, "", "")
	} else {
		err = a.srv.Serve(a.lis)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("http: %w", err)
}

// shutdown stops accepting calls and waits for those in flight (a watch
// stream ends when the event hub stops), up to the shutdown timeout.
func (a *httpAPI) shutdown() {
	if a == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	_ = a.srv.Shutdown(ctx)
}

// close cuts every connection (the shutdown's backstop).
func (a *httpAPI) close() {
	if a != nil {
		_ = a.srv.Close()
	}
}
