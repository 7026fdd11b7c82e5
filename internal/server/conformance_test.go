package server_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/breakerd/breakerd/conformance"
	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/tests/daemontest"
	"github.com/breakerd/breakerd/internal/tests/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestConformanceClassificationThroughRecord sends every row of
// conformance/classification.json to a daemon as a Record with evidence
// and no outcome, its policy's bare_rate_limit_wait and count_unrecognised
// and its clock set as the row says, and compares classified_as and why,
// and whether the breaker counted it.
func TestConformanceClassificationThroughRecord(t *testing.T) {
	rows, err := conformance.ReadClassification()
	if err != nil {
		t.Fatal(err)
	}
	testredis.Each(t, func(t *testing.T, be *testredis.Backend) {
		var now atomic.Int64
		set, err := policy.Parse([]byte("breakers:\n  - match: \"" + be.Breaker("*bare5000") + "\"\n    bare_rate_limit_wait: 5s\n" +
			"  - match: \"" + be.Breaker("*counted") + "\"\n    count_unrecognised: true\n"))
		if err != nil {
			t.Fatal(err)
		}
		d := daemontest.Start(t, be, store.Options{Policies: set, Now: func() time.Time { return time.UnixMilli(now.Load()) }})
		api := dial(t, d, "w1").API()
		for i, r := range rows {
			ev := &pb.CallEvidence{}
			if err := protojson.Unmarshal(r.Evidence, ev); err != nil {
				t.Fatalf("%s: %v", r.Name, err)
			}
			now.Store(r.NowMs)
			name := be.Breaker("row" + strconv.Itoa(i))
			if r.BareRateLimitWaitMs == 5000 {
				name += "-bare5000"
			}
			if r.CountUnrecognised {
				name += "-counted"
			}
			res, err := api.Record(context.Background(), &pb.RecordRequest{Breaker: name, WorkerId: "w1",
				Ticket: &pb.Ticket{}, Evidence: ev, DeadlineMs: r.DeadlineMs})
			if err != nil {
				t.Fatalf("%s: Record: %v", r.Name, err)
			}
			if res.GetClassifiedAs().String() != r.Want.Outcome || res.GetWhy() != r.Want.Why {
				t.Errorf("%s: classified_as %v, why %q; want %s, %q", r.Name, res.GetClassifiedAs(), res.GetWhy(), r.Want.Outcome, r.Want.Why)
			}
			// A fresh breaker counts a counted failure; a success is
			// "counted" too (it ends a run), anything else is not.
			if want := r.Want.Counts || r.Want.Outcome == "OUTCOME_SUCCESS"; res.GetCounted() != want {
				t.Errorf("%s: counted %v, want %v (%s)", r.Name, res.GetCounted(), want, res.GetNote())
			}
		}
	})
}
