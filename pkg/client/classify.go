package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/limits"
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
// more). Build it with CheckResponse; DefaultClassifier reads its status,
// the headers that say how long to wait, and the body's error code.
type HTTPError struct {
	// StatusCode is the response's status (429, 503, ...).
	StatusCode int
	// Status is the status line ("503 Service Unavailable").
	Status string
	// RetryAfter is the raw Retry-After header: delta-seconds ("120") or an
	// HTTP-date ("Wed, 21 Oct 2026 07:28:00 GMT"); empty when absent.
	RetryAfter string
	// Header holds the response's headers that say how long to wait, the
	// ones ParseWait reads (Retry-After, retry-after-ms,
	// x-ratelimit-reset-*, anthropic-ratelimit-*-reset, RateLimit-Reset),
	// as sent; nil when there are none. No other header is kept.
	Header http.Header
	// Body is the start of the response body, at most MaxBodySnippet
	// bytes, kept so a classifier can read a vendor's error code. It stays
	// in this process: breakerd is never sent a body.
	Body []byte
	// Code is the error code a JSON body names: "error.code", else
	// "error.type", else a top-level "code" (OpenAI's
	// {"error":{"code":"insufficient_quota"}}, Anthropic's
	// {"error":{"type":"rate_limit_error"}}); empty when the body is not
	// such JSON. At most 64 printable bytes.
	Code string
}

func (e *HTTPError) Error() string {
	if e.Code != "" {
		return "HTTP " + e.Status + ": " + e.Code
	}
	return "HTTP " + e.Status
}

// MaxBodySnippet is the most of a failed response's body CheckResponse
// reads (4 KiB): enough for a vendor's JSON error, never a whole payload.
const MaxBodySnippet = 4 << 10

// maxCodeBytes bounds HTTPError.Code.
const maxCodeBytes = 64

