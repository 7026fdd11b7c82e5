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
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"

	"github.com/breakerd/breakerd/internal/classify"
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

// maxWait is the largest wait a header can say (classify.MaxWait).
const maxWait = classify.MaxWait

// ParseRetryAfter reads a Retry-After value in either form RFC 9110 (section
// 10.2.3) allows: delta-seconds ("120") or an HTTP-date, which is taken
// relative to now (a date in the past is 0). Delta-seconds too large for
// a time.Duration, even beyond int64 ("99999999999999999999"), read
// as the largest wait (about 292 years). ok is false for an empty or
// unparsable value.
func ParseRetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	return classify.RetryAfter(v, now)
}

// waitHeaders returns the response headers ParseWait reads, in canonical
// form.
func waitHeaders() []string {
	names := classify.WaitHeaders()
	for i, n := range names {
		names[i] = http.CanonicalHeaderKey(n)
	}
	return names
}

// ParseWait reads how long a response says to wait before calling again,
// from every header that says it; the longest wait present wins. The
// headers and their forms are internal/classify's Wait (Retry-After,
// retry-after-ms, x-ratelimit-reset-*, anthropic-ratelimit-*-reset,
// RateLimit-Reset), the daemon's own rules for a Record's evidence. A
// time in the past is a wait of 0; a value too large for a time.Duration
// is the largest wait. Unparsable and negative values are skipped. ok is
// false when no header gave a wait.
func ParseWait(h http.Header, now time.Time) (d time.Duration, ok bool) {
	return classify.Wait(lowerFirst(h), now)
}

// lowerFirst is h as evidence carries headers: lower-cased names, each
// header's first value.
func lowerFirst(h http.Header) map[string]string {
	if len(h) == 0 {
		return nil
	}
	m := make(map[string]string, len(h))
	for k, v := range h {
		if len(v) > 0 {
			m[strings.ToLower(k)] = v[0]
		}
	}
	return m
}

// DefaultBareRateLimitWait is the wait NewClassifier assumes for a 429 (or
// a gRPC RESOURCE_EXHAUSTED) that says no wait at all: the policy's
// default bare_rate_limit_wait, which the daemon applies to evidence.
const DefaultBareRateLimitWait = classify.DefaultBareWait

// ClassifierOptions tunes NewClassifier. A zero field takes its default.
type ClassifierOptions struct {
	// BareRateLimitWait is the wait assumed for a 429 that carries none
	// of the headers ParseWait reads, or a gRPC RESOURCE_EXHAUSTED with no
	// google.rpc.RetryInfo, when this client classifies an error itself.
	// Returned after the caller's own retries, such a rate limit counts
	// when this exceeds what is left of the caller's deadline, like any
	// other. Set it to the breaker policy's bare_rate_limit_wait
	// (GetPolicy), which the daemon uses for a Record's evidence. Default
	// DefaultBareRateLimitWait (60s).
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

// DefaultClassifier classifies err by reading it as the evidence a Record
// carries (evidenceOf) and running internal/classify's table on it: the
// daemon's own rules, whose cases are conformance/classification.json.
// Before that, and in this order:
//
//	nil                                         SUCCESS
//	any error once the caller's ctx is canceled not recorded (ok false), however the tool words it
//	*OutcomeError                               its own outcome
//
// The Go errors map to evidence as:
//
//	*CircuitOpenError, *ProbeInFlightError      error_kind BREAKERD_DENIAL: a sub-tool's denial, never
//	                                            counted against this breaker (recorded as CANCELED)
//	*MalformedOutputError                       error_kind MALFORMED_OUTPUT
//	*HTTPError                                  http_status, its wait headers, body_error_code
//	gRPC status                                 grpc_status and its google.rpc.RetryInfo delay (error_kind
//	                                            TIMEOUT too when ctx's deadline passed)
//	*net.DNSError                               DNS
//	TLS and certificate errors                  TLS
//	context.DeadlineExceeded, net.Error timeout TIMEOUT, as is any error once ctx's deadline passed
//	connection refused                          REFUSED
//	connection reset, io.EOF, unexpected EOF    RESET
//	any other error                             OTHER: an unrecognised error, counted only when the
//	                                            breaker's policy sets count_unrecognised
//
// An error that is not the dependency's fault at all is better named by
// WithIgnore; one that carries an HTTP status is an *HTTPError
// (CheckResponse), classified by its status.
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
	var oe *OutcomeError
	switch {
	case err == nil:
		return Result{Outcome: pb.Outcome_OUTCOME_SUCCESS}, true
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
	}
	ev, msg := evidenceOf(ctx, err)
	_, hasDeadline := ctx.Deadline()
	ev.NoDeadline = !hasDeadline
	c := classify.OutcomeOf(classify.Input{Evidence: ev, Deadline: remaining(ctx, now, 0), BareWait: cl.bare, Now: now})
	return Result{Outcome: c.Outcome, RetryAfter: c.RetryAfter, Deadline: c.Deadline, Message: msg}, true
}

