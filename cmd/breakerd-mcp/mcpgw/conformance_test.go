package mcpgw

import (
	"context"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/breakerd/breakerd/conformance"
	"github.com/breakerd/breakerd/pkg/client"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestConformanceRenderThroughTheGateway holds what a model reads through
// the gateway to conformance/render.json, byte for byte: for each denial
// breakerd sends (open, probe in flight, forced with and without an end,
// paused, suspect, parent open, degraded), the text of the denied
// tools/call's result and the notice in breakerd_status's result, with
// the case's denial answered by a fake breakerd and the gateway's clock
// at the case's now. Cases the gateway cannot meet are left out: the
// local fallback's own denials (the clients' suites hold them) and a
// notice naming one tool twice (a session removes a tool once).
func TestConformanceRenderThroughTheGateway(t *testing.T) {
	t.Parallel()
	cases, err := conformance.ReadRender()
	if err != nil {
		t.Fatal(err)
	}
	notices := map[string]conformance.RenderCase{}
	for _, c := range cases {
		if c.Template == "notice" {
			notices[strings.TrimPrefix(c.Name, "notice: ")] = c
		}
	}
	held := map[string]bool{}
	for _, c := range cases {
		if c.Template != "tool_result" || c.Fallback != "" {
			continue
		}
		held[c.Input.Status] = true
		t.Run(c.Name, func(t *testing.T) {
			a := connectAgent(t, conformanceGateway(t, c))
			if res := a.call(t, c.Input.Tool); !res.IsError || text(res) != c.Want {
				t.Errorf("tools/call %s: isError %v\n got %s\nwant %s", c.Input.Tool, res.IsError, text(res), c.Want)
			}
			n, ok := notices[c.Name]
			if !ok {
				return
			}
			var st Status
			if err := remarshal(a.call(t, StatusTool).StructuredContent, &st); err != nil {
				t.Fatal(err)
			}
			if st.Notice != n.Want {
				t.Errorf("breakerd_status's notice:\n got %q\nwant %q", st.Notice, n.Want)
			}
		})
	}
	for _, s := range []string{"circuit_open", "probe_in_flight", "forced_open", "paused", "worker_isolated", "parent_open"} {
		if !held[s] {
			t.Errorf("conformance/render.json holds no %s case for the gateway", s)
		}
	}
}

// conformanceGateway is a gateway in front of one upstream serving c's
// tool, on a fake breakerd that denies every Allow with c's denial and
// reads every breaker as closed, its clients' clock at c's now.
func conformanceGateway(t *testing.T, c conformance.RenderCase) *Gateway {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterBreakerServiceServer(srv, &denyingBreakerd{c: c})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })

	up := mcp.NewServer(&mcp.Implementation{Name: "conformance"}, nil)
	up.AddTool(&mcp.Tool{Name: c.Input.Tool, InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			t.Errorf("the upstream's %s was called through a denial", c.Input.Tool)
			return &mcp.CallToolResult{}, nil
		})
	transport := func() mcp.Transport {
		ct, st := mcp.NewInMemoryTransports()
		ss, err := up.Connect(context.Background(), st, nil)
		if err != nil {
			t.Errorf("upstream: connect: %v", err)
			return ct
		}
		t.Cleanup(func() { _ = ss.Close() })
		return ct
	}
	return runGateway(t, Options{
		Config: Config{Upstreams: []Upstream{{Name: "up", Transport: transport}}}, Conn: conn, WorkerID: "gw",
		ClientOptions: []client.Option{client.WithClock(fixedClock(time.UnixMilli(c.NowMs))), client.WithAllowBudget(testBudget)},
	})
}

// fixedClock is a clock that stands still.
type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }

// denyingBreakerd is a fake breakerd: every Allow is denied with its
// case's denial, as breakerd sends it (the state's clock at the case's
// now, its alternatives the policy's); every breaker reads as closed;
// Watch holds its stream open with no event; savings reports are taken.
type denyingBreakerd struct {
	pb.UnimplementedBreakerServiceServer
	c conformance.RenderCase
}

// decisions are the denials' decisions by status word.
var decisions = map[string]pb.Decision{
	"circuit_open": pb.Decision_DECISION_DENIED_OPEN, "probe_in_flight": pb.Decision_DECISION_DENIED_PROBE_IN_FLIGHT,
	"forced_open": pb.Decision_DECISION_DENIED_FORCED_OPEN, "paused": pb.Decision_DECISION_DENIED_PAUSED,
	"worker_isolated": pb.Decision_DECISION_DENIED_SUSPECT_WORKER, "parent_open": pb.Decision_DECISION_DENIED_PARENT_OPEN,
}

var scopes = map[string]pb.DenialScope{"breaker": pb.DenialScope_DENIAL_SCOPE_BREAKER,
	"worker": pb.DenialScope_DENIAL_SCOPE_WORKER, "parent": pb.DenialScope_DENIAL_SCOPE_PARENT}

func (f *denyingBreakerd) Allow(_ context.Context, req *pb.AllowRequest) (*pb.AllowResponse, error) {
	in, now := f.c.Input, f.c.NowMs
	d := &pb.Denial{Decision: decisions[in.Status], Scope: scopes[in.Scope], Forced: in.Forced, Reason: in.Reason,
		Status: in.Status, MayReturnAtMs: in.MayReturnAtMs, DenyUntilMs: math.MaxInt64}
	res := &pb.AllowResponse{Decision: d.GetDecision(), Denial: d, Reason: in.Reason, Degraded: in.Degraded,
		State: &pb.BreakerState{Breaker: req.GetBreaker(), State: pb.State_STATE_OPEN, AsOfMs: now, Alternatives: in.Alternatives}}
	if in.MayReturnAtMs > now {
		d.DenyUntilMs, res.RetryAfterMs = in.MayReturnAtMs, in.MayReturnAtMs-now
	}
	if in.Scope == "parent" {
		res.Scope = "vendor"
	}
	return res, nil
}

func (f *denyingBreakerd) BatchGet(_ context.Context, req *pb.BatchGetRequest) (*pb.BatchGetResponse, error) {
	out := &pb.BatchGetResponse{}
	for _, n := range req.GetBreakers() {
		out.States = append(out.States, &pb.BreakerState{Breaker: n, State: pb.State_STATE_CLOSED, AsOfMs: f.c.NowMs})
	}
	return out, nil
}

func (f *denyingBreakerd) Watch(_ *pb.WatchRequest, stream grpc.ServerStreamingServer[pb.WatchResponse]) error {
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func (f *denyingBreakerd) ReportSavings(context.Context, *pb.ReportSavingsRequest) (*pb.ReportSavingsResponse, error) {
	return &pb.ReportSavingsResponse{}, nil
}
