package tracing

import (
	"context"
	"net"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// fakeAPI answers Allow with the status its breaker names and Watch with
// nothing, keeping the span context each call ran under.
type fakeAPI struct {
	pb.UnimplementedBreakerServiceServer
	seen chan trace.SpanContext
}

func (f fakeAPI) Allow(ctx context.Context, req *pb.AllowRequest) (*pb.AllowResponse, error) {
	f.seen <- trace.SpanContextFromContext(ctx)
	switch req.GetBreaker() {
	case "unavailable":
		return nil, status.Error(codes.Unavailable, "redis down")
	case "invalid":
		return nil, status.Error(codes.InvalidArgument, "no breaker")
	}
	return &pb.AllowResponse{}, nil
}

func (f fakeAPI) Watch(_ *pb.WatchRequest, s grpc.ServerStreamingServer[pb.WatchResponse]) error {
	f.seen <- trace.SpanContextFromContext(s.Context())
	return nil
}

// serveTraced serves fakeAPI and health with tr's ServerOptions on
// loopback, returning a client and the span contexts the calls ran under.
func serveTraced(t *testing.T, tr *Tracing) (*grpc.ClientConn, chan trace.SpanContext) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan trace.SpanContext, 8)
	g := grpc.NewServer(tr.ServerOptions()...)
	pb.RegisterBreakerServiceServer(g, fakeAPI{seen: seen})
	healthpb.RegisterHealthServer(g, health.NewServer())
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, seen
}

// TestRPCSpans: on a daemon sampling no trace of its own
// (parentbased_traceidratio 0), an RPC without traceparent runs under a
// valid span that records nothing and is never exported; one whose caller
// sampled its trace is recorded as otelgrpc would, the caller's span its
// parent, for unary calls and streams; health checks are not traced.
func TestRPCSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tr := newTracing(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0)))))
	conn, seen := serveTraced(t, tr)
	api := pb.NewBreakerServiceClient(conn)
	if _, err := api.Allow(context.Background(), &pb.AllowRequest{Breaker: "ok"}); err != nil {
		t.Fatal(err)
	}
	if sc := <-seen; !sc.IsValid() || sc.IsSampled() {
		t.Errorf("untraced Allow ran under %+v, want a valid span context, not sampled", sc)
	}
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("untraced Allow ended %d spans, want none", n)
	}
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	sampled := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-"+traceID+"-"+parentID+"-01")
	for _, b := range []string{"ok", "unavailable", "invalid"} {
		_, _ = api.Allow(sampled, &pb.AllowRequest{Breaker: b})
		<-seen
	}
	w, err := api.Watch(sampled, &pb.WatchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, err := w.Recv(); err == nil; _, err = w.Recv() {
	}
	<-seen
	if _, err := healthpb.NewHealthClient(conn).Check(sampled, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	ended := rec.Ended()
	want := []struct {
		name, code string
		status     otelcodes.Code
	}{
		{"breakerd.v1.BreakerService/Allow", "OK", otelcodes.Unset},
		{"breakerd.v1.BreakerService/Allow", "UNAVAILABLE", otelcodes.Error},
		{"breakerd.v1.BreakerService/Allow", "INVALID_ARGUMENT", otelcodes.Unset},
		{"breakerd.v1.BreakerService/Watch", "OK", otelcodes.Unset},
	}
	if len(ended) != len(want) {
		t.Fatalf("traced calls ended %d spans, want %d (no health check's)", len(ended), len(want))
	}
	for i, s := range ended {
		attrs := map[attribute.Key]attribute.Value{}
		for _, kv := range s.Attributes() {
			attrs[kv.Key] = kv.Value
		}
		w := want[i]
		if s.Name() != w.name || s.SpanKind() != trace.SpanKindServer || s.Status().Code != w.status ||
			attrs["rpc.response.status_code"].AsString() != w.code || attrs["rpc.system.name"].AsString() != "grpc" ||
			attrs["rpc.method"].AsString() != w.name || attrs["server.address"].AsString() != "127.0.0.1" || attrs["server.port"].AsInt64() == 0 {
			t.Errorf("span %d: %s kind %v status %v attrs %v; want %s, server, %v, %s", i, s.Name(), s.SpanKind(), s.Status(), attrs, w.name, w.status, w.code)
		}
		if s.SpanContext().TraceID().String() != traceID || s.Parent().SpanID().String() != parentID || !s.Parent().IsRemote() {
			t.Errorf("span %d: trace %s parent %s, want the caller's %s %s", i, s.SpanContext().TraceID(), s.Parent().SpanID(), traceID, parentID)
		}
	}
}
