package quorum

import (
	"testing"
	"time"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

func TestClassify(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		o                    pb.Outcome
		retryAfter, deadline time.Duration
		want                 Evidence
	}{
		{pb.Outcome_OUTCOME_SUCCESS, 0, 0, Healthy},
		{pb.Outcome_OUTCOME_TRANSPORT, 0, 0, Failure},
		{pb.Outcome_OUTCOME_TIMEOUT, 0, 0, Failure},
		{pb.Outcome_OUTCOME_SERVER_ERROR, 0, 0, Failure},
		{pb.Outcome_OUTCOME_MALFORMED_OUTPUT, 0, 0, Failure},
		{pb.Outcome_OUTCOME_INVALID_ARGUMENT, 0, 0, Neutral},
		{pb.Outcome_OUTCOME_PERMISSION_DENIED, 0, 0, Neutral},
		{pb.Outcome_OUTCOME_NOT_FOUND, 0, 0, Neutral},
		{pb.Outcome_OUTCOME_CANCELED, 0, 0, Neutral},
		{pb.Outcome_OUTCOME_UNAUTHENTICATED, 0, 0, CredentialRejected},
		{pb.Outcome_OUTCOME_RATE_LIMITED, 5 * s, 10 * s, Throttled},
		{pb.Outcome_OUTCOME_RATE_LIMITED, 10 * s, 10 * s, Throttled},
		{pb.Outcome_OUTCOME_RATE_LIMITED, 11 * s, 10 * s, RateLimited},
		{pb.Outcome_OUTCOME_RATE_LIMITED, s, 0, RateLimited},
	} {
		got, err := Classify(tc.o, tc.retryAfter, tc.deadline)
		if err != nil || got != tc.want {
			t.Errorf("Classify(%v, %s, %s) = %q, %v; want %q", tc.o, tc.retryAfter, tc.deadline, got, err, tc.want)
		}
	}
	for _, o := range []pb.Outcome{pb.Outcome_OUTCOME_UNSPECIFIED, 42} {
		if _, err := Classify(o, 0, 0); err == nil {
			t.Errorf("Classify(%v) succeeded, want an error", o)
		}
	}
}

func TestDescribe(t *testing.T) {
	for _, tc := range []struct {
		o       pb.Outcome
		latency time.Duration
		msg     string
		want    string
	}{
		{pb.Outcome_OUTCOME_TIMEOUT, 30 * time.Second, "", "timeout after 30s"},
		{pb.Outcome_OUTCOME_TIMEOUT, 0, "", "timeout"},
		{pb.Outcome_OUTCOME_SERVER_ERROR, time.Second, "HTTP 503", "server error (5xx): HTTP 503"},
		{pb.Outcome_OUTCOME_TRANSPORT, 0, "connection refused", "transport error: connection refused"},
		{pb.Outcome_OUTCOME_MALFORMED_OUTPUT, 0, "", "malformed output"},
	} {
		if got := Describe(tc.o, tc.latency, 0, 0, tc.msg); got != tc.want {
			t.Errorf("Describe(%v, %s, %q) = %q, want %q", tc.o, tc.latency, tc.msg, got, tc.want)
		}
	}
	if got, want := Describe(pb.Outcome_OUTCOME_RATE_LIMITED, 0, 2*time.Minute, 30*time.Second, ""), "rate limited (429), Retry-After 2m beyond a 30s deadline"; got != want {
		t.Errorf("Describe(RATE_LIMITED) = %q, want %q", got, want)
	}
}

func TestHuman(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 250 * time.Millisecond: "250ms", 1500 * time.Millisecond: "1.5s",
		30 * time.Second: "30s", 2 * time.Minute: "2m", 90 * time.Second: "90s",
	} {
		if got := Human(d); got != want {
			t.Errorf("Human(%s) = %q, want %q", d, got, want)
		}
	}
}
