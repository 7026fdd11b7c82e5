package mcpgw

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// DefaultMaxSessions bounds the downstream sessions served over HTTP at
// once when HTTPOptions sets no bound.
const DefaultMaxSessions = 256

// DefaultMaxSessionsPerClient bounds the HTTP sessions one client (one
// source address: an IPv4 address, an IPv6 /64) holds at once, when
// HTTPOptions sets no share.
const DefaultMaxSessionsPerClient = 16

// DefaultSessionIdleTimeout closes an HTTP session that sent no request
// for this long, when HTTPOptions sets no timeout. An agent whose session
// is gone is answered 404 and starts a new one (MCP's Streamable HTTP
// transport).
const DefaultSessionIdleTimeout = 5 * time.Minute

// HTTPOptions bound what Streamable HTTP agents can hold of a gateway.
type HTTPOptions struct {
	// Token, when not empty, is the bearer token every request to /mcp
	// must carry (Authorization: Bearer <token>); others are answered 401.
	// Empty: none (the command allows that on a loopback address only).
	Token string
	// MaxSessions bounds the sessions open at once, those still
	// initializing included; a new session past it is answered 503.
	// Default DefaultMaxSessions.
	MaxSessions int
	// MaxSessionsPerClient bounds the sessions one client (source
	// address: an IPv4 address, an IPv6 /64) holds at once, those still
	// initializing included; a new session past it is answered 503.
	// Default DefaultMaxSessionsPerClient; negative: no share (behind a
	// proxy, where every agent has the proxy's address).
	MaxSessionsPerClient int
	// AllowedOrigins are the browser origins ("https://agent.example.com",
	// scheme://host[:port]) whose requests /mcp serves besides those
	// without an Origin header and those of a loopback host (localhost,
	// 127.0.0.0/8, ::1); any other Origin is answered 403.
	AllowedOrigins []string
	// IdleTimeout closes a session that sent no request for this long
	// (its tools and worker are released; the agent starts a new one).
	// Default DefaultSessionIdleTimeout.
	IdleTimeout time.Duration
}

// Handler serves downstream sessions over Streamable HTTP at /mcp and the
// gateway's health at /healthz (JSON Health; status 200 when "ok", 503
// while breakerd is unreachable and calls are judged by the fallback).
func (g *Gateway) Handler(o HTTPOptions) http.Handler {
	if o.MaxSessions <= 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	if o.MaxSessionsPerClient == 0 {
		o.MaxSessionsPerClient = DefaultMaxSessionsPerClient
	}
	allowed := make([]string, len(o.AllowedOrigins))
	for i, a := range o.AllowedOrigins {
		allowed[i] = strings.ToLower(a)
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultSessionIdleTimeout
	}
	base := mcp.NewServer(&mcp.Implementation{Name: "breakerd-mcp", Version: g.o.Version}, nil)
	streamable := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		if l, ok := r.Context().Value(lazyKey{}).(*lazySession); ok {
			return l.get(g)
		}
		return base
	}, &mcp.StreamableHTTPOptions{SessionTimeout: o.IdleTimeout})
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		h := g.Health()
		w.Header().Set("Content-Type", "application/json")
		if h.Status != "ok" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(h)
	})
	mux.Handle("/mcp", g.origins(allowed, bearer(o.Token, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The SDK asks for a server on every request (once only to read
		// its protocol versions). Only a POST without a session id can
		// start a session: give it one lazily built session server, the
		// same for every ask within the request.
		if r.Method != http.MethodPost || r.Header.Get("Mcp-Session-Id") != "" {
			streamable.ServeHTTP(w, r)
			return
		}
		key := clientKey(r.RemoteAddr)
		if reason, err := g.reserve(o, key); err != nil { // given back, or taken over by the session, in admit
			g.m.refused.WithLabelValues(reason).Inc()
			http.Error(w, "breakerd-mcp: "+err.Error()+"; close one or retry later", http.StatusServiceUnavailable)
			return
		}
		l := &lazySession{client: key}
		fw := &firstWrite{ResponseWriter: w, first: func() { g.admit(l) }}
		streamable.ServeHTTP(fw, r.WithContext(context.WithValue(r.Context(), lazyKey{}, l)))
		fw.once.Do(fw.first)
		if l.s != nil && !l.s.isJoined() {
			l.s.close() // no session kept: a failed or sessionless request
		}
	}))))
	return mux
}

