package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// TestClassify walks every row of DefaultClassifier's table, and the
// vendor answers docs/go-client.md's classification names, with the exact
// Result. now is the classifier's clock; the call's deadline, where one
// is set, is 30s or 5s after it (on the real clock too: ctx.Err() must
// stay nil for those), or passed.
func TestClassify(t *testing.T) {
	t.Parallel()
	now := time.Now().Truncate(time.Second)
	httpDate := func(d time.Duration) string { return now.Add(d).Format(http.TimeFormat) }
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	deadline30s, cancel2 := context.WithDeadline(context.Background(), now.Add(30*time.Second))
	defer cancel2()
	deadline5s, cancel3 := context.WithDeadline(context.Background(), now.Add(5*time.Second))
	defer cancel3()
	deadline30d, cancel5 := context.WithDeadline(context.Background(), now.Add(30*24*time.Hour))
	defer cancel5()
	expired, cancel4 := context.WithDeadline(context.Background(), now.Add(-time.Second))
	defer cancel4()
	bg := context.Background()
	// resp is a failed response as a vendor sends it, through CheckResponse.
	resp := func(code int, body string, kv ...string) error {
		h := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Add(kv[i], kv[i+1])
		}
		return CheckResponse(&http.Response{StatusCode: code, Header: h, Body: io.NopCloser(strings.NewReader(body))})
	}
	exhausted := func(delay time.Duration) error {
		st, err := status.New(codes.ResourceExhausted, "quota").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)})
		if err != nil {
			t.Fatal(err)
		}
		return st.Err()
	}
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
		quota     = pb.Outcome_OUTCOME_QUOTA_EXHAUSTED
		unrecog   = pb.Outcome_OUTCOME_UNRECOGNISED
		skip      = pb.Outcome_OUTCOME_UNSPECIFIED // not recorded
	)
	cases := []struct {
		name       string
		ctx        context.Context
		err        error
		want       pb.Outcome
		retryAfter time.Duration
		deadline   time.Duration
		counts     bool   // for RATE_LIMITED: RetryAfter > Deadline
		msg        string // the Result's Message, when set
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
		{name: "canceled, but not by the caller", err: context.Canceled, want: unrecog, msg: "unrecognised error (*errors.errorString)"},
		{name: "anything else", err: errors.New("boom"), want: unrecog},
		{name: "a tool's own bug", err: fmt.Errorf("lookup: %w", strconv.ErrSyntax), want: unrecog, msg: "unrecognised error (*fmt.wrapError)"},
		// The caller's cancellation, however the tool reports it.
		{name: "caller canceled, tool said %v of ctx.Err()", ctx: canceled, err: fmt.Errorf("search: %v", context.Canceled), want: skip},
		{name: "caller canceled, tool said its own words", ctx: canceled, err: errors.New("driver: query canceled"), want: skip},
		{name: "caller canceled, tool returned a 503", ctx: canceled, err: resp(503, ""), want: skip},
		{name: "caller canceled, gRPC Unavailable", ctx: canceled, err: status.Error(codes.Unavailable, "x"), want: skip},
		{name: "deadline passed, tool said %v of ctx.Err()", ctx: expired, err: fmt.Errorf("search: %v", context.DeadlineExceeded), want: timeout},
		{name: "deadline passed, tool said its own words", ctx: expired, err: errors.New("driver: query canceled"), want: timeout},
		{name: "deadline passed, gRPC Canceled", ctx: expired, err: status.Error(codes.Canceled, "x"), want: timeout},
		{name: "deadline passed, the vendor still answered 503", ctx: expired, err: resp(503, ""), want: server},
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
		{name: "HTTP 429 without any wait: 60s assumed", ctx: deadline30s, err: he(429, ""), want: limited,
			retryAfter: time.Minute, deadline: 30 * time.Second, counts: true},
		{name: "HTTP 429 without any wait, 5s left", ctx: deadline5s, err: resp(429, ""), want: limited,
			retryAfter: time.Minute, deadline: 5 * time.Second, counts: true},
		{name: "HTTP 429 without any wait, no deadline", err: resp(429, ""), want: limited,
			retryAfter: time.Minute, deadline: time.Minute},
		{name: "HTTP 429 with an unparsable Retry-After is bare", ctx: deadline5s, err: he(429, "soon"), want: limited,
			retryAfter: time.Minute, deadline: 5 * time.Second, counts: true},
		// Every way a vendor says "wait".
		{name: "Retry-After beyond int64", ctx: deadline5s, err: he(429, "99999999999999999999"), want: limited,
			retryAfter: maxWait, deadline: 5 * time.Second, counts: true},
		{name: "Retry-After at int64's top", ctx: deadline5s, err: he(429, "9223372036854775807"), want: limited,
			retryAfter: maxWait, deadline: 5 * time.Second, counts: true},
		{name: "Retry-After beyond breakerd's 7 days (clamped when sent)", ctx: deadline5s, err: he(429, "1000000"), want: limited,
			retryAfter: 1000000 * time.Second, deadline: 5 * time.Second, counts: true},
		{name: "HTTP 429, deadline 30 days away (clamped when sent)", ctx: deadline30d, err: he(429, "10"), want: limited,
			retryAfter: 10 * time.Second, deadline: 30 * 24 * time.Hour},
		{name: "gRPC RESOURCE_EXHAUSTED with RetryInfo 1h", ctx: deadline5s, err: exhausted(time.Hour), want: limited,
			retryAfter: time.Hour, deadline: 5 * time.Second, counts: true, msg: "gRPC ResourceExhausted"},
		{name: "gRPC RESOURCE_EXHAUSTED with RetryInfo 2s", ctx: deadline5s, err: exhausted(2 * time.Second), want: limited,
			retryAfter: 2 * time.Second, deadline: 5 * time.Second},
		{name: "gRPC RESOURCE_EXHAUSTED bare, 5s left", ctx: deadline5s, err: status.Error(codes.ResourceExhausted, "x"), want: limited,
			retryAfter: time.Minute, deadline: 5 * time.Second, counts: true},
		{name: "retry-after-ms", ctx: deadline5s, err: resp(429, "", "retry-after-ms", "7500"), want: limited,
			retryAfter: 7500 * time.Millisecond, deadline: 5 * time.Second, counts: true},
		{name: "retry-after-ms fractional", ctx: deadline5s, err: resp(429, "", "retry-after-ms", "1.5"), want: limited,
			retryAfter: 1500 * time.Microsecond, deadline: 5 * time.Second},
		{name: "x-ratelimit-reset-requests Go duration", ctx: deadline5s, err: resp(429, "", "x-ratelimit-reset-requests", "6m0s"), want: limited,
			retryAfter: 6 * time.Minute, deadline: 5 * time.Second, counts: true},
		{name: "x-ratelimit-reset-tokens longer than -requests", ctx: deadline5s,
			err: resp(429, "", "x-ratelimit-reset-requests", "20ms", "x-ratelimit-reset-tokens", "1m30.5s"), want: limited,
			retryAfter: 90*time.Second + 500*time.Millisecond, deadline: 5 * time.Second, counts: true},
		{name: "anthropic-ratelimit-requests-reset RFC 3339", ctx: deadline5s,
			err: resp(429, "", "anthropic-ratelimit-requests-reset", now.Add(2*time.Minute).Format(time.RFC3339)), want: limited,
			retryAfter: 2 * time.Minute, deadline: 5 * time.Second, counts: true},
		{name: "anthropic-ratelimit-tokens-reset in the past", ctx: deadline5s,
			err: resp(429, "", "anthropic-ratelimit-tokens-reset", now.Add(-time.Minute).Format(time.RFC3339)), want: limited,
			deadline: 5 * time.Second},
		{name: "IETF RateLimit-Reset", ctx: deadline5s, err: resp(429, "", "RateLimit-Reset", "45"), want: limited,
			retryAfter: 45 * time.Second, deadline: 5 * time.Second, counts: true},
		{name: "the longest wait present wins", ctx: deadline30s,
			err: resp(429, "", "Retry-After", "10", "retry-after-ms", "90000", "RateLimit-Reset", "20", "x-ratelimit-reset-requests", "bogus"), want: limited,
			retryAfter: 90 * time.Second, deadline: 30 * time.Second, counts: true},
		{name: "only unparsable waits: bare", ctx: deadline30s, err: resp(429, "", "retry-after-ms", "-5", "RateLimit-Reset", "1h"), want: limited,
			retryAfter: time.Minute, deadline: 30 * time.Second, counts: true},
		// Every way a vendor says "not until someone pays".
		{name: "HTTP 402", err: resp(402, `{"error":"payment required"}`), want: quota, msg: "HTTP 402 Payment Required"},
		{name: "HTTP 429 insufficient_quota (OpenAI)", ctx: deadline30s,
			err:  resp(429, `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`, "Retry-After", "20"),
			want: quota, msg: "HTTP 429 Too Many Requests: insufficient_quota"},
		{name: "HTTP 429 rate_limit_exceeded is a rate limit", ctx: deadline30s,
			err: resp(429, `{"error":{"type":"requests","code":"rate_limit_exceeded"}}`, "Retry-After", "20"), want: limited,
			retryAfter: 20 * time.Second, deadline: 30 * time.Second},
		{name: "HTTP 429, no deadline: the caller can wait", err: he(429, "3600"), want: limited,
			retryAfter: time.Hour, deadline: time.Hour},
		{name: "HTTP 429 wrapped by the tool", ctx: deadline30s, err: fmt.Errorf("refund: %w", he(429, "60")), want: limited,
			retryAfter: time.Minute, deadline: 30 * time.Second, counts: true},
		// gRPC status codes.
		{name: "gRPC Unavailable", err: status.Error(codes.Unavailable, "x"), want: transport},
		{name: "gRPC DeadlineExceeded", err: status.Error(codes.DeadlineExceeded, "x"), want: timeout},
		{name: "gRPC ResourceExhausted, no deadline", err: status.Error(codes.ResourceExhausted, "x"), want: limited,
			retryAfter: time.Minute, deadline: time.Minute},
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
			if tc.msg != "" && r.Message != tc.msg {
				t.Errorf("Message %q, want %q", r.Message, tc.msg)
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
	t.Parallel()
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
		{"99999999999999999999", maxWait, true},                    // beyond int64: the largest wait
		{"9223372036854775807", maxWait, true},
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
	t.Parallel()
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

// CheckResponse keeps the wait headers and the body's error code, and the
// caller still reads the whole body.
func TestCheckResponseKeepsWaitHeadersAndBodyCode(t *testing.T) {
	t.Parallel()
	body := `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}` + strings.Repeat(" ", 2*MaxBodySnippet)
	res := &http.Response{StatusCode: 429, Header: http.Header{
		"Retry-After-Ms": {"1500"}, "Set-Cookie": {"session=secret"}, "X-Ratelimit-Reset-Tokens": {"6m0s"},
	}, Body: io.NopCloser(strings.NewReader(body))}
	var he *HTTPError
	if err := CheckResponse(res); !errors.As(err, &he) {
		t.Fatalf("CheckResponse(429) = %v, want an *HTTPError", err)
	}
	if he.Code != "insufficient_quota" || len(he.Body) != MaxBodySnippet {
		t.Errorf("Code %q, %d body bytes; want insufficient_quota, %d", he.Code, len(he.Body), MaxBodySnippet)
	}
	if got := strings.Join(slices.Sorted(maps.Keys(he.Header)), ","); got != "Retry-After-Ms,X-Ratelimit-Reset-Tokens" {
		t.Errorf("kept headers %s, want only the wait headers", got)
	}
	rest, err := io.ReadAll(res.Body)
	if err != nil || string(rest) != body {
		t.Errorf("the caller read %d bytes (%v), want the whole %d-byte body", len(rest), err, len(body))
	}
	for in, want := range map[string]string{
		`{"error":{"type":"rate_limit_error","message":"x"}}`: "rate_limit_error",
		`{"code":429}`:              "429",
		`{"error":"quota"}`:         "",
		`not json`:                  "",
		`{"error":{"code":"a\nb"}}`: "a b",
	} {
		if got := bodyCode([]byte(in)); got != want {
			t.Errorf("bodyCode(%s) = %q, want %q", in, got, want)
		}
	}
}

// ClassifierOptions.BareRateLimitWait replaces the 60s a bare 429 waits.
func TestNewClassifierBareRateLimitWait(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	bare := &HTTPError{StatusCode: 429, Status: "429 Too Many Requests"}
	r, ok := NewClassifier(ClassifierOptions{BareRateLimitWait: 2 * time.Hour})(ctx, bare)
	if !ok || r.Outcome != pb.Outcome_OUTCOME_RATE_LIMITED || r.RetryAfter != 2*time.Hour || r.RetryAfter <= r.Deadline {
		t.Errorf("bare 429, 2h default wait, 1h deadline: %+v, %v; want RATE_LIMITED 2h, counted", r, ok)
	}
	r, _ = NewClassifier(ClassifierOptions{})(ctx, bare)
	if r.RetryAfter != DefaultBareRateLimitWait || r.RetryAfter > r.Deadline {
		t.Errorf("bare 429, default wait, 1h deadline: %+v; want 60s, not counted", r)
	}
}

func TestOneLine(t *testing.T) {
	t.Parallel()
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
