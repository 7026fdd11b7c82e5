package recovery

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/tests/testredis"
)

// TestGRPCCheckReachByCode: a gRPC check tells a target it cannot reach
// at all (a refused connection) from one that answers, by the dial's
// error and the RPC's code, never by the words of an answer: a health
// service that answers Unavailable saying "connection refused" (its own
// database's) was reached, and merely failed.
func TestGRPCCheckReachByCode(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a bound for a failing run only
	defer cancel()
	c := &Checker{}
	check := func(target string) string {
		t.Helper()
		got, detail := c.checkGRPC(ctx, &policy.GRPCCheck{Target: target, Plaintext: true})
		t.Logf("%s: %s (%s)", target, got, detail)
		return got
	}
	if got := check(testredis.FreeAddr(t)); got != "unreachable" {
		t.Errorf("a refused connection: %s, want unreachable", got)
	}

	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("down", healthpb.HealthCheckResponse_NOT_SERVING)
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	if got := check(lis.Addr().String()); got != "success" {
		t.Errorf("a SERVING target: %s, want success", got)
	}
	if got, _ := c.checkGRPC(ctx, &policy.GRPCCheck{Target: lis.Addr().String(), Service: "down", Plaintext: true}); got != "failure" {
		t.Errorf("a NOT_SERVING service: %s, want failure", got)
	}

	refusing := grpc.NewServer()
	healthpb.RegisterHealthServer(refusing, refusingHealth{})
	lis2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = refusing.Serve(lis2) }()
	defer refusing.Stop()
	if got := check(lis2.Addr().String()); got != "failure" {
		t.Errorf("a target that answers Unavailable in words of a refused connection: %s, want failure (it was reached)", got)
	}
}

// refusingHealth answers every check Unavailable, its database refusing.
type refusingHealth struct {
	healthpb.UnimplementedHealthServer
}

func (refusingHealth) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	return nil, status.Error(codes.Unavailable, "database: dial tcp 10.0.0.7:5432: connect: connection refused")
}
