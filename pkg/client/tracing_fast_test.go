package client

import (
	"context"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestFastBatchLinksItsCalls: fast mode sends outcomes in batches, so a
// batch's span is a root of its own linked to each traced call's span,
// never a child of one; the daemon's RecordBatch span is in the batch's
// trace, and each outcome carries its call's trace id, so the open event
// of a trip in a batch names the tripping call's trace.
func TestFastBatchLinksItsCalls(t *testing.T) {
	app := tracetest.NewSpanRecorder()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(app)))
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })
	daemon := tracetest.NewSpanRecorder()
	dtp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(daemon))
	be := testredis.Mini(t)
	d := daemontest.StartWith(t, be, daemontest.Options{Store: store.Options{Tracer: dtp.Tracer("breakerd")},
		Server: []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(dtp),
			otelgrpc.WithPropagators(propagation.TraceContext{})))}})
	c1, c2 := dial(t, d.Addr, "w1", WithFastMode()), dial(t, d.Addr, "w2", WithFastMode())
	name := be.Breaker("search")
	fail := func(context.Context) error {
		return &OutcomeError{Outcome: pb.Outcome_OUTCOME_SERVER_ERROR, Message: "HTTP 503"}
	}
	var calls []trace.SpanContext
	for i := range 5 { // the default policy: 5 failures from 2 workers
		c := []*Client{c1, c2}[i%2]
		ctx, span := otel.Tracer("agent").Start(context.Background(), "execute_tool search")
		_ = c.Call(ctx, name, fail)
		span.End()
		calls = append(calls, span.SpanContext())
		if err := c.Flush(context.Background()); err != nil { // one batch per call: the order is the calls'
			t.Fatal(err)
		}
	}
	linked := map[trace.SpanID]bool{}
	batches := 0
	for _, s := range app.Ended() {
		if s.Name() != spanRecordBatch {
			continue
		}
		batches++
		if s.Parent().IsValid() {
			t.Errorf("a batch span has parent %s, want a root (its calls are links)", s.Parent().SpanID())
		}
		for _, l := range s.Links() {
			linked[l.SpanContext.SpanID()] = true
		}
		for _, call := range calls {
			if s.SpanContext().TraceID() == call.TraceID() {
				t.Errorf("a batch span is in call trace %s, want a trace of its own", call.TraceID())
			}
		}
	}
	for i, call := range calls {
		if !linked[call.SpanID()] {
			t.Errorf("call %d's span %s is linked from no batch span (%d batches)", i, call.SpanID(), batches)
		}
	}
	if rb := lastEnded(t, daemon, "breakerd.v1.BreakerService/RecordBatch"); rb.SpanContext().TraceID() == calls[4].TraceID() {
		t.Error("the daemon's RecordBatch span is in the call's trace, want the batch's")
	}
	conn, err := grpc.NewClient(d.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	res, err := pb.NewBreakerServiceClient(conn).Events(context.Background(), &pb.EventsRequest{Breaker: name})
	if err != nil {
		t.Fatal(err)
	}
	var open *pb.Event
	for _, e := range res.GetEvents() {
		if e.GetTo() == pb.State_STATE_OPEN && e.GetKind() == pb.EventKind_EVENT_KIND_TRANSITION {
			open = e
		}
	}
	if want := calls[4].TraceID().String(); open == nil || open.GetTraceId() != want {
		t.Errorf("open event = %v, want trace_id %s (the tripping call's)", open, want)
	}
}
