package httpapi

import (
	"embed"
	"fmt"
	"io/fs"
	"net/http"

	"connectrpc.com/connect"
)

// uiFiles are the status page's files, served at /ui/: a page, a script
// and a style sheet, nothing fetched from elsewhere, so the page works
// offline. They hold no state: the script reads everything through the
// API (GET /v1/watch, the RPCs) with the token the operator types in, as
// docs/security.md#the-status-page describes.
//
//go:embed ui
var uiFiles embed.FS

// uiPolicy is the status page's Content-Security-Policy: its own script
// and style sheet, calls to its own origin, nothing inline, no frames, no
// forms posted anywhere. Breaker names and reasons are set as text, never
// as markup; the policy is the second wall should one ever be read as
// markup.
const uiPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// ui serves the status page's files under /ui/ (and /ui, redirected
// there). No token is needed for them, as none is for a login page: they
// carry no data. Every call the page makes goes through the API's checks.
func ui() (http.Handler, error) {
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		return nil, fmt.Errorf("httpapi: the status page's files: %w", err)
	}
	files := http.StripPrefix("/ui/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, connect.CodeUnimplemented, "method: /ui is GET, got "+r.Method)
			return
		}
		if r.URL.Path == "/ui" {
			http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", uiPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	}), nil
}
