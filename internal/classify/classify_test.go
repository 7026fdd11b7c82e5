package classify

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/breakerd/breakerd/conformance"
	"github.com/breakerd/breakerd/internal/limits"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

func rows(t *testing.T) []conformance.ClassificationRow {
	t.Helper()
	r, err := conformance.ReadClassification()
	if err != nil {
		t.Fatal(err)
	}
	return r
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
			got := OutcomeOf(Input{Evidence: ev, Deadline: time.Duration(r.DeadlineMs) * time.Millisecond,
				BareWait: time.Duration(r.BareRateLimitWaitMs) * time.Millisecond, Now: time.UnixMilli(r.NowMs), CountUnrecognised: r.CountUnrecognised})
			if got.Outcome.String() != r.Want.Outcome || got.RetryAfterMs() != r.Want.RetryAfterMs ||
				got.Counts != r.Want.Counts || got.Why != r.Want.Why {
				t.Errorf("OutcomeOf(%s) = %v %dms counts=%v %q, want %s %dms counts=%v %q", r.Evidence,
					got.Outcome, got.RetryAfterMs(), got.Counts, got.Why,
					r.Want.Outcome, r.Want.RetryAfterMs, r.Want.Counts, r.Want.Why)
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
