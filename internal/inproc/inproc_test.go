package inproc_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/inproc"
)

// order returns an interceptor option that appends name to *log as a
// call enters it.
func order(log *[]string, name string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		*log = append(*log, name+" "+info.FullMethod)
		return h(ctx, req)
	}
}

// TestChainRunsAsTheServer: a call in process runs the interceptors the
// options give with UnaryInterceptors in the order the gRPC server runs
// them for a call over its transport, skips none of them, and sees the
// method's full name.
func TestChainRunsAsTheServer(t *testing.T) {
	var log []string
	opts := []grpc.ServerOption{
		inproc.UnaryInterceptors(order(&log, "a"), order(&log, "b")),
		grpc.MaxRecvMsgSize(1 << 20),
		inproc.UnaryInterceptors(order(&log, "c")),
	}
	g := grpc.NewServer(opts...)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	defer g.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	overTheWire := log
	log = nil

	svc := inproc.NewService(&healthpb.Health_ServiceDesc, hs, inproc.Chain(opts))
	res, err := svc.Call(context.Background(), "Check", func(m any) error { return nil })
	if err != nil {
		t.Fatalf("Call(Check) = %v", err)
	}
	if got := res.(*healthpb.HealthCheckResponse).GetStatus(); got != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("Call(Check) = %v, want SERVING", got)
	}
	if diff := cmp.Diff(overTheWire, log); diff != "" {
		t.Errorf("interceptors in process (-over the wire +in process):\n%s", diff)
	}
	if !svc.Has("Check") || svc.Has("Watch") {
		t.Errorf("Has(Check), Has(Watch) = %v, %v; want the unary method only", svc.Has("Check"), svc.Has("Watch"))
	}
}

// TestCallErrorsAreStatuses: a handler's error that is not a status
// comes back as the server would send it; a decoding error as it is.
func TestCallErrorsAreStatuses(t *testing.T) {
	hs := health.NewServer()
	svc := inproc.NewService(&healthpb.Health_ServiceDesc, hs, inproc.Chain(nil))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		what string
		ctx  context.Context
		dec  func(any) error
		code codes.Code
		msg  string
	}{
		{"a context's error", context.Background(), func(any) error { return context.DeadlineExceeded }, codes.DeadlineExceeded, "context deadline exceeded"},
		{"a plain error", context.Background(), func(any) error { return errors.New("boom") }, codes.Unknown, "boom"},
		{"a status", ctx, func(any) error { return status.Error(codes.InvalidArgument, "field: bad") }, codes.InvalidArgument, "field: bad"},
	} {
		_, err := svc.Call(tc.ctx, "Check", tc.dec)
		if st := status.Convert(err); st.Code() != tc.code || !strings.Contains(st.Message(), tc.msg) {
			t.Errorf("%s: Call = %v, want %v %q", tc.what, err, tc.code, tc.msg)
		}
	}
	if _, err := svc.Call(context.Background(), "Nope", nil); status.Code(err) != codes.Unimplemented {
		t.Errorf("Call(Nope) = %v, want Unimplemented", err)
	}
}
