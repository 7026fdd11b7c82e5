package classify

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/breakerd/breakerd/internal/limits"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Row is one row of conformance/classification.json (its format is
// conformance/README.md's).
type Row struct {
	Name     string          `json:"name"`
	Evidence json.RawMessage `json:"evidence"`
	Deadline int64           `json:"deadline_ms"`
	Bare     int64           `json:"bare_rate_limit_wait_ms"`
	// CountUnrecognised is the policy's count_unrecognised.
	CountUnrecognised bool  `json:"count_unrecognised"`
	Now               int64 `json:"now_ms"`
	Want              struct {
		Outcome    string `json:"outcome"`
		RetryAfter int64  `json:"retry_after_ms"`
		Counts     bool   `json:"counts"`
		Why        string `json:"why"`
	} `json:"want"`
}

func rows(t *testing.T) []Row {
	t.Helper()
	b, err := os.ReadFile("../../conformance/classification.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Rows []Row `json:"rows"`
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("conformance/classification.json: %v", err)
	}
	if len(f.Rows) == 0 {
		t.Fatal("conformance/classification.json holds no row")
	}
	return f.Rows
}

// TestConformanceClassification runs every row of the table.
func TestConformanceClassification(t *testing.T) {
	for _, r := range rows(t) {
		t.Run(r.Name, func(t *testing.T) {
			ev := &pb.CallEvidence{}
			if err := protojson.Unmarshal(r.Evidence, ev); err != nil {
				t.Fatalf("evidence: %v", err)
			}
			if err := Validate("evidence", ev); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			got := OutcomeOf(Input{Evidence: ev, Deadline: time.Duration(r.Deadline) * time.Millisecond,
				BareWait: time.Duration(r.Bare) * time.Millisecond, Now: time.UnixMilli(r.Now), CountUnrecognised: r.CountUnrecognised})
			if got.Outcome.String() != r.Want.Outcome || got.RetryAfterMs() != r.Want.RetryAfter ||
				got.Counts != r.Want.Counts || got.Why != r.Want.Why {
				t.Errorf("OutcomeOf(%s) = %v %dms counts=%v %q, want %s %dms counts=%v %q", r.Evidence,
					got.Outcome, got.RetryAfterMs(), got.Counts, got.Why,
					r.Want.Outcome, r.Want.RetryAfter, r.Want.Counts, r.Want.Why)
			}
		})
	}
}

// TestConformanceClassificationCoversEveryKind: every error kind and every
// gRPC code has a row, so no branch of the table goes unstated.
func TestConformanceClassificationCoversEveryKind(t *testing.T) {
	kinds, codes := map[string]bool{}, map[int32]bool{}
	for _, r := range rows(t) {
		ev := &pb.CallEvidence{}
		if err := protojson.Unmarshal(r.Evidence, ev); err != nil {
			t.Fatal(err)
		}
		kinds[ev.GetErrorKind().String()] = true
		if ev.GrpcStatus != nil {
			codes[ev.GetGrpcStatus()] = true
		}
	}
	for _, k := range pb.ErrorKind_name {
		if !kinds[k] {
			t.Errorf("no row has error_kind %s", k)
		}
	}
	for c := int32(0); c <= int32(MaxGRPCStatus); c++ {
		if !codes[c] {
			t.Errorf("no row has grpc_status %d", c)
		}
	}
}

func TestValidateNamesTheField(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	flood := map[string]string{}
	for i := range 10000 {
		flood["x-h"+strings.Repeat("a", i%50)+string(rune('a'+i%26))+strconv.Itoa(i)] = "1"
	}
	for _, c := range []struct {
		ev    *pb.CallEvidence
		field string
	}{
		{&pb.CallEvidence{Headers: flood}, "evidence.headers"},
		{&pb.CallEvidence{Headers: map[string]string{"retry-after": big}}, `evidence.headers["retry-after"]`},
		{&pb.CallEvidence{Headers: map[string]string{big: "1"}}, "evidence.headers"},
		{&pb.CallEvidence{Headers: map[string]string{"Retry-After": "1"}}, "evidence.headers"},
		{&pb.CallEvidence{Headers: map[string]string{"retry-after": "1\n2"}}, `evidence.headers["retry-after"]`},
		{&pb.CallEvidence{HttpStatus: 600}, "evidence.http_status"},
		{&pb.CallEvidence{HttpStatus: 42}, "evidence.http_status"},
		{&pb.CallEvidence{Date: "yesterday"}, "evidence.date"},
		{&pb.CallEvidence{BodyErrorCode: big}, "evidence.body_error_code"},
		{&pb.CallEvidence{GrpcStatus: ptr[int32](17)}, "evidence.grpc_status"},
		{&pb.CallEvidence{GrpcRetryDelayMs: ptr[int64](-1)}, "evidence.grpc_retry_delay_ms"},
		{&pb.CallEvidence{ErrorKind: 99}, "evidence.error_kind"},
	} {
		err := Validate("evidence", c.ev)
		fe, ok := err.(*limits.FieldError)
		if !ok || fe.Field != c.field {
			t.Errorf("Validate = %v, want a FieldError on %s", err, c.field)
			continue
		}
		if len(fe.Error()) > 512 {
			t.Errorf("Validate error on %s is %d bytes: it echoes the value", c.field, len(fe.Error()))
		}
	}
}

func ptr[T any](v T) *T { return &v }
