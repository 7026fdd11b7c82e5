package server_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// record sends one Allow and a Record of ev (and outcome, when set) for
// worker on name, and returns the Record's answer.
func record(t *testing.T, api pb.BreakerServiceClient, name, worker string, outcome pb.Outcome, ev *pb.CallEvidence, deadlineMs int64) *pb.RecordResponse {
	t.Helper()
	ctx := context.Background()
	a, err := api.Allow(ctx, &pb.AllowRequest{Breaker: name, WorkerId: worker})
	if err != nil {
		t.Fatal(err)
	}
	res, err := api.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: worker, Ticket: a.GetTicket(),
		Outcome: outcome, Evidence: ev, DeadlineMs: deadlineMs})
	if err != nil {
		t.Fatalf("Record(%s, %v): %v", name, ev, err)
	}
	return res
}

// TestDaemonClassifiesEvidence: a Record with evidence and no outcome is
// classified by the daemon (and trips the breaker from two workers); an
// explicit outcome wins over the evidence; a 429's wait counts against
// the caller's deadline.
func TestDaemonClassifiesEvidence(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := daemontest.Start(t, b, store.Options{})
		api := dial(t, d, "w1").API()
		name := b.Breaker("vendor")
		for i := range 5 {
			res := record(t, api, name, "w"+strconv.Itoa(i%2+1), 0, &pb.CallEvidence{HttpStatus: 503}, 0)
			if res.GetClassifiedAs() != pb.Outcome_OUTCOME_SERVER_ERROR || res.GetWhy() != "HTTP 503: a server error, counted" {
				t.Fatalf("Record(503) = %v %q, want SERVER_ERROR", res.GetClassifiedAs(), res.GetWhy())
			}
		}
		if st := state(t, d, name); st.GetState() != pb.State_STATE_OPEN {
			t.Errorf("after five 503s from two workers: %v, want OPEN", st.GetState())
		}

		other := b.Breaker("explicit")
		res := record(t, api, other, "w1", pb.Outcome_OUTCOME_SUCCESS, &pb.CallEvidence{HttpStatus: 503}, 0)
		if res.GetClassifiedAs() != pb.Outcome_OUTCOME_SUCCESS || res.GetWhy() != "outcome sent by the caller" {
			t.Errorf("explicit SUCCESS with 503 evidence = %v %q, want SUCCESS, sent by the caller", res.GetClassifiedAs(), res.GetWhy())
		}

		limited := b.Breaker("limited")
		ev := &pb.CallEvidence{HttpStatus: 429, Headers: map[string]string{"retry-after": "120"}}
		for i := range 3 {
			res = record(t, api, limited, "w"+strconv.Itoa(i%2+1), 0, ev, 5000)
			if res.GetClassifiedAs() != pb.Outcome_OUTCOME_RATE_LIMITED {
				t.Fatalf("Record(429) = %v, want RATE_LIMITED", res.GetClassifiedAs())
			}
		}
		st := state(t, d, limited)
		if st.GetState() != pb.State_STATE_OPEN || st.GetCooldownMs() < 120000 || st.GetCooldownMs() > 144000 {
			t.Errorf("after three 429s of 120s past a 5s deadline: %v cooldown %dms, want OPEN for 120s plus jitter", st.GetState(), st.GetCooldownMs())
		}
	})
}

// TestClassifyingCostsNoRedisCommand: a Record with evidence sends
// exactly the Redis commands the same Record with its outcome does.
func TestClassifyingCostsNoRedisCommand(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := daemontest.Start(t, b, store.Options{})
		api := dial(t, d, "w1").API()
		ctx := context.Background()
		cost := func(name string, outcome pb.Outcome, ev *pb.CallEvidence) int64 {
			a, err := api.Allow(ctx, &pb.AllowRequest{Breaker: name, WorkerId: "w1"})
			if err != nil {
				t.Fatal(err)
			}
			b.ResetCounts()
			if _, err := api.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: "w1", Ticket: a.GetTicket(),
				Outcome: outcome, Evidence: ev}); err != nil {
				t.Fatal(err)
			}
			return b.Commands()
		}
		for i := range 3 { // a failure, then a second (with a run), then a third
			byOutcome := cost(b.Breaker("outcome"), pb.Outcome_OUTCOME_SERVER_ERROR, nil)
			byEvidence := cost(b.Breaker("evidence"), 0, &pb.CallEvidence{HttpStatus: 503, Headers: map[string]string{"retry-after": "5"}})
			if byEvidence != byOutcome || byOutcome == 0 {
				t.Errorf("record %d: %d Redis commands with evidence, %d with the outcome; want the same, more than 0", i, byEvidence, byOutcome)
			}
		}
	})
}

