package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// TestClassify walks every row of DefaultClassifier's table. now is fixed;
// the call's deadline, where one is set, is 30s after it.
func TestClassify(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	httpDate := func(d time.Duration) string { return now.Add(d).Format(http.TimeFormat) }
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	deadline30s, cancel2 := context.WithDeadline(context.Background(), now.Add(30*time.Second))
	defer cancel2()
	bg := context.Background()
	opErr := func(err error) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", err)}
	}
	urlErr := func(err error) error { return &url.Error{Op: "Get", URL: "https://vendor.example/x", Err: err} }
	he := func(code int, retryAfter string) error {
		return CheckResponse(&http.Response{StatusCode: code, Header: http.Header{"Retry-After": []string{retryAfter}}})
	}
	const (
		success   = pb.Outcome_OUTCOME_SUCCESS
		transport = pb.Outcome_OUTCOME_TRANSPORT
		timeout   = pb.Outcome_OUTCOME_TIMEOUT
		server    = pb.Outcome_OUTCOME_SERVER_ERROR
		malformed = pb.Outcome_OUTCOME_MALFORMED_OUTPUT
		invalid   = pb.Outcome_OUTCOME_INVALID_ARGUMENT
		denied    = pb.Outcome_OUTCOME_PERMISSION_DENIED
		notFound  = pb.Outcome_OUTCOME_NOT_FOUND
		limited   = pb.Outcome_OUTCOME_RATE_LIMITED
		unauth    = pb.Outcome_OUTCOME_UNAUTHENTICATED
		skip      = pb.Outcome_OUTCOME_UNSPECIFIED // not recorded
	)
	cases := []struct {
		name       string
		ctx        context.Context
		err        error
		want       pb.Outcome
		retryAfter time.Duration
		deadline   time.Duration
		counts     bool // for RATE_LIMITED: RetryAfter > Deadline
	}{
		// Go errors.
		{name: "nil", err: nil, want: success},
		{name: "context deadline", err: context.DeadlineExceeded, want: timeout},
		{name: "wrapped deadline", err: fmt.Errorf("search: %w", context.DeadlineExceeded), want: timeout},
		{name: "caller's own deadline ran out", ctx: deadline30s, err: urlErr(context.DeadlineExceeded), want: timeout},
		{name: "net.Error timeout", err: urlErr(timeoutErr{}), want: timeout},
		{name: "os deadline", err: os.ErrDeadlineExceeded, want: timeout},
		{name: "connection refused", err: urlErr(opErr(syscall.ECONNREFUSED)), want: transport},
		{name: "connection reset", err: urlErr(&net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}), want: transport},
		{name: "unexpected EOF", err: urlErr(io.ErrUnexpectedEOF), want: transport},
		{name: "DNS not found", err: urlErr(&net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "vendor.example", IsNotFound: true}}), want: transport},
		{name: "DNS timeout is still DNS", err: &net.DNSError{Err: "i/o timeout", Name: "vendor.example", IsTimeout: true}, want: transport},
		{name: "unknown authority", err: urlErr(&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), want: transport},
		{name: "hostname mismatch", err: urlErr(x509.HostnameError{Host: "vendor.example", Certificate: &x509.Certificate{}}), want: transport},
		{name: "expired certificate", err: x509.CertificateInvalidError{Reason: x509.Expired}, want: transport},
		{name: "TLS record header", err: urlErr(tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), want: transport},
		{name: "TLS alert", err: urlErr(tls.AlertError(40)), want: transport},
		{name: "caller canceled", ctx: canceled, err: urlErr(context.Canceled), want: skip},
		{name: "canceled, but not by the caller", err: context.Canceled, want: transport},
		{name: "anything else", err: errors.New("boom"), want: transport},
		// HTTP responses.
		{name: "HTTP 500", err: he(500, ""), want: server},
		{name: "HTTP 502", err: he(502, ""), want: server},
		{name: "HTTP 503", err: he(503, "120"), want: server},
		{name: "HTTP 400", err: he(400, ""), want: invalid},
		{name: "HTTP 409", err: he(409, ""), want: invalid},
		{name: "HTTP 422", err: he(422, ""), want: invalid},
		{name: "HTTP 404", err: he(404, ""), want: notFound},
		{name: "HTTP 403", err: he(403, ""), want: denied},
		{name: "HTTP 401", err: he(401, ""), want: unauth},
		{name: "HTTP 408", err: he(408, ""), want: timeout},
		{name: "HTTP 429 delta-seconds beyond the deadline", ctx: deadline30s, err: he(429, "120"), want: limited,
			retryAfter: 120 * time.Second, deadline: 30 * time.Second, counts: true},
		{name: "HTTP 429 delta-seconds within the deadline", ctx: deadline30s, err: he(429, "10"), want: limited,
			retryAfter: 10 * time.Second, deadline: 30 * time.Second},
		{name: "HTTP 429 HTTP-date beyond the deadline", ctx: deadline30s, err: he(429, httpDate(2*time.Minute)), want: limited,
			retryAfter: 2 * time.Minute, deadline: 30 * time.Second, counts: true},
		{name: "HTTP 429 HTTP-date within the deadline", ctx: deadline30s, err: he(429, httpDate(20*time.Second)), want: limited,
			retryAfter: 20 * time.Second, deadline: 30 * time.Second},
		{name: "HTTP 429 HTTP-date in the past", ctx: deadline30s, err: he(429, httpDate(-time.Minute)), want: limited,
			deadline: 30 * time.Second},
		{name: "HTTP 429 without Retry-After", ctx: deadline30s, err: he(429, ""), want: limited, deadline: 30 * time.Second},
		{name: "HTTP 429, no deadline: the caller can wait", err: he(429, "3600"), want: limited,
			retryAfter: time.Hour, deadline: time.Hour},
		{name: "HTTP 429 wrapped by the tool", ctx: deadline30s, err: fmt.Errorf("refund: %w", he(429, "60")), want: limited,
			retryAfter: time.Minute, deadline: 30 * time.Second, counts: true},
		// gRPC status codes.
		{name: "gRPC Unavailable", err: status.Error(codes.Unavailable, "x"), want: transport},
		{name: "gRPC DeadlineExceeded", err: status.Error(codes.DeadlineExceeded, "x"), want: timeout},
		{name: "gRPC ResourceExhausted", err: status.Error(codes.ResourceExhausted, "x"), want: limited},
		{name: "gRPC InvalidArgument", err: status.Error(codes.InvalidArgument, "x"), want: invalid},
		{name: "gRPC FailedPrecondition", err: status.Error(codes.FailedPrecondition, "x"), want: invalid},
		{name: "gRPC NotFound", err: status.Error(codes.NotFound, "x"), want: notFound},
		{name: "gRPC PermissionDenied", err: status.Error(codes.PermissionDenied, "x"), want: denied},
		{name: "gRPC Unauthenticated", err: status.Error(codes.Unauthenticated, "x"), want: unauth},
		{name: "gRPC Internal", err: status.Error(codes.Internal, "x"), want: server},
		{name: "gRPC Unknown", err: status.Error(codes.Unknown, "x"), want: server},
		{name: "gRPC DataLoss", err: fmt.Errorf("wrapped: %w", status.Error(codes.DataLoss, "x")), want: server},
		{name: "gRPC Canceled by the caller", ctx: canceled, err: status.Error(codes.Canceled, "x"), want: skip},
		{name: "gRPC Canceled, not by the caller", err: status.Error(codes.Canceled, "x"), want: transport},
		// A tool's own verdicts.
		{name: "validator rejected a 200", err: &MalformedOutputError{Err: errors.New("no 'results' field")}, want: malformed},
		{name: "OutcomeError", err: &OutcomeError{Outcome: server, Message: "HTTP 503"}, want: server},
		{name: "OutcomeError 429", ctx: deadline30s, err: &OutcomeError{Outcome: limited, RetryAfter: time.Minute}, want: limited,
			retryAfter: time.Minute, deadline: 30 * time.Second, counts: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := tc.ctx
			if ctx == nil {
				ctx = bg
			}
			r, ok := classifyAt(ctx, tc.err, now)
			if tc.want == skip {
				if ok {
					t.Fatalf("recorded as %v, want not recorded", r.Outcome)
				}
				return
			}
			if !ok || r.Outcome != tc.want {
				t.Fatalf("= %v (recorded %v), want %v", r.Outcome, ok, tc.want)
			}
			if tc.want != limited {
				return
			}
			if r.RetryAfter != tc.retryAfter || r.Deadline != tc.deadline {
				t.Errorf("RetryAfter %s, Deadline %s; want %s, %s", r.RetryAfter, r.Deadline, tc.retryAfter, tc.deadline)
			}
			if got := r.RetryAfter > r.Deadline; got != tc.counts {
				t.Errorf("counts (RetryAfter > Deadline) = %v, want %v", got, tc.counts)
			}
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"120", 2 * time.Minute, true},
		{" 0 ", 0, true},
		{"Sun, 29 Nov 2026 12:02:00 GMT", 2 * time.Minute, true},   // IMF-fixdate
		{"Sunday, 29-Nov-26 12:00:30 GMT", 30 * time.Second, true}, // obsolete RFC 850
		{"Sun Nov 29 12:01:00 2026", time.Minute, true},            // obsolete asctime
		{"Sun, 29 Nov 2026 11:00:00 GMT", 0, true},                 // in the past
		{"-5", 0, false},
		{"1.5", 0, false},
		{"soon", 0, false},
		{"", 0, false},
	}
	for _, tc := range cases {
		got, ok := ParseRetryAfter(tc.in, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseRetryAfter(%q) = %s, %v; want %s, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestCheckResponse(t *testing.T) {
	if err := CheckResponse(&http.Response{StatusCode: 200}); err != nil {
		t.Errorf("200: %v, want nil", err)
	}
	if err := CheckResponse(&http.Response{StatusCode: 304}); err != nil {
		t.Errorf("304: %v, want nil", err)
	}
	err := CheckResponse(&http.Response{StatusCode: 503, Header: http.Header{}})
	var he *HTTPError
	if !errors.As(err, &he) || he.StatusCode != 503 || err.Error() != "HTTP 503 Service Unavailable" {
		t.Errorf("503: %v, want an *HTTPError saying HTTP 503 Service Unavailable", err)
	}
}

func TestOneLine(t *testing.T) {
	for in, want := range map[string]string{
		"HTTP 503\nService Unavailable": "HTTP 503 Service Unavailable",
		"bad\xffutf8":                   "bad?utf8",
		strings.Repeat("a", 255) + "é":  strings.Repeat("a", 255),
	} {
		if got := oneLine(in, 256); got != want {
			t.Errorf("oneLine(%q) = %q, want %q", in, got, want)
		}
	}
}
