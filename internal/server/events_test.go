package server_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/httpapi"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
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

// TestWatchRunNoticesOnlyWhenAsked: a closed breaker's first failure
// publishes run_started (no id: it is not logged) and a success that ends
// the run run_ended; a Watch that did not ask for them sees neither, only
// the transitions.
func TestWatchRunNoticesOnlyWhenAsked(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := daemontest.Start(t, b, store.Options{})
		api := dial(t, d, "w1").API()
		// A stream that sends no heartbeat fails the test at this bound
		// rather than holding it until go test's own timeout.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		name := b.Breaker("search")
		with, err := api.Watch(ctx, &pb.WatchRequest{Breakers: []string{name}, RunNotices: true})
		if err != nil {
			t.Fatal(err)
		}
		without, err := api.Watch(ctx, &pb.WatchRequest{Breakers: []string{name}})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []pb.BreakerService_WatchClient{with, without} {
			if _, err := s.Header(); err != nil {
				t.Fatal(err)
			}
		}
		rec := func(o pb.Outcome) {
			if _, err := api.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: "w1", Ticket: &pb.Ticket{}, Outcome: o}); err != nil {
				t.Fatal(err)
			}
		}
		rec(pb.Outcome_OUTCOME_TIMEOUT) // run_started
		rec(pb.Outcome_OUTCOME_TIMEOUT) // the run goes on: nothing
		rec(pb.Outcome_OUTCOME_SUCCESS) // run_ended
		rec(pb.Outcome_OUTCOME_SUCCESS) // nothing to end: nothing
		if _, err := api.Force(ctx, &pb.ForceRequest{Breaker: name, Mode: pb.ForceMode_FORCE_MODE_OPEN, Reason: "drill"}); err != nil {
			t.Fatal(err)
		}
		kinds := func(s pb.BreakerService_WatchClient) []pb.EventKind {
			var out []pb.EventKind
			for {
				m, err := s.Recv()
				if err != nil {
					t.Fatal(err)
				}
				e := m.GetEvent()
				if e == nil { // a heartbeat
					continue
				}
				if store.IsNotice(e) != (e.GetId() == "") || e.GetBreaker() != name {
					t.Errorf("event %v: a notice has no id, an event one", e)
				}
				out = append(out, e.GetKind())
				if e.GetKind() == pb.EventKind_EVENT_KIND_FORCED {
					return out
				}
			}
		}
		want := []pb.EventKind{pb.EventKind_EVENT_KIND_RUN_STARTED, pb.EventKind_EVENT_KIND_RUN_ENDED, pb.EventKind_EVENT_KIND_FORCED}
		if got := kinds(with); !slices.Equal(got, want) {
			t.Errorf("Watch with run_notices: %v, want %v", got, want)
		}
		if got := kinds(without); !slices.Equal(got, want[2:]) {
			t.Errorf("Watch without run_notices: %v, want only %v", got, want[2:])
		}
	})
}

// TestWatchHeartbeats: a Watch stream opens with a heartbeat announcing
// the interval, sends one after each interval with nothing sent, and an
// event in between is sent as it comes.
func TestWatchHeartbeats(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := daemontest.StartWith(t, b, daemontest.Options{Heartbeat: 25 * time.Millisecond})
		api := dial(t, d, "w1").API()
		// A stream that sends no heartbeat fails the test at this bound
		// rather than holding it until go test's own timeout.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		name := b.Breaker("search")
		s, err := api.Watch(ctx, &pb.WatchRequest{Breakers: []string{name}})
		if err != nil {
			t.Fatal(err)
		}
		recv := func() *pb.WatchResponse {
			t.Helper()
			m, err := s.Recv()
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
		if m := recv(); m.GetEvent() != nil || m.GetHeartbeatMs() != 25 {
			t.Fatalf("first message %v, want a heartbeat announcing 25ms", m)
		}
		if m := recv(); m.GetEvent() != nil || m.GetHeartbeatMs() != 25 {
			t.Fatalf("message of an idle stream %v, want a heartbeat", m)
		}
		if _, err := api.Force(ctx, &pb.ForceRequest{Breaker: name, Mode: pb.ForceMode_FORCE_MODE_OPEN, Reason: "drill", Operator: "ops"}); err != nil {
			t.Fatal(err)
		}
		for {
			m := recv()
			if e := m.GetEvent(); e != nil {
				if e.GetBreaker() != name || e.GetTo() != pb.State_STATE_FORCED_OPEN || m.GetHeartbeatMs() != 0 {
					t.Fatalf("event message %v, want the force of %s with no heartbeat_ms", m, name)
				}
				break
			}
		}
	})
}

// TestWatchHeartbeatDefault: without a setting the interval announced is
// the one both streams share, httpapi.DefaultHeartbeat.
func TestWatchHeartbeatDefault(t *testing.T) {
	b := testredis.Mini(t)
	d := daemontest.Start(t, b, store.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // as TestWatchHeartbeats
	defer cancel()
	s, err := dial(t, d, "w1").API().Watch(ctx, &pb.WatchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.Recv()
	if err != nil || m.GetHeartbeatMs() != httpapi.DefaultHeartbeat.Milliseconds() || m.GetEvent() != nil {
		t.Fatalf("first message %v, %v; want a heartbeat announcing %v", m, err, httpapi.DefaultHeartbeat)
	}
}
