package mcpgw

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Handler serves downstream sessions over Streamable HTTP at /mcp and the
// gateway's health at /healthz (JSON Health; status 200 when "ok", 503
// while breakerd is unreachable and calls are judged by the fallback).
func (g *Gateway) Handler() http.Handler {
	base := mcp.NewServer(&mcp.Implementation{Name: "breakerd-mcp", Version: g.o.Version}, nil)
	streamable := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		if l, ok := r.Context().Value(lazyKey{}).(*lazySession); ok {
			return l.get(g)
		}
		return base
	}, nil)
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		h := g.Health()
		w.Header().Set("Content-Type", "application/json")
		if h.Status != "ok" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(h)
	})
	mux.Handle("/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The SDK asks for a server on every request (once only to read
		// its protocol versions). Only a POST without a session id can
		// start a session: give it one lazily built session server, the
		// same for every ask within the request.
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" {
			r = r.WithContext(context.WithValue(r.Context(), lazyKey{}, &lazySession{}))
		}
		streamable.ServeHTTP(w, r)
	}))
	return mux
}

type lazyKey struct{}

// lazySession builds a session's server on first use.
type lazySession struct {
	once sync.Once
	srv  *mcp.Server
}

func (l *lazySession) get(g *Gateway) *mcp.Server {
	l.once.Do(func() { l.srv = g.newSession().srv })
	return l.srv
}
