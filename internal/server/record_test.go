package server_test

import (
	"context"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/google/go-cmp/cmp"

	"github.com/breakerd/breakerd/internal/server"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestRecordLeavesTheRequestAsSent: Record and RecordBatch classify a
// request's evidence and make its message one line without writing the
// request the caller passed (it is the caller's: an in-process caller may
// send it again, or log it).
func TestRecordLeavesTheRequestAsSent(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		st := store.New(b.NewClient(t), store.Options{Now: b.Clock()})
		if err := st.Load(context.Background()); err != nil {
			t.Fatal(err)
		}
		srv := server.New(st, nil)
		req := &pb.RecordRequest{Breaker: b.Breaker("quote"), WorkerId: "w1", Ticket: &pb.Ticket{},
			Evidence: &pb.CallEvidence{HttpStatus: 429}, Message: "rate\nlimited"}
		sent := proto.Clone(req)
		res, err := srv.Record(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if res.GetClassifiedAs() != pb.Outcome_OUTCOME_RATE_LIMITED {
			t.Errorf("Record(429 evidence) classified as %v, want OUTCOME_RATE_LIMITED", res.GetClassifiedAs())
		}
		if diff := cmp.Diff(sent, req, protocmp.Transform()); diff != "" {
			t.Errorf("Record wrote the caller's request (-sent +after):\n%s", diff)
		}
		batch := &pb.RecordBatchRequest{Records: []*pb.RecordRequest{proto.Clone(sent).(*pb.RecordRequest)}}
		sentBatch := proto.Clone(batch)
		if _, err := srv.RecordBatch(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(sentBatch, batch, protocmp.Transform()); diff != "" {
			t.Errorf("RecordBatch wrote the caller's request (-sent +after):\n%s", diff)
		}
	})
}
