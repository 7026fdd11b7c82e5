// Package classify turns what one tool call returned, as raw evidence
// (pb.CallEvidence: an HTTP status and headers, a gRPC status, a
// language-neutral error kind), into the outcome breakerd records, with
// the Retry-After it carries and why, in words. The daemon classifies a
// Record's evidence with it and the Go client classifies its errors with
// it, so there is one table; conformance/classification.json holds its
// cases. It imports only the standard library, the stubs and the
// dependency-free rule packages.
package classify

import (
	"fmt"
	"net/http"
	"time"

	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/limits"
	"github.com/breakerd/breakerd/internal/quorum"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// DefaultBareWait is the wait assumed for a rate limit that names none (a
// 429 without a wait header, a gRPC RESOURCE_EXHAUSTED without
// RetryInfo), unless the breaker's policy sets bare_rate_limit_wait.
const DefaultBareWait = 60 * time.Second

// Input is what OutcomeOf reads.
type Input struct {
	// Evidence is the call's evidence; nil reads as empty (a success).
	Evidence *pb.CallEvidence
	// Deadline is what was left of the caller's deadline
	// (RecordRequest.deadline_ms); a rate limit longer than it counts.
	Deadline time.Duration
	// BareWait is the policy's bare_rate_limit_wait; 0 means
	// DefaultBareWait.
	BareWait time.Duration
	// Now is the classifier's clock: a wait stated as a date is taken
	// relative to the evidence's date, or to Now when it has none.
	Now time.Time
	// CountUnrecognised is the policy's count_unrecognised: whether an
	// error the classifier cannot place (OUTCOME_UNRECOGNISED) counts.
	CountUnrecognised bool
}

// Result is a classification.
type Result struct {
	// Outcome is what the record is taken as.
	Outcome pb.Outcome
	// RetryAfter is the wait a rate limit states (OUTCOME_RATE_LIMITED
	// only), up to MaxWait; 0 otherwise. A record carries RetryAfterMs.
	RetryAfter time.Duration
	// Deadline is what the wait is compared to: Input.Deadline, or, when
	// the caller has no deadline, RetryAfter (so it never counts).
	Deadline time.Duration
	// Counts: the outcome is a counted failure (a rate limit only past
	// the deadline). A success is not one: it ends a failure run.
	Counts bool
	// Why says what the evidence was taken as, in words for operators
	// and callers ("HTTP 503: a server error, counted").
	Why string
}

// OutcomeOf names the outcome in's evidence records, by the first rule
// that matches:
//
//	error_kind CANCELLED           CANCELED (not counted)
//	error_kind BREAKERD_DENIAL     CANCELED: a sub-tool's denial says nothing of this dependency
//	error_kind MALFORMED_OUTPUT    MALFORMED_OUTPUT
//	http_status 400 or more        by status (httpOutcome)
//	grpc_status set, not OK        by code (grpcOutcome)
//	any other error_kind           by kind (kindOutcome); OTHER, or a kind it
//	                               cannot place, is UNRECOGNISED (counted only
//	                               with in.CountUnrecognised)
//	otherwise                      SUCCESS
func OutcomeOf(in Input) Result {
	ev := in.Evidence
	switch k := ev.GetErrorKind(); {
	case k == pb.ErrorKind_ERROR_KIND_CANCELLED:
		return fixed(pb.Outcome_OUTCOME_CANCELED, "cancelled by the caller: not counted")
	case k == pb.ErrorKind_ERROR_KIND_BREAKERD_DENIAL:
		return fixed(pb.Outcome_OUTCOME_CANCELED, "a breakerd denial inside the call: not counted against this breaker")
	case k == pb.ErrorKind_ERROR_KIND_MALFORMED_OUTPUT:
		return fixed(pb.Outcome_OUTCOME_MALFORMED_OUTPUT, "malformed output: counted")
	case ev.GetHttpStatus() >= 400:
		return httpOutcome(in)
	case ev.GrpcStatus != nil && ev.GetGrpcStatus() != 0:
		return grpcOutcome(in)
	case k != pb.ErrorKind_ERROR_KIND_UNSPECIFIED:
		return kindOutcome(k, in.CountUnrecognised)
	case ev.GetHttpStatus() > 0:
		return fixed(pb.Outcome_OUTCOME_SUCCESS, fmt.Sprintf("HTTP %d: a success", ev.GetHttpStatus()))
	case ev.GrpcStatus != nil:
		return fixed(pb.Outcome_OUTCOME_SUCCESS, "gRPC OK: a success")
	}
	return fixed(pb.Outcome_OUTCOME_SUCCESS, "no error and no failing status: a success")
}

// RetryAfterMs is RetryAfter as a record carries it: whole ms, at most
// limits.MaxDurationMs (7 days; a longer wait has the same effect, capped
// at the breaker's cooldown cap).
func (r Result) RetryAfterMs() int64 { return limits.ClampMs(r.RetryAfter.Milliseconds()) }

// fixed is a result with no wait, its Counts from the outcome (never
// OUTCOME_UNRECOGNISED: unrecognised says whether it counts).
func fixed(o pb.Outcome, why string) Result {
	ev, _ := quorum.EvidenceOf(o, 0, 0, false)
	return Result{Outcome: o, Counts: ev == quorum.Failure, Why: why}
}

// Unrecognised is how a why or a reason names OUTCOME_UNRECOGNISED.
const Unrecognised = "an unrecognised error"

// unrecognised is an error the classifier cannot place: counted only
// under a policy that sets count_unrecognised.
func unrecognised(counted bool) Result {
	if counted {
		return Result{Outcome: pb.Outcome_OUTCOME_UNRECOGNISED, Counts: true,
			Why: Unrecognised + ": counted (the policy's count_unrecognised)"}
	}
	return Result{Outcome: pb.Outcome_OUTCOME_UNRECOGNISED,
		Why: Unrecognised + ": not counted (as likely the tool's own bug; the policy's count_unrecognised counts it)"}
}

// insufficientQuota is the body error code of a 429 that is an exhausted
// account quota, not a rate limit (the OpenAI API's).
const insufficientQuota = "insufficient_quota"

// The words that end a reason by what the outcome means.
const (
	wServer   = "a server error, counted"
	wQuota    = "the account's quota is exhausted, not counted (an alert)"
	wAuth     = "the credential was rejected, not counted (an alert)"
	wDenied   = "permission denied, not counted"
	wNotFound = "not found, not counted"
	wTimeout  = "a timeout, counted"
	wWrong    = "the request was wrong, not counted"
	wTrans    = "a transport failure, counted"
)

// httpOutcome maps an HTTP failure status.
func httpOutcome(in Input) Result {
	c := int(in.Evidence.GetHttpStatus())
	at := fmt.Sprintf("HTTP %d: ", c)
	switch {
	case c >= 500:
		return fixed(pb.Outcome_OUTCOME_SERVER_ERROR, at+wServer)
	case c == http.StatusPaymentRequired:
		return fixed(pb.Outcome_OUTCOME_QUOTA_EXHAUSTED, at+wQuota)
	case c == http.StatusTooManyRequests && in.Evidence.GetBodyErrorCode() == insufficientQuota:
		return fixed(pb.Outcome_OUTCOME_QUOTA_EXHAUSTED, "HTTP 429 insufficient_quota: "+wQuota)
	case c == http.StatusTooManyRequests:
		now := evidenceNow(in)
		wait, stated := Wait(in.Evidence.GetHeaders(), now)
		return rateLimited(in, "HTTP 429", wait, stated)
	case c == http.StatusUnauthorized:
		return fixed(pb.Outcome_OUTCOME_UNAUTHENTICATED, at+wAuth)
	case c == http.StatusForbidden:
		return fixed(pb.Outcome_OUTCOME_PERMISSION_DENIED, at+wDenied)
	case c == http.StatusNotFound, c == http.StatusGone:
		return fixed(pb.Outcome_OUTCOME_NOT_FOUND, at+wNotFound)
	case c == http.StatusRequestTimeout:
		return fixed(pb.Outcome_OUTCOME_TIMEOUT, at+wTimeout)
	}
	return fixed(pb.Outcome_OUTCOME_INVALID_ARGUMENT, at+wWrong) // 400, 405, 409, 413, 422...
}

// evidenceNow is the time a stated date is relative to: the response's
// date (the date field, else a date header), else the classifier's clock.
func evidenceNow(in Input) time.Time {
	for _, d := range []string{in.Evidence.GetDate(), in.Evidence.GetHeaders()["date"]} {
		if t, err := http.ParseTime(d); err == nil {
			return t
		}
	}
	return in.Now
}

// rateLimited is a rate limit of wait (the bare wait when none was
// stated), compared to the caller's deadline.
func rateLimited(in Input, what string, wait time.Duration, stated bool) Result {
	bare := ""
	if !stated {
		wait, bare = in.BareWait, " (no wait stated: the policy's bare_rate_limit_wait)"
		if wait <= 0 {
			wait = DefaultBareWait
		}
	}
	r := Result{Outcome: pb.Outcome_OUTCOME_RATE_LIMITED, Deadline: in.Deadline, RetryAfter: wait}
	head := what + ": rate limited for " + breaker.Human(time.Duration(r.RetryAfterMs())*time.Millisecond) + bare
	switch {
	case in.Evidence.GetNoDeadline():
		r.Deadline, r.Why = r.RetryAfter, head+"; the caller has no deadline: not counted"
	case wait > in.Deadline:
		r.Counts, r.Why = true, head+", beyond the caller's deadline of "+breaker.Human(in.Deadline)+": counted"
	default:
		r.Why = head + ", within the caller's deadline of " + breaker.Human(in.Deadline) + ": not counted"
	}
	return r
}

// grpcNames are the gRPC status codes' canonical names, by code.
var grpcNames = [...]string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
	"NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
	"ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}

// MaxGRPCStatus is the largest gRPC status code (UNAUTHENTICATED).
const MaxGRPCStatus = len(grpcNames) - 1

// grpcOutcome maps a dependency's gRPC status code other than OK.
func grpcOutcome(in Input) Result {
	c := in.Evidence.GetGrpcStatus()
	at := "gRPC " + grpcNames[c] + ": "
	switch c {
	case 1: // CANCELLED, not the caller's own (that is error_kind CANCELLED)
		if in.Evidence.GetErrorKind() == pb.ErrorKind_ERROR_KIND_TIMEOUT {
			return fixed(pb.Outcome_OUTCOME_TIMEOUT, "gRPC CANCELLED after the caller's deadline: "+wTimeout)
		}
		return fixed(pb.Outcome_OUTCOME_TRANSPORT, at+wTrans)
	case 14: // UNAVAILABLE
		return fixed(pb.Outcome_OUTCOME_TRANSPORT, at+wTrans)
	case 4: // DEADLINE_EXCEEDED
		return fixed(pb.Outcome_OUTCOME_TIMEOUT, at+wTimeout)
	case 8: // RESOURCE_EXHAUSTED
		d := in.Evidence.GrpcRetryDelayMs
		wait := time.Duration(0)
		if d != nil {
			wait = msDuration(*d)
		}
		return rateLimited(in, "gRPC RESOURCE_EXHAUSTED", wait, d != nil)
	case 3, 9, 11, 6, 10, 12: // INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE, ALREADY_EXISTS, ABORTED, UNIMPLEMENTED
		return fixed(pb.Outcome_OUTCOME_INVALID_ARGUMENT, at+wWrong)
	case 5:
		return fixed(pb.Outcome_OUTCOME_NOT_FOUND, at+wNotFound)
	case 7:
		return fixed(pb.Outcome_OUTCOME_PERMISSION_DENIED, at+wDenied)
	case 16:
		return fixed(pb.Outcome_OUTCOME_UNAUTHENTICATED, at+wAuth)
	}
	return fixed(pb.Outcome_OUTCOME_SERVER_ERROR, at+wServer) // UNKNOWN, INTERNAL, DATA_LOSS
}

// msDuration is ms as a Duration, saturating at MaxWait.
func msDuration(ms int64) time.Duration {
	if ms >= int64(MaxWait/time.Millisecond) {
		return MaxWait
	}
	return max(0, time.Duration(ms)*time.Millisecond)
}

// kindOutcome maps an error kind with no failing status; countUnrecognised
// is Input.CountUnrecognised.
func kindOutcome(k pb.ErrorKind, countUnrecognised bool) Result {
	switch k {
	case pb.ErrorKind_ERROR_KIND_DNS:
		return fixed(pb.Outcome_OUTCOME_TRANSPORT, "DNS lookup failed: "+wTrans)
	case pb.ErrorKind_ERROR_KIND_TLS:
		return fixed(pb.Outcome_OUTCOME_TRANSPORT, "TLS or certificate error: "+wTrans)
	case pb.ErrorKind_ERROR_KIND_REFUSED:
		return fixed(pb.Outcome_OUTCOME_TRANSPORT, "connection refused: "+wTrans)
	case pb.ErrorKind_ERROR_KIND_RESET:
		return fixed(pb.Outcome_OUTCOME_TRANSPORT, "connection reset: "+wTrans)
	case pb.ErrorKind_ERROR_KIND_TIMEOUT:
		return fixed(pb.Outcome_OUTCOME_TIMEOUT, "timed out: counted")
	}
	return unrecognised(countUnrecognised) // ERROR_KIND_OTHER, or a kind this table does not know
}