// CheckResponse returns nil for a response with a status below 400 and an
// *HTTPError for any other. For a failure it reads the status line, the
// headers that say how long to wait and the first MaxBodySnippet bytes of
// the body (to find a JSON error code); resp.Body is replaced by one that
// yields those bytes and then the rest, so the caller still reads the
// whole body, and still owns and closes it.
func CheckResponse(resp *http.Response) error {
	if resp.StatusCode < 400 {
		return nil
	}
	st := resp.Status
	if st == "" {
		st = fmt.Sprintf("%d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	he := &HTTPError{StatusCode: resp.StatusCode, Status: st, RetryAfter: resp.Header.Get("Retry-After")}
	for _, name := range waitHeaders() {
		if v := resp.Header.Values(name); len(v) > 0 {
			if he.Header == nil {
				he.Header = http.Header{}
			}
			he.Header[http.CanonicalHeaderKey(name)] = append([]string(nil), v...)
		}
	}
	if resp.Body != nil {
		buf := make([]byte, MaxBodySnippet)
		n, err := io.ReadFull(resp.Body, buf)
		var rest io.Reader = resp.Body
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			rest = errReader{err} // the caller's next read sees the failure
		}
		he.Body = buf[:n:n]
		resp.Body = readCloser{io.MultiReader(bytes.NewReader(he.Body), rest), resp.Body}
		he.Code = bodyCode(he.Body)
	}
	return he
}

type readCloser struct {
	io.Reader
	io.Closer
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// bodyCode returns the error code a JSON error body names (see
// HTTPError.Code), or "".
func bodyCode(body []byte) string {
	var v struct {
		Error json.RawMessage `json:"error"`
		Code  any             `json:"code"`
	}
	if json.Unmarshal(body, &v) != nil {
		return ""
	}
	var inner struct {
		Code any    `json:"code"`
		Type string `json:"type"`
	}
	code := ""
	if json.Unmarshal(v.Error, &inner) == nil {
		code = scalar(inner.Code)
		if code == "" {
			code = inner.Type
		}
	}
	if code == "" {
		code = scalar(v.Code)
	}
	return limits.OneLine(code, maxCodeBytes)
}

// scalar renders a JSON string or number; anything else is "".
func scalar(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return ""
}

// maxWait is the largest wait a header can say: what a time.Duration
// holds in whole seconds (about 292 years). A longer value, even one
// beyond int64, reads as maxWait, so the call still counts as a wait no
// deadline covers.
const maxWait = time.Duration(math.MaxInt64/int64(time.Second)) * time.Second

// ParseRetryAfter reads a Retry-After value in either form RFC 9110
// (section 10.2.3) allows: delta-seconds ("120") or an HTTP-date, which is
// taken relative to now (a date in the past is 0). Delta-seconds too large
// for a time.Duration, even beyond int64 ("99999999999999999999"), read
// as the largest wait (about 292 years). ok is false for an empty or
// unparsable value.
func ParseRetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if digits(v) {
		return seconds(v)
	}
	t, err := http.ParseTime(v) // IMF-fixdate, and the obsolete RFC 850 and asctime forms
	if err != nil {
		return 0, false
	}
	return max(0, t.Sub(now)), true
}

// waitHeaders returns the response headers ParseWait reads, in canonical
// form (a function, not a package variable nobody may change).
func waitHeaders() []string {
	return []string{
		"Retry-After",
		"Retry-After-Ms",
		"X-Ratelimit-Reset-Requests",
		"X-Ratelimit-Reset-Tokens",
		"Anthropic-Ratelimit-Requests-Reset",
		"Anthropic-Ratelimit-Tokens-Reset",
		"Anthropic-Ratelimit-Input-Tokens-Reset",
		"Anthropic-Ratelimit-Output-Tokens-Reset",
		"Ratelimit-Reset",
	}
}

// ParseWait reads how long a response says to wait before calling again,
// from every header that says it; the longest wait present wins. It reads:
//
//	Retry-After                              delta-seconds or HTTP-date (RFC 9110 section 10.2.3)
//	retry-after-ms                           milliseconds, may be fractional (OpenAI, Azure OpenAI)
//	x-ratelimit-reset-requests, -tokens      a Go-style duration ("6m0s", "20ms") or seconds (OpenAI)
//	anthropic-ratelimit-requests-reset,
//	  -tokens-reset, -input-tokens-reset,
//	  -output-tokens-reset                   an RFC 3339 time, relative to now (Anthropic)
//	RateLimit-Reset                          delta-seconds (IETF draft-ietf-httpapi-ratelimit-headers)
//
// A time in the past is a wait of 0; a value too large for a
// time.Duration is the largest wait. Unparsable and negative values are
// skipped. ok is false when no header gave a wait.
func ParseWait(h http.Header, now time.Time) (d time.Duration, ok bool) {
	add := func(w time.Duration, good bool) {
		if good {
			d, ok = max(d, w), true
		}
	}
	for _, name := range waitHeaders() {
		v := strings.TrimSpace(h.Get(name))
		if v == "" {
			continue
		}
		switch name {
		case "Retry-After":
			add(ParseRetryAfter(v, now))
		case "Retry-After-Ms":
			add(decimal(v, time.Millisecond))
		case "X-Ratelimit-Reset-Requests", "X-Ratelimit-Reset-Tokens":
			if w, err := time.ParseDuration(v); err == nil && w >= 0 {
				add(w, true)
			} else {
				add(decimal(v, time.Second))
			}
		case "Ratelimit-Reset":
			if digits(v) {
				add(seconds(v))
			}
		default: // anthropic-ratelimit-*-reset
			if t, err := time.Parse(time.RFC3339, v); err == nil {
				add(max(0, t.Sub(now)), true)
			}
		}
	}
	return d, ok
}

// wait is the longest wait e's headers give (and its RetryAfter field,
// for an HTTPError built by hand); ok false when none does.
func (e *HTTPError) wait(now time.Time) (time.Duration, bool) {
	d, ok := ParseWait(e.Header, now)
	if w, good := ParseRetryAfter(e.RetryAfter, now); good {
		d, ok = max(d, w), true
	}
	return d, ok
}

func digits(v string) bool {
	if v == "" {
		return false
	}
	for _, r := range v {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// seconds reads delta-seconds (digits only), saturating at maxWait.
func seconds(v string) (time.Duration, bool) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n > int64(maxWait/time.Second) { // ErrRange: beyond int64
		return maxWait, true
	}
	return time.Duration(n) * time.Second, true
}

// decimal reads a non-negative decimal number ("1500", "0.5") of unit,
// saturating at maxWait.
func decimal(v string, unit time.Duration) (time.Duration, bool) {
	whole, frac, _ := strings.Cut(v, ".")
	if !digits(whole) || (frac != "" && !digits(frac)) {
		return 0, false
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	if f*float64(unit) >= float64(maxWait) {
		return maxWait, true
	}
	return time.Duration(f * float64(unit)), true
}

// DefaultBareRateLimitWait is the wait NewClassifier assumes for a 429 (or
// a gRPC RESOURCE_EXHAUSTED) that says no wait at all.
const DefaultBareRateLimitWait = 60 * time.Second

// ClassifierOptions tunes NewClassifier. A zero field takes its default.
type ClassifierOptions struct {
	// BareRateLimitWait is the wait assumed for a 429 that carries none
	// of the headers ParseWait reads, or a gRPC RESOURCE_EXHAUSTED with no
	// google.rpc.RetryInfo. Returned after the caller's own retries, such
	// a rate limit counts when this exceeds what is left of the caller's
	// deadline, like any other. Default DefaultBareRateLimitWait (60s).
	BareRateLimitWait time.Duration
}

// NewClassifier returns DefaultClassifier's table with o's settings.
func NewClassifier(o ClassifierOptions) Classifier {
	cl := classifier{bare: o.BareRateLimitWait}
	if cl.bare <= 0 {
		cl.bare = DefaultBareRateLimitWait
	}
	return func(ctx context.Context, err error) (Result, bool) { return cl.at(ctx, err, time.Now()) }
}

// DefaultClassifier classifies by the first row that matches:
//
//	nil                                         SUCCESS
//	any error once the caller's ctx is canceled not recorded (ok false), however the tool words it
//	*OutcomeError                               its own outcome
//	*MalformedOutputError                       MALFORMED_OUTPUT
//	*HTTPError 5xx                              SERVER_ERROR
//	*HTTPError 402                              QUOTA_EXHAUSTED
//	*HTTPError 429, body code insufficient_quota QUOTA_EXHAUSTED
//	*HTTPError 429                              RATE_LIMITED: the longest wait ParseWait reads (60s when
//	                                            none; ClassifierOptions) vs what is left of ctx's deadline
//	*HTTPError 401 / 403 / 404, 410 / 408       UNAUTHENTICATED / PERMISSION_DENIED / NOT_FOUND / TIMEOUT
//	*HTTPError other 4xx (400, 409, 422...)     INVALID_ARGUMENT
//	gRPC status (see grpcOutcome)               mapped the same way; RESOURCE_EXHAUSTED waits for its
//	                                            google.rpc.RetryInfo retry_delay (60s when none)
//	*net.DNSError                               TRANSPORT
//	TLS and certificate errors                  TRANSPORT
//	context.DeadlineExceeded, net.Error timeout TIMEOUT
//	any other error once ctx's deadline passed  TIMEOUT ("search: context deadline exceeded" as %v)
//	connection refused / reset, other errors    TRANSPORT
//
// The deadline a wait is compared to is what is left of ctx's deadline;
// with no deadline the caller can wait, so the 429 is not counted.
func DefaultClassifier(ctx context.Context, err error) (Result, bool) {
	return classifyAt(ctx, err, time.Now())
}

// classifier is DefaultClassifier's table with its settings.
type classifier struct {
	bare time.Duration // the wait of a rate limit that says none
}

func classifyAt(ctx context.Context, err error, now time.Time) (Result, bool) {
	return classifier{bare: DefaultBareRateLimitWait}.at(ctx, err, now)
}

func (cl classifier) at(ctx context.Context, err error, now time.Time) (Result, bool) {
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
	case callerCanceled(ctx):
		// The caller gave up: whatever the tool made of it (a wrapped
		// context.Canceled, "%v" of ctx.Err(), a driver's "query
		// canceled"), the call says nothing of the dependency.
		return Result{}, false
	case errors.As(err, &oe):
		r := Result{Outcome: oe.Outcome, Message: oe.Message}
		if oe.Outcome == pb.Outcome_OUTCOME_RATE_LIMITED {
			r.RetryAfter, r.Deadline = oe.RetryAfter, remaining(ctx, now, oe.RetryAfter)
		}
		return r, true
	case errors.As(err, &me):
		return res(pb.Outcome_OUTCOME_MALFORMED_OUTPUT, "")
	case errors.As(err, &he):
		return cl.httpOutcome(ctx, he, now), true
	case errors.As(err, &gs) && gs.GRPCStatus() != nil:
		st := gs.GRPCStatus()
		switch st.Code() {
		case codes.ResourceExhausted:
			wait, ok := retryDelay(st)
			if !ok {
				wait = cl.bare
			}
			return Result{Outcome: pb.Outcome_OUTCOME_RATE_LIMITED, RetryAfter: wait,
				Deadline: remaining(ctx, now, wait), Message: "gRPC ResourceExhausted"}, true
		case codes.Canceled:
			if deadlinePassed(ctx) {
				return res(pb.Outcome_OUTCOME_TIMEOUT, "")
			}
		}
		return res(grpcOutcome(st.Code()), "gRPC "+st.Code().String())
	case errors.As(err, &dns):
		return res(pb.Outcome_OUTCOME_TRANSPORT, "DNS lookup failed")
	case isTLS(err):
		return res(pb.Outcome_OUTCOME_TRANSPORT, "TLS or certificate error")
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout(), deadlinePassed(ctx):
		return res(pb.Outcome_OUTCOME_TIMEOUT, "")
	case errors.Is(err, syscall.ECONNREFUSED):
		return res(pb.Outcome_OUTCOME_TRANSPORT, "connection refused")
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return res(pb.Outcome_OUTCOME_TRANSPORT, "connection reset")
	}
	return res(pb.Outcome_OUTCOME_TRANSPORT, "transport error")
}

// retryDelay is the retry_delay of a google.rpc.RetryInfo detail in st.
func retryDelay(st *status.Status) (time.Duration, bool) {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			rd := ri.GetRetryDelay()
			if rd.GetSeconds() >= int64(maxWait/time.Second) {
				return maxWait, true
			}
			return max(0, rd.AsDuration()), true
		}
	}
	return 0, false
}

