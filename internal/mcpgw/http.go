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
		if !g.reserve(o.MaxSessions) {
			http.Error(w, "breakerd-mcp: too many sessions; close one or retry later", http.StatusServiceUnavailable)
			return
		}
		l := &lazySession{}
		streamable.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), lazyKey{}, l)))
		g.settle(l)
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

// settle ends a reservation once the request that may have started a
// session is answered: a session the SDK kept joins the gateway (and
// leaves it when it closes, idle or not); one it did not keep (a failed
// initialize) is released.
func (g *Gateway) settle(l *lazySession) {
	if s := l.s; s != nil { // built, if at all, by the SDK within the request
		kept := false
		for ss := range s.srv.Sessions() {
			s.join(ss)
			kept = true
		}
		if !kept {
			s.close()
		}
	}
	g.mu.Lock()
	g.starting--
	g.mu.Unlock()
}

type lazyKey struct{}

// lazySession builds a session's server on first use.
type lazySession struct {
	once sync.Once
	s    *session
}

func (l *lazySession) get(g *Gateway) *mcp.Server {
	l.once.Do(func() { l.s = g.newSession() })
	return l.s.srv
}