// origins refuses, with 403 (counted), a request whose Origin header is neither a
// loopback host's nor one of allowed: a browser page elsewhere (a DNS
// rebinding one included) cannot drive the gateway. A request without
// Origin (not from a browser) passes.
func (g *Gateway) origins(allowed []string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o := r.Header.Get("Origin"); o != "" && !loopbackOrigin(o) && !slices.Contains(allowed, strings.ToLower(o)) {
			g.m.refused.WithLabelValues(refusedOrigin).Inc()
			http.Error(w, "breakerd-mcp: origin "+strconv.Quote(o)+" is not allowed (--allowed-origins)", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackOrigin reports whether origin is http(s) on localhost or a
// loopback address.
func loopbackOrigin(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Path != "" {
		return false
	}
	h := u.Hostname()
	ip := net.ParseIP(h)
	return strings.EqualFold(h, "localhost") || ip != nil && ip.IsLoopback()
}

// CheckOrigin checks an --allowed-origins value: scheme://host[:port],
// http or https, nothing more.
func CheckOrigin(origin string) error {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawQuery != "" ||
		u.User != nil || !strings.EqualFold(origin, u.Scheme+"://"+u.Host) {
		return fmt.Errorf("%q is not an origin (scheme://host[:port], http or https)", origin)
	}
	return nil
}

// clientKey is the share a request counts against: its source IPv4
// address, or the /64 of its IPv6 address.
func clientKey(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return host
	}
	if v4 := ip.To4(); v4 != nil {
		return v4.String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// bearer refuses, with 401, a request without the token (when there is
// one). The comparison takes the same time whatever the guess.
func bearer(token string, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="breakerd-mcp"`)
			http.Error(w, "breakerd-mcp: a bearer token is required", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// reserve takes a place for a session about to start by client, if
// fewer than o.MaxSessions are open or starting, and fewer than its share
// are the client's. A refusal comes with its reason (a metric label).
func (g *Gateway) reserve(o HTTPOptions, client string) (reason string, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.sessions)+g.starting >= o.MaxSessions {
		return refusedMaxSessions, fmt.Errorf("too many sessions (%d)", o.MaxSessions)
	}
	if o.MaxSessionsPerClient > 0 && g.heldLocked(client) >= o.MaxSessionsPerClient {
		return refusedClientShare, fmt.Errorf("this client holds its share of sessions (%d)", o.MaxSessionsPerClient)
	}
	g.starting++
	g.startingBy[client]++
	return "", nil
}

// heldLocked is the number of sessions client holds, open or starting.
// The caller holds g.mu.
func (g *Gateway) heldLocked(client string) int {
	n := g.startingBy[client]
	for s := range g.sessions {
		if s.client == client {
			n++
		}
	}
	return n
}

// unstartLocked gives back one of client's starting places. The caller
// holds g.mu.
func (g *Gateway) unstartLocked(client string) {
	g.starting--
	if g.startingBy[client]--; g.startingBy[client] <= 0 {
		delete(g.startingBy, client)
	}
}

// admit ends a reservation when the request that took it is first
// answered, before the agent can send its next request: a session the SDK
// keeps (initialized, with an id) joins the gateway, which takes over the
// place until the session closes, idle or not; otherwise (a failed
// initialize, which the SDK closes, or a sessionless request) the place is
// given back.
func (g *Gateway) admit(l *lazySession) {
	s := l.s // built, if at all, by the SDK within the request, before it answers
	if s != nil {
		for ss := range s.srv.Sessions() {
			if ss.ID() != "" && ss.InitializeParams() != nil {
				s.join(ss)
			}
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if s == nil {
		g.unstartLocked(l.client)
		return
	}
	g.unreserveLocked(s)
}

// firstWrite calls first once, before the response's first byte or
// flush.
type firstWrite struct {
	http.ResponseWriter
	once  sync.Once
	first func()
}

func (w *firstWrite) WriteHeader(code int) {
	w.once.Do(w.first)
	w.ResponseWriter.WriteHeader(code)
}

func (w *firstWrite) Write(b []byte) (int, error) {
	w.once.Do(w.first)
	return w.ResponseWriter.Write(b)
}

func (w *firstWrite) Flush() {
	w.once.Do(w.first)
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection.
func (w *firstWrite) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// unreserveLocked gives back s's reserved place, if it holds one. The
// caller holds g.mu.
func (g *Gateway) unreserveLocked(s *session) {
	if s.reserved {
		s.reserved = false
		g.unstartLocked(s.client)
	}
}

type lazyKey struct{}

// lazySession builds a session's server on first use.
type lazySession struct {
	client string // the request's clientKey
	once   sync.Once
	s      *session
}

func (l *lazySession) get(g *Gateway) *mcp.Server {
	l.once.Do(func() {
		l.s = g.newSession()
		g.mu.Lock()
		l.s.reserved, l.s.client = true, l.client // the request's place, until admit
		g.mu.Unlock()
	})
	return l.s.srv
}
