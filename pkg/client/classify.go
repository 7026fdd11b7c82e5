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
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Classifier turns what a tool call returned into a Result. ok false means
// "do not record" (the caller gave up; that says nothing of the
// dependency). ctx is the call's context: its deadline is what a 429's
// Retry-After is compared to. Implementations must be safe for concurrent
// use.
//
// To teach the client your own error types, wrap DefaultClassifier:
//
//	func classify(ctx context.Context, err error) (client.Result, bool) {
//		var q *QuotaError
//		if errors.As(err, &q) {
//			return client.Result{Outcome: pb.Outcome_OUTCOME_RATE_LIMITED, RetryAfter: q.Reset}, true
//		}
//		return client.DefaultClassifier(ctx, err)
//	}
type Classifier func(ctx context.Context, err error) (r Result, ok bool)

// OutcomeError lets a tool state its own outcome: return it (or wrap it)
// from the function Call runs. RetryAfter matters with
// OUTCOME_RATE_LIMITED only.
type OutcomeError struct {
	Outcome    pb.Outcome
	RetryAfter time.Duration
	Message    string
	Err        error
}

func (e *OutcomeError) Error() string {
	if e.Err != nil {
		return e.Outcome.String() + ": " + e.Err.Error()
	}
	return e.Outcome.String() + ": " + e.Message
}

func (e *OutcomeError) Unwrap() error { return e.Err }

// MalformedOutputError marks a call whose dependency answered (a 200) with
// output the tool's validator rejected. It is recorded as
// OUTCOME_MALFORMED_OUTPUT, a counted failure. CallValidated returns it.
type MalformedOutputError struct {
	// Err is the validator's error.
	Err error
}

func (e *MalformedOutputError) Error() string { return "malformed output: " + e.Err.Error() }

func (e *MalformedOutputError) Unwrap() error { return e.Err }

// HTTPError is an HTTP response a tool treats as a failure (status 400 or
// more). Build it with CheckResponse; DefaultClassifier reads its status
// and Retry-After.
type HTTPError struct {
	// StatusCode is the response's status (429, 503, ...).
	StatusCode int
	// Status is the status line ("503 Service Unavailable").
	Status string
	// RetryAfter is the raw Retry-After header: delta-seconds ("120") or an
	// HTTP-date ("Wed, 21 Oct 2026 07:28:00 GMT"); empty when absent.
	RetryAfter string
}

func (e *HTTPError) Error() string { return "HTTP " + e.Status }

// CheckResponse returns nil for a response with a status below 400 and an
// *HTTPError for any other. It reads only the status line and headers;
// the caller still owns and closes the body.
func CheckResponse(resp *http.Response) error {
	if resp.StatusCode < 400 {
		return nil
	}
	st := resp.Status
	if st == "" {
		st = fmt.Sprintf("%d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	return &HTTPError{StatusCode: resp.StatusCode, Status: st, RetryAfter: resp.Header.Get("Retry-After")}
}

// ParseRetryAfter reads a Retry-After value in either form RFC 9110
// (section 10.2.3) allows: delta-seconds ("120") or an HTTP-date, which is
// taken relative to now (a date in the past is 0). ok is false for an
// empty or unparsable value.
func ParseRetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		const maxSecs = int64(1<<63-1) / int64(time.Second)
		return time.Duration(min(n, maxSecs)) * time.Second, true
	}
	t, err := http.ParseTime(v) // IMF-fixdate, and the obsolete RFC 850 and asctime forms
	if err != nil {
		return 0, false
	}
	return max(0, t.Sub(now)), true
}

// DefaultClassifier classifies by the first row that matches:
//
//	nil                                         SUCCESS
//	*OutcomeError                               its own outcome
//	*MalformedOutputError                       MALFORMED_OUTPUT
//	*HTTPError 5xx                              SERVER_ERROR
//	*HTTPError 429                              RATE_LIMITED, Retry-After (both forms) vs ctx's deadline
//	*HTTPError 401 / 403 / 404 / 408            UNAUTHENTICATED / PERMISSION_DENIED / NOT_FOUND / TIMEOUT
//	*HTTPError other 4xx (400, 409, 422...)     INVALID_ARGUMENT
//	gRPC status (see grpcOutcome)               mapped the same way
//	context.Canceled, caller's ctx canceled     not recorded (ok false)
//	*net.DNSError                               TRANSPORT
//	TLS and certificate errors                  TRANSPORT
//	context.DeadlineExceeded, net.Error timeout TIMEOUT
//	connection refused / reset, other errors    TRANSPORT
//
// The deadline a Retry-After is compared to is what is left of ctx's
// deadline; with no deadline the caller can wait, so the 429 is not
// counted.
func DefaultClassifier(ctx context.Context, err error) (Result, bool) {
	return classifyAt(ctx, err, time.Now())
}