// evidenceOf reads err as the evidence a Record carries, and the words
// for operators (Record.message) that go with it.
func evidenceOf(ctx context.Context, err error) (*pb.CallEvidence, string) {
	var (
		open  *CircuitOpenError
		probe *ProbeInFlightError
		me    *MalformedOutputError
		he    *HTTPError
		gs    interface{ GRPCStatus() *status.Status }
		dns   *net.DNSError
		ne    net.Error
	)
	kind := func(k pb.ErrorKind, msg string) (*pb.CallEvidence, string) {
		return &pb.CallEvidence{ErrorKind: k}, msg
	}
	switch {
	case errors.As(err, &open), errors.As(err, &probe):
		return kind(pb.ErrorKind_ERROR_KIND_BREAKERD_DENIAL, "denied by breakerd inside the call")
	case errors.As(err, &me):
		return kind(pb.ErrorKind_ERROR_KIND_MALFORMED_OUTPUT, "")
	case errors.As(err, &he):
		return httpEvidence(he)
	case errors.As(err, &gs) && gs.GRPCStatus() != nil:
		return grpcEvidence(ctx, gs.GRPCStatus())
	case errors.As(err, &dns):
		return kind(pb.ErrorKind_ERROR_KIND_DNS, "DNS lookup failed")
	case isTLS(err):
		return kind(pb.ErrorKind_ERROR_KIND_TLS, "TLS or certificate error")
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout(), deadlinePassed(ctx):
		return kind(pb.ErrorKind_ERROR_KIND_TIMEOUT, "")
	case errors.Is(err, syscall.ECONNREFUSED):
		return kind(pb.ErrorKind_ERROR_KIND_REFUSED, "connection refused")
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return kind(pb.ErrorKind_ERROR_KIND_RESET, "connection reset")
	}
	return kind(pb.ErrorKind_ERROR_KIND_OTHER, fmt.Sprintf("unrecognised error (%T)", err))
}

// httpEvidence is an HTTP failure's evidence: its status, wait headers
// and body error code.
func httpEvidence(he *HTTPError) (*pb.CallEvidence, string) {
	h := lowerFirst(he.Header)
	if he.RetryAfter != "" && h["retry-after"] == "" {
		if h == nil {
			h = map[string]string{}
		}
		h["retry-after"] = he.RetryAfter
	}
	msg := "HTTP " + he.Status
	if he.StatusCode == http.StatusTooManyRequests && he.Code == insufficientQuota {
		msg += ": " + insufficientQuota
	}
	return &pb.CallEvidence{HttpStatus: int32(he.StatusCode), Headers: h, BodyErrorCode: he.Code}, msg
}

// grpcEvidence is a dependency's gRPC status as evidence: the code, its
// RetryInfo delay, and TIMEOUT when the caller's deadline passed.
func grpcEvidence(ctx context.Context, st *status.Status) (*pb.CallEvidence, string) {
	code := int32(st.Code())
	ev := &pb.CallEvidence{GrpcStatus: &code}
	if d, ok := retryDelay(st); ok {
		ms := d.Milliseconds()
		ev.GrpcRetryDelayMs = &ms
	}
	if deadlinePassed(ctx) {
		ev.ErrorKind = pb.ErrorKind_ERROR_KIND_TIMEOUT
	}
	return ev, "gRPC " + st.Code().String()
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
// account quota (the OpenAI API's), named in the operator's message.
const insufficientQuota = "insufficient_quota"

// remaining is what is left of ctx's deadline at now; with no deadline,
// waitable.
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
