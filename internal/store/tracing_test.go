package store_test

import (
	"context"
	"sync/atomic"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestScriptSpanFollowsTheCallsSpan: a decision whose call's span records
// runs its script in an EVALSHA span, that span's child; one whose span
// the sampler dropped (or that has none) starts no span, and still sends
// its one script (the sampler is never asked).
func TestScriptSpanFollowsTheCallsSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	sampler := &countingSampler{Sampler: sdktrace.ParentBased(sdktrace.NeverSample())}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sampler))
	f := newFixture(t, testredis.Mini(t), store.Options{Tracer: tp.Tracer("test")})
	always := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")
	sampled, call := always.Start(context.Background(), "call")
	dropped, unsampled := tp.Tracer("test").Start(context.Background(), "dropped")
	sampler.n.Store(0)
	if unsampled.IsRecording() || !call.IsRecording() {
		t.Fatalf("fixture: dropped span records %v, call span %v", unsampled.IsRecording(), call.IsRecording())
	}
	for _, ctx := range []context.Context{dropped, context.Background()} {
		if _, err := f.st.Allow(ctx, "search", "w1"); err != nil {
			t.Fatal(err)
		}
	}
	if n, d := len(rec.Ended()), sampler.n.Load(); n != 0 || d != 0 {
		t.Fatalf("unsampled Allows ended %d spans and asked the sampler %d times, want none", n, d)
	}
	if n := f.Commands(); n != 2 {
		t.Errorf("unsampled Allows sent %d commands, want 2", n)
	}
	a, err := f.st.Allow(sampled, "search", "w1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.Record(sampled, &pb.RecordRequest{Breaker: "search", WorkerId: "w1", Ticket: a.GetTicket(), Outcome: pb.Outcome_OUTCOME_SUCCESS}); err != nil {
		t.Fatal(err)
	}
	ended := rec.Ended()
	if len(ended) != 2 || ended[0].Name() != "EVALSHA allow" || ended[1].Name() != "EVALSHA record" {
		t.Fatalf("sampled Allow+Record ended %d spans (%v), want EVALSHA allow, EVALSHA record", len(ended), ended)
	}
	for _, s := range ended {
		if s.Parent().SpanID() != call.SpanContext().SpanID() {
			t.Errorf("%s's parent = %s, want the call's span %s", s.Name(), s.Parent().SpanID(), call.SpanContext().SpanID())
		}
	}
}

// countingSampler counts the spans started under it.
type countingSampler struct {
	sdktrace.Sampler
	n atomic.Int64
}

func (s *countingSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	s.n.Add(1)
	return s.Sampler.ShouldSample(p)
}
