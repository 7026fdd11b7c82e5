package server_test

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/server"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestOpenEventCarriesTheTrippingCallsTrace: the transition into open
// carries the trace id of the Record that tripped it, taken from the
// request's trace_id, else from the call's span, else from the
// traceparent the caller sent (a daemon that exports nothing); earlier
// failures' ids are not the event's, and a malformed trace_id is an
// InvalidArgument naming the field.
func TestOpenEventCarriesTheTrippingCallsTrace(t *testing.T) {
	const (
		early    = "0af7651916cd43dd8448eb211c80319c"
		tripping = "4bf92f3577b34da6a3ce929d0e0e4736"
	)
	spanCtx := func(id string) context.Context {
		tid, _ := trace.TraceIDFromHex(id)
		sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
		return trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, Remote: true}))
	}
	header := func(id string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", "00-"+id+"-00f067aa0ba902b7-01"))
	}
	for _, tc := range []struct {
		name string
		ctx  func(string) context.Context
		req  bool // the id in the request's trace_id
	}{
		{name: "request", ctx: func(string) context.Context { return context.Background() }, req: true},
		{name: "span", ctx: spanCtx},
		{name: "traceparent", ctx: header},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := testredis.Mini(t)
			st := store.New(b.NewClient(t), store.Options{Now: b.Clock()})
			if err := st.Load(context.Background()); err != nil {
				t.Fatal(err)
			}
			srv := server.New(st, nil)
			name := b.Breaker("pay")
			fail := func(worker, id string) {
				req := &pb.RecordRequest{Breaker: name, WorkerId: worker, Ticket: &pb.Ticket{}, Outcome: pb.Outcome_OUTCOME_SERVER_ERROR}
				if tc.req {
					req.TraceId = id
				}
				if _, err := srv.Record(tc.ctx(id), req); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 4 { // the default policy: 5 failures from 2 workers
				fail([]string{"w1", "w2"}[i%2], early)
			}
			fail("w1", tripping)
			events, err := st.Events(context.Background(), store.EventQuery{Breaker: name})
			if err != nil {
				t.Fatal(err)
			}
			var open *pb.Event
			for _, e := range events {
				if e.GetTo() == pb.State_STATE_OPEN && e.GetKind() == pb.EventKind_EVENT_KIND_TRANSITION {
					open = e
				}
			}
			if open == nil || open.GetTraceId() != tripping {
				t.Fatalf("open event = %v, want one with trace_id %s", open, tripping)
			}
		})
	}
	b := testredis.Mini(t)
	st := store.New(b.NewClient(t), store.Options{Now: b.Clock()})
	_, err := server.New(st, nil).Record(context.Background(), &pb.RecordRequest{Breaker: b.Breaker("pay"), WorkerId: "w1",
		Ticket: &pb.Ticket{}, Outcome: pb.Outcome_OUTCOME_SERVER_ERROR, TraceId: strings.ToUpper(tripping)})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "trace_id") {
		t.Errorf("Record with an upper-case trace_id = %v, want InvalidArgument naming trace_id", err)
	}
}
