package mcpgw

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc"

	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// httpUpstream serves the fake over Streamable HTTP; while status is
// non-zero it answers every tools/call POST with that status (and
// Retry-After, when set) before the MCP server sees it.
type httpUpstream struct {
	*fakeUpstream
	srv        *httptest.Server
	status     atomic.Int64
	retryAfter atomic.Value // string
	rejected   atomic.Int64
}

func newHTTPUpstream(t *testing.T) *httpUpstream {
	u := &httpUpstream{fakeUpstream: newFakeUpstream()}
	u.retryAfter.Store("")
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return u.fakeUpstream.srv }, nil)
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if st := u.status.Load(); st != 0 && bytes.Contains(body, []byte(`"tools/call"`)) {
			u.rejected.Add(1)
			if ra := u.retryAfter.Load().(string); ra != "" {
				w.Header().Set("Retry-After", ra)
			}
			http.Error(w, "slow down", int(st))
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// TestStreamableHTTPUpstreamStatuses: a 429 with Retry-After and a 503
// from a Streamable HTTP upstream reach the breaker as RATE_LIMITED (with
// the Retry-After) and SERVER_ERROR, and the agent sees an isError result
// naming the status.
func TestStreamableHTTPUpstreamStatuses(t *testing.T) {
	t.Parallel()
	b := testredis.Mini(t)
	d := daemontest.Start(t, b, noJitter())
	up := newHTTPUpstream(t)
	g := startGateway(t, b, dialDaemon(t, d), "gw-1", Config{Upstreams: []Upstream{{Name: "web", URL: up.srv.URL}}})
	a := connectAgent(t, g)
	breaker := b.Prefix + "mcp:web:lookup"

	if res := a.call(t, "lookup"); res.IsError {
		t.Fatalf("lookup through a healthy HTTP upstream: %s", text(res))
	}

	up.status.Store(http.StatusServiceUnavailable)
	res := a.call(t, "lookup")
	if !res.IsError || !strings.Contains(text(res), "503") {
		t.Errorf("lookup on a 503 = isError %v %q, want isError naming 503", res.IsError, text(res))
	}
	st, err := d.Store.Get(context.Background(), breaker)
	if err != nil {
		t.Fatal(err)
	}
	if st.GetFailures() != 1 || !strings.Contains(st.GetLastFailureMessage(), "503") {
		t.Errorf("breaker after a 503: %d failures, last message %q; want 1 naming 503", st.GetFailures(), st.GetLastFailureMessage())
	}

	// A Retry-After beyond the call's timeout (30s) is a counted 429.
	up.status.Store(http.StatusTooManyRequests)
	up.retryAfter.Store("120")
	res = a.call(t, "lookup")
	if !res.IsError || !strings.Contains(text(res), "429") {
		t.Errorf("lookup on a 429 = isError %v %q, want isError naming 429", res.IsError, text(res))
	}
	st, err = d.Store.Get(context.Background(), breaker)
	if err != nil {
		t.Fatal(err)
	}
	if st.GetFailures() != 2 || !strings.Contains(st.GetLastFailure(), "429") {
		t.Errorf("breaker after a 429 with Retry-After 120: %d failures, last %q; want 2 naming 429", st.GetFailures(), st.GetLastFailure())
	}
	if got := up.rejected.Load(); got != 2 {
		t.Errorf("tools/call requests the upstream rejected = %d, want 2", got)
	}
	// The connection survived both statuses.
	up.status.Store(0)
	if res := a.call(t, "echo"); res.IsError {
		t.Errorf("echo after the statuses: %s", text(res))
	}
}

// TestServeHTTPAndHealth: agents reach the gateway over Streamable HTTP;
// /healthz answers 200 while breakerd answers, and 503 "degraded" once it
// is gone, while tool calls go on through pkg/client's local fallback and
// the outage is logged once.
func TestServeHTTPAndHealth(t *testing.T) {
	t.Parallel()
	b := testredis.Mini(t)
	d := daemontest.Start(t, b, noJitter())
	up := newFakeUpstream()
	var logs daemontest.Buffer
	cfg := Config{BreakerPrefix: b.Prefix + "mcp:", Upstreams: []Upstream{{Name: "fake", Transport: up.transport(t)}}}
	g, err := New(context.Background(), Options{Config: cfg, Conn: dialDaemon(t, d), WorkerID: "gw-1",
		ClientOptions: []client.Option{client.WithAllowBudget(testBudget)}, Log: newLogger(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; g.Close() })
	srv := httptest.NewServer(g.Handler(HTTPOptions{}))
	t.Cleanup(srv.Close)

	health := func() (int, Health) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var h Health
		if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, h
	}
	daemontest.Eventually(t, "health ok", func() bool { code, h := health(); return code == http.StatusOK && h.Breakerd == "ok" })

	c := mcp.NewClient(&mcp.Implementation{Name: "agent"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp"}, nil)
	if err != nil {
		t.Fatalf("connect over HTTP: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	a := &agent{cs: cs}
	if got := sorted(a.tools(t)); strings.Join(got, ",") != "breakerd_status,echo,lookup" {
		t.Errorf("tools/list over HTTP = %v", got)
	}
	if _, h := health(); h.Sessions != 1 {
		t.Errorf("health sessions = %d, want 1", h.Sessions)
	}

	d.Stop()
	daemontest.Eventually(t, "health degraded", func() bool {
		code, h := health()
		return code == http.StatusServiceUnavailable && h.Breakerd == "unreachable"
	})
	for range 3 {
		if res := a.call(t, "echo"); res.IsError {
			t.Fatalf("echo with breakerd down: %s", text(res))
		}
	}
	if got := up.echoes.Load(); got != 3 {
		t.Errorf("upstream echoes with breakerd down = %d, want 3 (the fallback lets calls through)", got)
	}
	if n := strings.Count(logs.String(), "breakerd unreachable"); n != 1 {
		t.Errorf("log says breakerd unreachable %d times, want once:\n%s", n, logs.String())
	}
	_ = cs.Close()
	daemontest.Eventually(t, "the closed session to leave", func() bool { return g.Health().Sessions == 0 })
}

// TestWorkerPerSession: a lone gateway reports as one worker, with or
// without worker_id: session, and so never trips a breaker under
// min_workers 2 (it becomes the suspect worker).
func TestWorkerPerSession(t *testing.T) {
	t.Parallel()
	for _, workerID := range []string{"", WorkerSession} {
		t.Run("worker_id="+workerID, func(t *testing.T) {
			b := testredis.Mini(t)
			d := daemontest.Start(t, b, noJitter())
			st := failFromTwoSessions(t, b, dialDaemon(t, d), d, workerID)
			if st.GetState() != pb.State_STATE_CLOSED || st.GetSuspectWorker() != "gw-1" {
				t.Errorf("after 5 failures from two sessions: %v, suspect %q; want closed, the lone gateway gw-1 suspect",
					st.GetState(), st.GetSuspectWorker())
			}
		})
	}
}

// failFromTwoSessions makes 5 failing calls from two sessions of a
// gateway gw-1 (with Config.WorkerID workerID) on conn, and returns the
// breaker's state.
func failFromTwoSessions(t *testing.T, b *testredis.Backend, conn grpc.ClientConnInterface, d *daemontest.Daemon, workerID string) *pb.BreakerState {
	t.Helper()
	up := newFakeUpstream()
	up.failing.Store(true)
	g := startGateway(t, b, conn, "gw-1", Config{WorkerID: workerID, Upstreams: []Upstream{{Name: "fake", Transport: up.transport(t)}}})
	a1, a2 := connectAgent(t, g), connectAgent(t, g)
	for i := range 5 {
		a := a1
		if i%2 == 1 {
			a = a2
		}
		if res := a.call(t, "lookup"); !res.IsError {
			t.Fatalf("lookup on a failing upstream = %q, want isError", text(res))
		}
	}
	st, err := d.Store.Get(context.Background(), b.Prefix+"mcp:fake:lookup")
	if err != nil {
		t.Fatal(err)
	}
	return st
}
