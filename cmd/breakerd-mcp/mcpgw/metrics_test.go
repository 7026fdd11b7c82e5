package mcpgw

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// hangingUpstream is an upstream whose one tool, hang, answers only when
// its call is cancelled: a call to it ends at the gateway's timeout.
func hangingUpstream(t *testing.T) func() mcp.Transport {
	srv := mcp.NewServer(&mcp.Implementation{Name: "hanging"}, nil)
	srv.AddTool(&mcp.Tool{Name: "hang", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		})
	return func() mcp.Transport {
		c, s := mcp.NewInMemoryTransports()
		ss, err := srv.Connect(context.Background(), s, nil)
		if err != nil {
			t.Errorf("hanging upstream: connect: %v", err)
			return c
		}
		t.Cleanup(func() { _ = ss.Close() })
		return c
	}
}

// The gateway counts each call by upstream and result, the tool-list
// changes it sends, and its sessions; the counts match what the upstreams
// saw.
func TestMetricsCountCallsDenialsAndSessions(t *testing.T) {
	t.Parallel()
	b := testredis.Mini(t)
	d := daemontest.Start(t, b, noJitter())
	up := newFakeUpstream()
	conn := dialDaemon(t, d)
	reg := prometheus.NewRegistry()
	g := startGatewayWith(t, b, Options{Conn: conn, WorkerID: "gw-1", Registerer: reg, Config: Config{Upstreams: []Upstream{
		{Name: "fake", Transport: up.transport(t)},
		{Name: "slow", Transport: hangingUpstream(t), Timeout: yamlDuration(time.Second)}, // its list of tools answers within it on a busy host
	}}})
	a := connectAgent(t, g)

	a.call(t, "echo")
	up.failing.Store(true)
	if res := a.call(t, "lookup"); !res.IsError {
		t.Fatalf("lookup while failing: isError false")
	}
	if res := a.call(t, "hang"); !res.IsError || !strings.Contains(text(res), "timeout") {
		t.Fatalf("hang = %s, want the gateway's timeout", text(res))
	}
	if _, err := pb.NewBreakerServiceClient(conn).Force(context.Background(), &pb.ForceRequest{
		Breaker: b.Prefix + "mcp:fake:lookup", Mode: pb.ForceMode_FORCE_MODE_OPEN, Reason: "maintenance", Operator: "ana"}); err != nil {
		t.Fatal(err)
	}
	a.waitChanged(t, "the session")
	denial(t, a.call(t, "lookup"))

	want := `
# HELP breakerd_mcp_tool_calls_total Upstream tool calls the gateway answered, by upstream and result: ok, is_error (the upstream answered isError), denied (breakerd denied it; the upstream was not called), upstream_error (unreachable, or no answer in time).
# TYPE breakerd_mcp_tool_calls_total counter
breakerd_mcp_tool_calls_total{result="denied",upstream="fake"} 1
breakerd_mcp_tool_calls_total{result="denied",upstream="slow"} 0
breakerd_mcp_tool_calls_total{result="is_error",upstream="fake"} 1
breakerd_mcp_tool_calls_total{result="is_error",upstream="slow"} 0
breakerd_mcp_tool_calls_total{result="ok",upstream="fake"} 1
breakerd_mcp_tool_calls_total{result="ok",upstream="slow"} 0
breakerd_mcp_tool_calls_total{result="upstream_error",upstream="fake"} 0
breakerd_mcp_tool_calls_total{result="upstream_error",upstream="slow"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "breakerd_mcp_tool_calls_total"); err != nil {
		t.Error(err)
	}
	if got, want := up.lookups.Load()+up.echoes.Load(), int64(2); got != want {
		t.Errorf("calls that reached the fake upstream = %d, want %d (ok + is_error)", got, want)
	}
	for name, want := range map[string]float64{
		"breakerd_mcp_tool_list_changes_total": 1,
		"breakerd_mcp_sessions_total":          1,
		"breakerd_mcp_sessions":                1,
		"breakerd_mcp_degraded":                0,
	} {
		if got := gathered(t, reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("promlint: %v %v", problems, err)
	}
}

// gathered is the value of a family's only series.
func gathered(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			m := f.GetMetric()[0]
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no single series %s", name)
	return 0
}