// TestBadEvidenceIsRefusedNamingTheFieldAndStoresNothing: a header flood
// and oversized values are InvalidArgument, the field named in the text
// and as a google.rpc.BadRequest field violation, and nothing is stored.
func TestBadEvidenceIsRefusedNamingTheFieldAndStoresNothing(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := daemontest.Start(t, b, store.Options{})
		api := dial(t, d, "w1").API()
		ctx := context.Background()
		name := b.Breaker("flooded")
		flood := map[string]string{}
		for i := range 10000 {
			flood["x-h-"+strconv.Itoa(i)] = "1"
		}
		cases := []struct {
			ev    *pb.CallEvidence
			field string
		}{
			{&pb.CallEvidence{HttpStatus: 503, Headers: flood}, "evidence.headers"},
			{&pb.CallEvidence{HttpStatus: 429, Headers: map[string]string{"retry-after": strings.Repeat("9", 256<<10)}}, `evidence.headers["retry-after"]`},
			{&pb.CallEvidence{HttpStatus: 429, BodyErrorCode: strings.Repeat("q", 256<<10)}, "evidence.body_error_code"},
			{&pb.CallEvidence{HttpStatus: 1000}, "evidence.http_status"},
			{&pb.CallEvidence{ErrorKind: 42}, "evidence.error_kind"},
		}
		for _, c := range cases {
			_, err := api.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: "w1", Ticket: &pb.Ticket{}, Evidence: c.ev})
			if got := violation(err); status.Code(err) != codes.InvalidArgument || got != c.field {
				t.Errorf("Record(%s) = %v (violation on %q), want InvalidArgument on %s", c.field, status.Code(err), got, c.field)
			}
			if len(status.Convert(err).Message()) > 512 {
				t.Errorf("Record(%s): the error echoes the value (%d bytes)", c.field, len(status.Convert(err).Message()))
			}
			_, err = api.RecordBatch(ctx, &pb.RecordBatchRequest{Records: []*pb.RecordRequest{
				{Breaker: name, WorkerId: "w1", Ticket: &pb.Ticket{}, Outcome: pb.Outcome_OUTCOME_SUCCESS},
				{Breaker: name, WorkerId: "w1", Ticket: &pb.Ticket{}, Evidence: c.ev}}})
			if got := violation(err); got != "records[1]."+c.field {
				t.Errorf("RecordBatch(%s) = %v (violation on %q), want records[1].%s", c.field, err, got, c.field)
			}
		}
		keys := store.KeysOf(name)
		for _, k := range []string{keys.State, keys.Workers, keys.Events} {
			if n, _ := b.Client.Exists(ctx, k).Result(); n != 0 {
				t.Errorf("bad evidence stored %s", k)
			}
		}
	})
}

// violation is the field of err's first google.rpc.BadRequest violation.
func violation(err error) string {
	for _, d := range status.Convert(err).Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
			return br.GetFieldViolations()[0].GetField()
		}
	}
	return ""
}

// TestRecordSaysWhyItWasNotCounted: a Record whose evidence counts but
// whose ticket no longer does says both in why; a Record with neither an
// outcome nor evidence is refused naming the outcome and the evidence.
func TestRecordSaysWhyItWasNotCounted(t *testing.T) {
	testredis.Each(t, func(t *testing.T, b *testredis.Backend) {
		d := daemontest.Start(t, b, store.Options{})
		api := dial(t, d, "w1").API()
		ctx := context.Background()
		name := b.Breaker("stale")
		res, err := api.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: "w1", Ticket: &pb.Ticket{Generation: 7},
			Evidence: &pb.CallEvidence{HttpStatus: 503}})
		if err != nil {
			t.Fatal(err)
		}
		if res.GetCounted() || res.GetNote() == "" || res.GetWhy() != "HTTP 503: a server error, counted; not counted here: "+res.GetNote() {
			t.Errorf("Record(503) on a stale ticket = counted %v, note %q, why %q; want not counted, and why saying so", res.GetCounted(), res.GetNote(), res.GetWhy())
		}
		_, err = api.Record(ctx, &pb.RecordRequest{Breaker: name, WorkerId: "w1", Ticket: &pb.Ticket{}})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "outcome: ") || !strings.Contains(err.Error(), "evidence") {
			t.Errorf("Record with neither outcome nor evidence: %v, want InvalidArgument naming outcome and evidence", err)
		}
	})
}
