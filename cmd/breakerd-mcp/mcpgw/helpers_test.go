package mcpgw

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	"github.com/breakerd/breakerd/internal/yamlfile"
	"github.com/breakerd/breakerd/pkg/client"
)

// fakeUpstream is an upstream MCP server with two tools: lookup, which
// fails (an isError result) while failing is set, and echo, which always
// works. It counts the calls that reach each tool.
type fakeUpstream struct {
	srv     *mcp.Server
	failing atomic.Bool
	lookups atomic.Int64
	echoes  atomic.Int64
}

func newFakeUpstream() *fakeUpstream {
	f := &fakeUpstream{srv: mcp.NewServer(&mcp.Implementation{Name: "fake"}, nil)}
	schema := map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}}
	f.srv.AddTool(&mcp.Tool{Name: "lookup", Description: "looks things up", InputSchema: schema},
		func(ctx context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			f.lookups.Add(1)
			if f.failing.Load() {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "HTTP 503 from the lookup service"}}}, nil
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "found: " + string(r.Params.Arguments)}}}, nil
		})
	f.srv.AddTool(&mcp.Tool{Name: "echo", Description: "echoes", InputSchema: schema},
		func(ctx context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			f.echoes.Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(r.Params.Arguments)}}}, nil
		})
	return f
}

// transport returns a new in-memory connection to the fake for each call,
// as a command upstream is started again after it exits.
func (f *fakeUpstream) transport(t *testing.T) func() mcp.Transport {
	return func() mcp.Transport {
		c, s := mcp.NewInMemoryTransports()
		ss, err := f.srv.Connect(context.Background(), s, nil)
		if err != nil {
			t.Errorf("fake upstream: connect: %v", err)
			return c
		}
		t.Cleanup(func() { _ = ss.Close() })
		return c
	}
}

// noJitter is a daemon whose breakers use the default policy with no
// jitter, so a cooldown is exactly CooldownBase.
func noJitter() store.Options {
	p := policy.Default()
	p.Jitter = 0
	p.Alternatives = []string{"ask_a_human"}
	return store.Options{Policies: policy.NewSet(p)}
}

// testBudget is the Allow budget: a loopback RPC on a loaded machine can
// take longer than 50ms, and these tests mean to see breakerd's answers.
const testBudget = 10 * time.Second

// dialDaemon returns a gRPC connection to d, closed when t ends.
func dialDaemon(t *testing.T, d *daemontest.Daemon) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(d.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// startGateway builds a gateway on conn with its Watch loop running, and
// waits until the loop has subscribed.
func startGateway(t *testing.T, b *testredis.Backend, conn grpc.ClientConnInterface, worker string, cfg Config) *Gateway {
	t.Helper()
	return startGatewayWith(t, b, Options{Config: cfg, Conn: conn, WorkerID: worker})
}

// startGatewayWith is startGateway with every option: the test's Allow
// budget and breaker prefix are added.
func startGatewayWith(t *testing.T, b *testredis.Backend, o Options) *Gateway {
	t.Helper()
	if o.Config.BreakerPrefix == "" {
		o.Config.BreakerPrefix = b.Prefix + "mcp:"
	}
	o.ClientOptions = append(o.ClientOptions, client.WithAllowBudget(testBudget))
	return runGateway(t, o)
}

// runGateway builds a gateway with o, runs its Watch loop until t ends,
// and waits until the loop has subscribed.
func runGateway(t *testing.T, o Options) *Gateway {
	t.Helper()
	g := launchGateway(t, o)
	daemontest.Eventually(t, "the gateway's Watch subscription", func() bool { return g.Health().Breakerd == "ok" })
	return g
}

// launchGateway builds a gateway with o and runs its Watch loop until t
// ends.
func launchGateway(t *testing.T, o Options) *Gateway {
	t.Helper()
	g, err := New(context.Background(), o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; g.Close() })
	return g
}

// agent is one downstream MCP session, through the SDK's own client.
type agent struct {
	cs      *mcp.ClientSession
	changed chan struct{} // one per notifications/tools/list_changed
}

func connectAgent(t *testing.T, g *Gateway) *agent {
	t.Helper()
	a := &agent{changed: make(chan struct{}, 64)}
	c := mcp.NewClient(&mcp.Implementation{Name: "agent"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { a.changed <- struct{}{} },
	})
	ct, st := mcp.NewInMemoryTransports()
	if _, err := g.Connect(context.Background(), st); err != nil {
		t.Fatalf("gateway Connect: %v", err)
	}
	cs, err := c.Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatalf("agent Connect: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	a.cs = cs
	return a
}

// tools returns the names tools/list gives, sorted as listed.
func (a *agent) tools(t *testing.T) []string {
	t.Helper()
	res, err := a.cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatalf("ListTools: %v", err)
	}
	var out []string
	for _, tl := range res.Tools {
		out = append(out, tl.Name)
	}
	return out
}

func (a *agent) call(t *testing.T, tool string) *mcp.CallToolResult {
	t.Helper()
	res, err := a.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"q": "x"}})
	if err != nil {
		t.Fatalf("CallTool(%q): %v", tool, err)
	}
	return res
}

// waitChanged waits for one list_changed notification.
func (a *agent) waitChanged(t *testing.T, who string) {
	t.Helper()
	select {
	case <-a.changed:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no notifications/tools/list_changed", who)
	}
}

// text is a result's text content, joined.
func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// denial decodes a result as pkg/client's circuit_open answer.
func denial(t *testing.T, res *mcp.CallToolResult) client.Denial {
	t.Helper()
	if !res.IsError {
		t.Fatalf("result isError = false, want a denial; text %s", text(res))
	}
	var d client.Denial
	if err := json.Unmarshal([]byte(text(res)), &d); err != nil {
		t.Fatalf("result is not a denial: %v; text %s", err, text(res))
	}
	return d
}

// remarshal copies v into out through JSON.
func remarshal(v, out any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

func yamlDuration(d time.Duration) yamlfile.Duration { return yamlfile.Duration(d) }

func newLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }
