package server_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/daemontest"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

func TestEventsRPCReadsTheLogFromAnyDaemon(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d1 := daemontest.Start(t, b, store.Options{})
		d2 := daemontest.Start(t, b, store.Options{})
		ctx := context.Background()
		name := b.Breaker("web_search")
		if _, err := dial(t, d1, "ops").API().Force(ctx, &pb.ForceRequest{Breaker: name, Mode: pb.ForceMode_FORCE_MODE_OPEN, Reason: "drill", Operator: "alice"}); err != nil {
			t.Fatal(err)
		}
		api := dial(t, d2, "ops").API()
		res, err := api.Events(ctx, &pb.EventsRequest{Breaker: name, SinceMs: 3600_000})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Events) != 1 || res.Events[0].Kind != pb.EventKind_EVENT_KIND_FORCED || res.Events[0].Actor != "alice" ||
			res.Events[0].To != pb.State_STATE_FORCED_OPEN || res.Events[0].Reason != "drill" {
			t.Fatalf("Events(%q) via the other daemon = %v, want the force by alice", name, res.Events)
		}

		b.ResetCounts()
		for _, tc := range []struct {
			req   *pb.EventsRequest
			field string
		}{
			{&pb.EventsRequest{Breaker: "bad\nname"}, "breaker: "},
			{&pb.EventsRequest{Breaker: strings.Repeat("x", 257)}, "breaker: "},
			{&pb.EventsRequest{SinceMs: -1}, "since_ms: "},
			{&pb.EventsRequest{Limit: -1}, "limit: "},
			{&pb.EventsRequest{Limit: store.MaxEventsLimit + 1}, "limit: "},
		} {
			_, err := api.Events(ctx, tc.req)
			if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), tc.field) {
				t.Errorf("Events(%v) = %v, want InvalidArgument starting %q", tc.req, err, tc.field)
			}
		}
		if n := b.RoundTrips(); n != 0 {
			t.Errorf("invalid Events requests made %d Redis round trips, want 0", n)
		}
	})
}
