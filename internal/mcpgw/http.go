package mcpgw

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// DefaultMaxSessions bounds the downstream sessions served over HTTP at
// once when HTTPOptions sets no bound.
const DefaultMaxSessions = 256

// DefaultSessionIdleTimeout closes an HTTP session that sent no request
// for this long, when HTTPOptions sets no timeout.
const DefaultSessionIdleTimeout = 30 * time.Minute

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
	mux.Handle("/mcp", bearer(o.Token, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The SDK asks for a server on every request (once only to read
		// its protocol versions). Only a POST without a session id can
		// start a session: give it one lazily built session server, the
		// same for every ask within the request.
		if r.Method != http.MethodPost || r.Header.Get("Mcp-Session-Id") != "" {
			streamable.ServeHTTP(w, r)
			return
		}
		if !g.reserve(o.MaxSessions) { // given back, or taken over by the session, in admit
			http.Error(w, "breakerd-mcp: too many sessions; close one or retry later", http.StatusServiceUnavailable)
			return
		}
		l := &lazySession{}
		fw := &firstWrite{ResponseWriter: w, first: func() { g.admit(l) }}
		streamable.ServeHTTP(fw, r.WithContext(context.WithValue(r.Context(), lazyKey{}, l)))
		fw.once.Do(fw.first)
		if l.s != nil && !l.s.isJoined() {
			l.s.close() // no session kept: a failed or sessionless request
		}
	})))
	return mux
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

// reserve takes a place for a session about to start, if fewer than max
// are open or starting.
func (g *Gateway) reserve(max int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.sessions)+g.starting >= max {
		return false
	}
	g.starting++
	return true
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
		g.starting--
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
		g.starting--
	}
}

type lazyKey struct{}

// lazySession builds a session's server on first use.
type lazySession struct {
	once sync.Once
	s    *session
}

func (l *lazySession) get(g *Gateway) *mcp.Server {
	l.once.Do(func() {
		l.s = g.newSession()
		g.mu.Lock()
		l.s.reserved = true // the request's place, until admit
		g.mu.Unlock()
	})
	return l.s.srv
}
