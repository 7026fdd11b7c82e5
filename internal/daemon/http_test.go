package daemon

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testtls"
)

// TestRunServesHTTPWithTheGRPCListenersTrust runs the production assembly
// with --tokens, TLS and --http-listen: the HTTP/JSON API answers only
// over TLS, refuses an unknown token and serves a worker's; the status
// page's files are served behind the same listener limits.
func TestRunServesHTTPWithTheGRPCListenersTrust(t *testing.T) {
	t.Parallel()
	pki := testtls.New(t)
	tokens := filepath.Join(t.TempDir(), "tokens.yaml")
	const wToken = "worker-token-0123456789"
	if err := os.WriteFile(tokens, []byte("tokens:\n  - {name: w1, role: worker, token: "+wToken+", workers: [w1]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Port 0 for both: RunListeners reports the ports the system chose.
	cfg := Config{Listen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0", EventsMaxLen: 100, EventRetention: time.Hour,
		ShutdownTimeout: time.Second, HealthInterval: time.Second, LogFormat: "text",
		TokensFile: tokens, TLSCert: pki.ServerCertFile, TLSKey: pki.ServerKeyFile,
		RedisDecisionTimeout: store.LaxDecisionTimeout} // on a busy machine a healthy Redis can be slower than the default bound
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan Listeners, 1), make(chan error, 1)
	go func() {
		done <- RunListeners(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), func(l Listeners) { ready <- l })
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	var httpAddr string
	select {
	case l := <-ready:
		httpAddr = l.HTTP.String()
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	tlsCfg := &tls.Config{RootCAs: pki.Pool, ServerName: "127.0.0.1"}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	allow := func(token string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, "https://"+httpAddr+"/breakerd.v1.BreakerService/Allow", strings.NewReader(`{"breaker":"x","worker_id":"w1"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := allow(wToken); code != http.StatusOK || !strings.Contains(body, `"decision":"DECISION_ALLOWED"`) {
		t.Errorf("Allow over HTTPS with a worker's token = %d %s, want 200 allowed", code, body)
	}
	if code, _ := allow("unknown-token-0123456789"); code != http.StatusUnauthorized {
		t.Errorf("Allow with an unknown token = %d, want 401", code)
	}
	// The status page's files need no token, and pass the listener limits
	// as every request does: a header list past --max-header-bytes is
	// refused.
	page := func(header string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "https://"+httpAddr+"/ui/", nil)
		req.Header.Set("X-Pad", header)
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode, res.Header.Get("Content-Security-Policy")
	}
	if code, csp := page("x"); code != http.StatusOK || !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("GET /ui/ without a token = %d (CSP %q), want 200 with the page's policy", code, csp)
	}
	if code, _ := page(strings.Repeat("a", 64<<10)); code != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("GET /ui/ with 64 KiB of headers = %d, want 431", code)
	}
	if res, err := http.Get("http://" + httpAddr + "/healthz"); err == nil {
		res.Body.Close()
		if res.StatusCode < 400 {
			t.Errorf("plain HTTP on the TLS listener answered %d, want a refusal", res.StatusCode)
		}
	}
}
