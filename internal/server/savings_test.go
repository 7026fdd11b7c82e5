package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

func TestSavingsCountsDenialsAndReportsFleetWide(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		name, parent, child := b.Breaker("sv:paid"), b.Breaker("sv:host"), b.Breaker("sv:tool")
		set, err := policy.Parse([]byte(`
breakers:
  - match: "` + name + `"
    cost_per_call: {amount: 0.25, currency: USD}
  - match: "` + child + `"
    parent: "` + parent + `"
`))
		if err != nil {
			t.Fatal(err)
		}
		d1 := daemontest.Start(t, b, store.Options{Policies: set})
		d2 := daemontest.Start(t, b, store.Options{Policies: set})
		api1, api2 := dial(t, d1, "w1").API(), dial(t, d2, "w2").API()
		ctx := context.Background()
		for _, n := range []string{name, parent} {
			if _, err := d1.Store.Force(ctx, n, pb.ForceMode_FORCE_MODE_OPEN, "savings test", 0, "op"); err != nil {
				t.Fatal(err)
			}
		}
		allow := func(api pb.BreakerServiceClient, breaker, worker string, n int) {
			t.Helper()
			for range n {
				res, err := api.Allow(ctx, &pb.AllowRequest{Breaker: breaker, WorkerId: worker})
				if err != nil || res.GetDecision() == pb.Decision_DECISION_ALLOWED {
					t.Fatalf("Allow(%q) = %v, %v; want a denial", breaker, res.GetDecision(), err)
				}
			}
		}
		allow(api1, name, "w1", 3)
		allow(api2, name, "w2", 2)
		allow(api2, child, "w2", 4) // the parent denies: counted under the parent
		// d2 writes its denials on its flush (each second in breakerd).
		if err := d2.Store.Savings().Flush(ctx); err != nil {
			t.Fatal(err)
		}
		rep, err := api2.ReportSavings(ctx, &pb.ReportSavingsRequest{WorkerId: "w2", Reports: []*pb.SavingsReport{
			{Breaker: name, LocalDenials: 6, ToolsRemoved: 1},
			{Breaker: b.Breaker("sv:never-opened"), LocalDenials: 9},
		}})
		if err != nil || rep.GetAccepted() != 1 || rep.GetIgnored() != 1 {
			t.Fatalf("ReportSavings = %v, %v; want 1 accepted, 1 ignored", rep, err)
		}
		got, err := api1.Savings(ctx, &pb.SavingsRequest{WindowMs: time.Hour.Milliseconds(), Breakers: []string{name, parent, child}})
		if err != nil {
			t.Fatal(err)
		}
		want := &pb.SavingsResponse{
			Breakers: []*pb.BreakerSavings{
				{Breaker: name, DaemonDenials: 5, ClientDenials: 6, ToolsRemoved: 1, CallsAvoided: 12, CostPerCall: 0.25, Currency: "USD", SpendAvoidedEstimate: 3},
				{Breaker: parent, DaemonDenials: 4, CallsAvoided: 4},
			},
			CallsAvoided: 16,
			Spend:        []*pb.SpendTotal{{Currency: "USD", SpendAvoidedEstimate: 3}},
		}
		if diff := cmp.Diff(want, got, protocmp.Transform(), protocmp.IgnoreFields(&pb.SavingsResponse{}, "from_ms", "to_ms")); diff != "" {
			t.Errorf("Savings (-want +got):\n%s", diff)
		}
		if span := got.GetToMs() - got.GetFromMs(); span < time.Hour.Milliseconds() || span > time.Hour.Milliseconds()+2*time.Minute.Milliseconds() {
			t.Errorf("Savings window spans %dms, want an hour rounded out to whole minutes", span)
		}
		// Every breaker in the fleet's index: the same rows.
		all, err := api2.Savings(ctx, &pb.SavingsRequest{WindowMs: time.Hour.Milliseconds()})
		if err != nil || !cmp.Equal(want.GetBreakers(), all.GetBreakers(), protocmp.Transform()) {
			t.Errorf("Savings of every breaker = %v, %v; want the rows %v", all.GetBreakers(), err, want.GetBreakers())
		}
	})
}

func TestSavingsBadInputIsInvalidArgument(t *testing.T) {
	b := testredis.Mini(t)
	d := daemontest.Start(t, b, store.Options{})
	api := dial(t, d, "w1").API()
	ctx := context.Background()
	name := b.Breaker("sv:bad")
	if _, err := d.Store.Force(ctx, name, pb.ForceMode_FORCE_MODE_OPEN, "savings test", 0, "op"); err != nil {
		t.Fatal(err)
	}
	rep := func(rs ...*pb.SavingsReport) *pb.ReportSavingsRequest {
		return &pb.ReportSavingsRequest{WorkerId: "w1", Reports: rs}
	}
	for _, c := range []struct {
		what string
		req  *pb.ReportSavingsRequest
		want string
	}{
		{"no worker", &pb.ReportSavingsRequest{Reports: []*pb.SavingsReport{{Breaker: name, LocalDenials: 1}}}, "worker_id"},
		{"empty", rep(), "reports: must hold 1 to 1024"},
		{"too many", rep(make([]*pb.SavingsReport, 1025)...), "reports: must hold 1 to 1024"},
		{"a bad name", rep(&pb.SavingsReport{Breaker: name, LocalDenials: 1}, &pb.SavingsReport{Breaker: "", LocalDenials: 1}), "reports[1].breaker"},
		{"a negative count", rep(&pb.SavingsReport{Breaker: name, LocalDenials: -1}), "reports[0].local_denials: must be between 0 and 1000000"},
		{"a count past the bound", rep(&pb.SavingsReport{Breaker: name, ToolsRemoved: 1_000_001}), "reports[0].tools_removed: must be between 0 and 1000000"},
		{"a breaker twice", rep(&pb.SavingsReport{Breaker: name, LocalDenials: 1}, &pb.SavingsReport{Breaker: name, LocalDenials: 1}), "reports[1].breaker: " + `"` + name + `" is reported twice`},
	} {
		_, err := api.ReportSavings(ctx, c.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), c.want) {
			t.Errorf("ReportSavings with %s: %v, want InvalidArgument containing %q", c.what, err, c.want)
		}
	}
	for _, ms := range []int64{-1, 59_999, 7*24*3600*1000 + 1} {
		_, err := api.Savings(ctx, &pb.SavingsRequest{WindowMs: ms})
		if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), "window_ms: ") {
			t.Errorf("Savings(window_ms %d): %v, want InvalidArgument naming window_ms", ms, err)
		}
	}
	// Nothing refused was counted.
	got, err := api.Savings(ctx, &pb.SavingsRequest{Breakers: []string{name}})
	if err != nil || got.GetCallsAvoided() != 0 {
		t.Errorf("Savings after refused reports = %v, %v; want nothing counted", got, err)
	}
}