// insufficientQuota is the body error code of a 429 that is an exhausted
// account quota, not a rate limit (the OpenAI API's).
const insufficientQuota = "insufficient_quota"

// httpOutcome maps an HTTP failure status.
func (cl classifier) httpOutcome(ctx context.Context, he *HTTPError, now time.Time) Result {
	r := Result{Message: "HTTP " + he.Status}
	switch c := he.StatusCode; {
	case c >= 500:
		r.Outcome = pb.Outcome_OUTCOME_SERVER_ERROR
	case c == http.StatusPaymentRequired:
		r.Outcome = pb.Outcome_OUTCOME_QUOTA_EXHAUSTED
	case c == http.StatusTooManyRequests && he.Code == insufficientQuota:
		r.Outcome = pb.Outcome_OUTCOME_QUOTA_EXHAUSTED
		r.Message += ": " + insufficientQuota
	case c == http.StatusTooManyRequests:
		r.Outcome = pb.Outcome_OUTCOME_RATE_LIMITED
		wait, ok := he.wait(now)
		if !ok {
			wait = cl.bare
		}
		r.RetryAfter, r.Deadline = wait, remaining(ctx, now, wait)
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
// the caller's own cancellation (classifier.at handles that first), and
// ResourceExhausted (handled there too, with its RetryInfo) is a 429.
func grpcOutcome(c codes.Code) pb.Outcome {
	switch c {
	case codes.OK:
		return pb.Outcome_OUTCOME_SUCCESS
	case codes.Unavailable, codes.Canceled:
		return pb.Outcome_OUTCOME_TRANSPORT
	case codes.DeadlineExceeded:
		return pb.Outcome_OUTCOME_TIMEOUT
	case codes.ResourceExhausted:
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

// callerCanceled: the caller cancelled ctx (not its deadline passing).
func callerCanceled(ctx context.Context) bool { return errors.Is(ctx.Err(), context.Canceled) }

// deadlinePassed: ctx's deadline has passed.
func deadlinePassed(ctx context.Context) bool {
	return errors.Is(ctx.Err(), context.DeadlineExceeded)
}

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
