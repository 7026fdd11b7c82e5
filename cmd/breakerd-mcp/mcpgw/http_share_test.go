package mcpgw

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/breakerd/breakerd/internal/tests/daemontest"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// dialFrom opens an agent session over HTTP from the local address ip
// (127.0.0.2 is another client than 127.0.0.1), with extra headers.
func dialFrom(endpoint, ip string, header http.Header) (*mcp.ClientSession, error) {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	tr := &http.Transport{DialContext: d.DialContext}
	hc := &http.Client{Transport: headerTransport{header, tr}}
	return mcp.NewClient(&mcp.Implementation{Name: "agent"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc}, nil)
}

// headerTransport adds headers to every request.
type headerTransport struct {
	header http.Header
	next   http.RoundTripper
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.header {
		r.Header[k] = v
	}
	return h.next.RoundTrip(r)
}

// initialize POSTs an MCP initialize request to url from 127.0.0.1 (with
// Origin, when not empty) and returns the answer's status.
func initialize(t *testing.T, url, origin string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`))
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestSecurityOneClientHoldsItsShareOfSessions: with the default bounds,
// one client address opening sessions without end holds its share and no
// more (the next is answered 503 and starts nothing); another client
// still opens a session and calls a tool, and so does the first once one
// of its sessions closes. N10.
func TestSecurityOneClientHoldsItsShareOfSessions(t *testing.T) {
	t.Parallel()
	g := fakeGateway(t)
	url := httpGateway(t, g, HTTPOptions{})
	var held []*mcp.ClientSession
	t.Cleanup(func() {
		for _, cs := range held {
			_ = cs.Close()
		}
	})
	for i := range DefaultMaxSessionsPerClient {
		cs, err := dialFrom(url, "127.0.0.1", nil)
		if err != nil {
			t.Fatalf("session %d within the share: %v", i+1, err)
		}
		held = append(held, cs)
	}
	if code := initialize(t, url, ""); code != http.StatusServiceUnavailable {
		t.Errorf("initialize past the client's share = %d, want 503", code)
	}
	if h := g.Health(); h.Sessions != DefaultMaxSessionsPerClient {
		t.Errorf("sessions = %d, want the share %d", h.Sessions, DefaultMaxSessionsPerClient)
	}
	if n := testutil.ToFloat64(g.m.refused.WithLabelValues(refusedClientShare)); n != 1 {
		t.Errorf("sessions refused for the client's share = %v, want 1", n)
	}
	other, err := dialFrom(url, "127.0.0.2", nil)
	if err != nil {
		t.Fatalf("another client's session while the first holds its share: %v", err)
	}
	defer other.Close()
	if res, err := other.CallTool(context.Background(), &mcp.CallToolParams{Name: "lookup"}); err != nil || res.IsError {
		t.Errorf("another client's call: %v %v", res, err)
	}
	_ = held[0].Close()
	daemontest.Eventually(t, "the closed session to leave", func() bool { return g.Health().Sessions == DefaultMaxSessionsPerClient })
	cs, err := dialFrom(url, "127.0.0.1", nil)
	if err != nil {
		t.Fatalf("the first client's session after one of its own closed: %v", err)
	}
	held[0] = cs
}

// TestSecurityForeignOriginIsRefused: a request to /mcp from a browser
// page of another origin (a DNS-rebinding page included) is refused 403
// and starts no session; requests without Origin and from loopback
// origins are served. N10.
func TestSecurityForeignOriginIsRefused(t *testing.T) {
	t.Parallel()
	g := fakeGateway(t)
	url := httpGateway(t, g, HTTPOptions{})
	for _, origin := range []string{"http://evil.example", "http://evil.example:80", "null", "http://127.0.0.1.evil.example"} {
		if code := initialize(t, url, origin); code != http.StatusForbidden {
			t.Errorf("POST /mcp with Origin %q = %d, want 403", origin, code)
		}
	}
	if n := testutil.ToFloat64(g.m.refused.WithLabelValues(refusedOrigin)); n != 4 {
		t.Errorf("requests refused for their origin = %v, want 4", n)
	}
	for _, origin := range []string{"", "http://localhost:6274", "http://127.0.0.1:3000", "https://[::1]"} {
		h := http.Header{}
		if origin != "" {
			h.Set("Origin", origin)
		}
		cs, err := dialFrom(url, "127.0.0.1", h)
		if err != nil {
			t.Errorf("session with Origin %q: %v, want served", origin, err)
			continue
		}
		_ = cs.Close()
	}
	daemontest.Eventually(t, "the served sessions to close", func() bool { return g.Health().Sessions == 0 })
}

// TestAllowedOrigins: an origin given in AllowedOrigins (any case) is
// served; others still are not.
func TestAllowedOrigins(t *testing.T) {
	t.Parallel()
	g := fakeGateway(t)
	url := httpGateway(t, g, HTTPOptions{AllowedOrigins: []string{"https://Agent.example.com"}})
	for origin, want := range map[string]bool{"https://agent.example.com": true, "https://agent.example.com:8443": false, "http://agent.example.com": false} {
		cs, err := dialFrom(url, "127.0.0.1", http.Header{"Origin": {origin}})
		if (err == nil) != want {
			t.Errorf("session with Origin %q: %v, want served %v", origin, err, want)
		}
		if err == nil {
			_ = cs.Close()
		}
	}
	for _, bad := range []string{"agent.example.com", "https://agent.example.com/", "ftp://x", "https://a.example/path"} {
		if CheckOrigin(bad) == nil {
			t.Errorf("CheckOrigin(%q) = nil, want an error", bad)
		}
	}
}

// TestClientKey: a client is an IPv4 address (an IPv4-mapped IPv6 one
// too) or an IPv6 /64.
func TestClientKey(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"192.0.2.7:5000":             "192.0.2.7",
		"[::ffff:192.0.2.7]:5000":    "192.0.2.7",
		"[2001:db8:1:2:aaaa::1]:443": "2001:db8:1:2::/64",
		"[2001:db8:1:2:bbbb::9]:80":  "2001:db8:1:2::/64",
		"[2001:db8:1:3::1]:80":       "2001:db8:1:3::/64",
		"not-an-address":             "not-an-address",
	} {
		if got := clientKey(addr); got != want {
			t.Errorf("clientKey(%q) = %q, want %q", addr, got, want)
		}
	}
}
