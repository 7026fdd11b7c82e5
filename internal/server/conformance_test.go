package server_test

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/breakerd/breakerd/internal/daemontest"
	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/store"
	"github.com/breakerd/breakerd/internal/testredis"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// TestConformanceClassificationThroughRecord sends every row of
// conformance/classification.json to a daemon as a Record with evidence
// and no outcome, its policy's bare_rate_limit_wait and count_unrecognised
// and its clock set as the row says, and compares classified_as and why,
// and whether the breaker counted it.
func TestConformanceClassificationThroughRecord(t *testing.T) {
	b, err := os.ReadFile("../../conformance/classification.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Rows []struct {
			Name     string          `json:"name"`
			Evidence json.RawMessage `json:"evidence"`
			Deadline int64           `json:"deadline_ms"`
			Bare     int64           `json:"bare_rate_limit_wait_ms"`
			Count    bool            `json:"count_unrecognised"`
			Now      int64           `json:"now_ms"`
			Want     struct {
				Outcome string `json:"outcome"`
				Counts  bool   `json:"counts"`
				Why     string `json:"why"`
			} `json:"want"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(b, &f); err != nil || len(f.Rows) == 0 {
		t.Fatalf("conformance/classification.json: %v, %d rows", err, len(f.Rows))
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
		for i, r := range f.Rows {
			ev := &pb.CallEvidence{}
			if err := protojson.Unmarshal(r.Evidence, ev); err != nil {
				t.Fatalf("%s: %v", r.Name, err)
			}
			now.Store(r.Now)
			name := be.Breaker("row" + strconv.Itoa(i))
			if r.Bare == 5000 {
				name += "-bare5000"
			}
			if r.Count {
				name += "-counted"
			}
			res, err := api.Record(context.Background(), &pb.RecordRequest{Breaker: name, WorkerId: "w1",
				Ticket: &pb.Ticket{}, Evidence: ev, DeadlineMs: r.Deadline})
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