func classifyAt(ctx context.Context, err error, now time.Time) (Result, bool) {
	var (
		oe  *OutcomeError
		me  *MalformedOutputError
		he  *HTTPError
		gs  interface{ GRPCStatus() *status.Status }
		dns *net.DNSError
		ne  net.Error
	)
	res := func(o pb.Outcome, msg string) (Result, bool) { return Result{Outcome: o, Message: msg}, true }
	switch {
	case err == nil:
		return res(pb.Outcome_OUTCOME_SUCCESS, "")
	case errors.As(err, &oe):
		r := Result{Outcome: oe.Outcome, Message: oe.Message}
		if oe.Outcome == pb.Outcome_OUTCOME_RATE_LIMITED {
			r.RetryAfter, r.Deadline = oe.RetryAfter, remaining(ctx, now, oe.RetryAfter)
		}
		return r, true
	case errors.As(err, &me):
		return res(pb.Outcome_OUTCOME_MALFORMED_OUTPUT, "")
	case errors.As(err, &he):
		return httpOutcome(ctx, he, now), true
	case errors.As(err, &gs) && gs.GRPCStatus() != nil:
		st := gs.GRPCStatus()
		if st.Code() == codes.Canceled && callerCanceled(ctx) {
			return Result{}, false
		}
		return res(grpcOutcome(st.Code()), "gRPC "+st.Code().String())
	case errors.Is(err, context.Canceled) && callerCanceled(ctx):
		return Result{}, false
	case errors.As(err, &dns):
		return res(pb.Outcome_OUTCOME_TRANSPORT, "DNS lookup failed")
	case isTLS(err):
		return res(pb.Outcome_OUTCOME_TRANSPORT, "TLS or certificate error")
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return res(pb.Outcome_OUTCOME_TIMEOUT, "")
	case errors.Is(err, syscall.ECONNREFUSED):
		return res(pb.Outcome_OUTCOME_TRANSPORT, "connection refused")
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return res(pb.Outcome_OUTCOME_TRANSPORT, "connection reset")
	}
	return res(pb.Outcome_OUTCOME_TRANSPORT, "transport error")
}

// httpOutcome maps an HTTP failure status.
func httpOutcome(ctx context.Context, he *HTTPError, now time.Time) Result {
	r := Result{Message: "HTTP " + he.Status}
	switch c := he.StatusCode; {
	case c >= 500:
		r.Outcome = pb.Outcome_OUTCOME_SERVER_ERROR
	case c == http.StatusTooManyRequests:
		r.Outcome = pb.Outcome_OUTCOME_RATE_LIMITED
		r.RetryAfter, _ = ParseRetryAfter(he.RetryAfter, now)
		r.Deadline = remaining(ctx, now, r.RetryAfter)
	case c == http.StatusUnauthorized:
		r.Outcome = pb.Outcome_OUTCOME_UNAUTHENTICATED
	case c == http.StatusForbidden:
		r.Outcome = pb.Outcome_OUTCOME_PERMISSION_DENIED
	case c == http.StatusNotFound, c == http.StatusGone:
		r.Outcome = pb.Outcome_OUTCOME_NOT_FOUND
	case c == http.StatusRequestTimeout:
		r.Outcome = pb.Outcome_OUTCOME_TIMEOUT
	default: // 400, 405, 409, 413, 422...: the request was wrong
		r.Outcome = pb.Outcome_OUTCOME_INVALID_ARGUMENT
	}
	return r
}

// grpcOutcome maps a dependency's gRPC status code. Canceled here is not
// the caller's own cancellation (classifyAt handles that first).
func grpcOutcome(c codes.Code) pb.Outcome {
	switch c {
	case codes.OK:
		return pb.Outcome_OUTCOME_SUCCESS
	case codes.Unavailable, codes.Canceled:
		return pb.Outcome_OUTCOME_TRANSPORT
	case codes.DeadlineExceeded:
		return pb.Outcome_OUTCOME_TIMEOUT
	case codes.ResourceExhausted:
		// No Retry-After travels in a bare status: the caller could wait,
		// so it is recorded as a 429 within the deadline (not counted).
		return pb.Outcome_OUTCOME_RATE_LIMITED
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange,
		codes.AlreadyExists, codes.Aborted, codes.Unimplemented:
		return pb.Outcome_OUTCOME_INVALID_ARGUMENT
	case codes.NotFound:
		return pb.Outcome_OUTCOME_NOT_FOUND
	case codes.PermissionDenied:
		return pb.Outcome_OUTCOME_PERMISSION_DENIED
	case codes.Unauthenticated:
		return pb.Outcome_OUTCOME_UNAUTHENTICATED
	}
	return pb.Outcome_OUTCOME_SERVER_ERROR // Internal, Unknown, DataLoss
}

// remaining is what is left of ctx's deadline at now; with no deadline,
// waitable (the caller can wait out any Retry-After).
func remaining(ctx context.Context, now time.Time, waitable time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return max(0, dl.Sub(now))
	}
	return waitable
}

func callerCanceled(ctx context.Context) bool { return errors.Is(ctx.Err(), context.Canceled) }

func isTLS(err error) bool {
	var (
		rh  tls.RecordHeaderError
		al  tls.AlertError
		cv  *tls.CertificateVerificationError
		ua  x509.UnknownAuthorityError
		hn  x509.HostnameError
		ci  x509.CertificateInvalidError
		sys x509.SystemRootsError
	)
	return errors.As(err, &rh) || errors.As(err, &al) || errors.As(err, &cv) || errors.As(err, &ua) ||
		errors.As(err, &hn) || errors.As(err, &ci) || errors.As(err, &sys)
}
