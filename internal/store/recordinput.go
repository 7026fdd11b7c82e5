package store

import (
	"fmt"
	"strings"
	"time"

	"github.com/breakerd/breakerd/internal/breaker"
	"github.com/breakerd/breakerd/internal/classify"
	"github.com/breakerd/breakerd/internal/limits"
	"github.com/breakerd/breakerd/internal/policy"
	"github.com/breakerd/breakerd/internal/quorum"
	"github.com/breakerd/breakerd/internal/replylost"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Resolver resolves a breaker's policy and group (*policy.Set does).
// Implementations must be safe for concurrent use.
type Resolver interface {
	For(breaker string) policy.Policy
	GroupOf(breaker string) (policy.Group, bool)
}

// MaxMessageBytes bounds the failure text a Record keeps
// (RecordRequest.message, made one line).
const MaxMessageBytes = 256

// MaxRecordIDBytes bounds a Record's id (RecordRequest.record_id).
const MaxRecordIDBytes = 64

// RecordInput is one Record as the daemon applies it: built once from the
// request (NewRecordInput) and passed down whole, to the breaker's script
// and, for a child, to its parent's (ForParent). Nothing on the way
// resolves the policy again or reads the request.
type RecordInput struct {
	// Breaker and Worker name the breaker recorded on and the worker.
	Breaker, Worker string
	// Policy is the breaker's policy and Group its group (nil: none),
	// resolved once, from one policy set.
	Policy policy.Policy
	Group  *policy.Group
	// Outcome is what the record is taken as: the request's outcome, or
	// the one its evidence was classified as. RetryAfterMs and DeadlineMs
	// are the request's, or a classified rate limit's.
	Outcome                  pb.Outcome
	RetryAfterMs, DeadlineMs int64
	// Why says why the record is taken as Outcome (RecordResponse.why).
	Why string
	// Message is the worker's failure text, made one line
	// (MaxMessageBytes).
	Message string
	// Ticket is the request's ticket, as sent (nil when none).
	Ticket *pb.Ticket
	// Call is the state machine's call: Outcome weighed under Policy
	// (quorum.EvidenceOf), in the daemon's own words.
	Call breaker.Call
	// ID is the worker's id for this Record (RecordRequest.record_id),
	// empty when it sent none: record.lua applies a Record once per id.
	ID string

	latencyMs        int64
	httpStatus       int32
	credentialWorked bool
	traceID          string
	// policies is the set Policy came from: a parent's half resolves
	// the parent's policy from it, so one Record never mixes two sets.
	policies Resolver
}

// NewRecordInput builds req's RecordInput under policies: the breaker's
// policy resolved once; the outcome the request sent, or, when it sent
// none, the one its evidence is classified as (classify.OutcomeOf, under
// the policy's bare_rate_limit_wait and count_unrecognised, dates taken
// relative to now). It reads req and never writes it. A bad field is a
// *limits.FieldError naming it.
func NewRecordInput(req *pb.RecordRequest, policies Resolver, now time.Time) (RecordInput, error) {
	p := policies.For(req.GetBreaker())
	in := RecordInput{Breaker: req.GetBreaker(), Worker: req.GetWorkerId(), Policy: p,
		Outcome: req.GetOutcome(), RetryAfterMs: req.GetRetryAfterMs(), DeadlineMs: req.GetDeadlineMs(),
		Why: "outcome sent by the caller", Message: limits.OneLine(req.GetMessage(), MaxMessageBytes),
		Ticket: req.GetTicket(), latencyMs: req.GetLatencyMs(), httpStatus: req.GetEvidence().GetHttpStatus(),
		credentialWorked: req.GetCredentialWorked(), traceID: req.GetTraceId(), ID: req.GetRecordId(), policies: policies}
	if g, ok := policies.GroupOf(in.Breaker); ok {
		in.Group = &g
	}
	if err := in.outcomeOf(req.GetEvidence(), now); err != nil {
		return RecordInput{}, err
	}
	if err := in.checkFields(); err != nil {
		return RecordInput{}, err
	}
	return in, in.weigh()
}

// outcomeOf validates the evidence and, when the request sent no
// outcome, classifies it.
func (in *RecordInput) outcomeOf(ev *pb.CallEvidence, now time.Time) error {
	if err := classify.Validate("evidence", ev); err != nil {
		return err
	}
	if in.Outcome != pb.Outcome_OUTCOME_UNSPECIFIED || ev == nil {
		return nil
	}
	if d := in.DeadlineMs; d < 0 || d > limits.MaxDurationMs {
		return fieldErr("deadline_ms", "must be between 0 and %d (7 days), got %d", limits.MaxDurationMs, d)
	}
	c := classify.OutcomeOf(classify.Input{Evidence: ev, Deadline: time.Duration(in.DeadlineMs) * time.Millisecond,
		BareWait: in.Policy.BareWait(), Now: now, CountUnrecognised: in.Policy.CountUnrecognised})
	in.Outcome, in.Why = c.Outcome, c.Why
	if c.Outcome == pb.Outcome_OUTCOME_RATE_LIMITED {
		in.RetryAfterMs, in.DeadlineMs = c.RetryAfterMs(), limits.ClampMs(c.Deadline.Milliseconds())
	}
	return nil
}

// checkFields checks the outcome and the durations the record carries.
func (in *RecordInput) checkFields() error {
	if in.Outcome == pb.Outcome_OUTCOME_UNSPECIFIED {
		return fieldErr("outcome", "is required: set an outcome, or send evidence for breakerd to classify")
	}
	if _, ok := pb.Outcome_name[int32(in.Outcome)]; !ok {
		return fieldErr("outcome", "must be one of the defined outcomes, got %v", in.Outcome)
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"retry_after_ms", in.RetryAfterMs}, {"deadline_ms", in.DeadlineMs}, {"latency_ms", in.latencyMs}} {
		if f.v < 0 || f.v > limits.MaxDurationMs {
			return fieldErr(f.name, "must be between 0 and %d (7 days), got %d", limits.MaxDurationMs, f.v)
		}
	}
	if id := in.ID; len(id) > MaxRecordIDBytes || !limits.Printable(id) {
		return fieldErr("record_id", "must be printable and at most %d bytes, got %d bytes", MaxRecordIDBytes, len(id))
	}
	if t := in.traceID; t != "" && !ValidTraceID(t) {
		return fieldErr("trace_id", "must be a W3C trace id: 32 lowercase hex digits, not all zero, got %q", limits.OneLine(t, 64))
	}
	return nil
}

// WithTrace is in carrying the trace id t (ValidTraceID) when its request
// named none: the caller's trace context, read by the daemon. An open
// event this Record causes carries it (breaker.Call.Trace).
func (in RecordInput) WithTrace(t string) RecordInput {
	if in.traceID == "" && ValidTraceID(t) {
		in.traceID, in.Call.Trace = t, t
	}
	return in
}

// ValidTraceID reports whether t is a W3C trace id: 32 lowercase hex
// digits, not all zero.
func ValidTraceID(t string) bool {
	if len(t) != 32 || strings.Trim(t, "0") == "" {
		return false
	}
	for _, r := range t {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return true
}

func fieldErr(field, format string, args ...any) error {
	return &limits.FieldError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// ForParent is in as the breaker parent records it (the parent's half of
// a child's Record: internal/scope): the same outcome from the same
// worker, under the parent's policy (resolved from the set in's came
// from), fenced by ticket.
func (in RecordInput) ForParent(parent string, ticket *pb.Ticket) (RecordInput, error) {
	out := in
	out.Breaker, out.Ticket, out.Policy, out.Group = parent, ticket, in.policies.For(parent), nil
	if g, ok := in.policies.GroupOf(parent); ok {
		out.Group = &g
	}
	return out, out.weigh()
}

// weigh sets in.Call: the outcome weighed under the policy, described in
// plain words, and its Retry-After capped at the policy's cooldown cap,
// so that no single vendor answer (or a buggy worker) can keep a breaker
// open for longer than its cap.
func (in *RecordInput) weigh() error {
	p := in.Policy
	retryAfter := time.Duration(in.RetryAfterMs) * time.Millisecond
	deadline := time.Duration(in.DeadlineMs) * time.Millisecond
	ev, err := quorum.EvidenceOf(in.Outcome, retryAfter, deadline, p.CountUnrecognised)
	if err != nil {
		return err
	}
	latency := time.Duration(in.latencyMs) * time.Millisecond
	last := breaker.Describe(in.Outcome, latency, retryAfter, deadline, in.httpStatus, in.Message)
	switch {
	case in.Outcome == pb.Outcome_OUTCOME_UNRECOGNISED:
		last = classify.Unrecognised
		if in.Message != "" {
			last += breaker.MessageSep + in.Message
		}
	case ev == quorum.Healthy && p.SlowCall > 0 && latency > p.SlowCall:
		// What a slow probe's failure reads as (a slow success on a
		// half-open breaker is a failed probe).
		last = "slow success: took " + breaker.Human(latency) + ", limit " + breaker.Human(p.SlowCall)
	}
	t := in.Ticket
	in.Call = breaker.Call{
		Op:               breaker.OpRecord,
		Actor:            in.Worker,
		Evidence:         ev,
		Ticket:           breaker.Ticket{Gen: t.GetGeneration(), Lease: t.GetLeaseToken(), Shadow: t.GetShadowDenied()},
		RetryAfter:       min(retryAfter, p.CooldownCap).Milliseconds(),
		Last:             last,
		Latency:          in.latencyMs,
		CredentialWorked: in.credentialWorked,
		Trace:            in.traceID,
	}
	return nil
}

// scriptID is the id record.lua remembers in's Record by: the worker's
// id for it, behind the worker's name (no worker id holds a space, so no
// worker's ids can match another's), or, when it sent none, one of the
// daemon's own (replylost.NewRecordID), which only the daemon's resend
// repeats.
func (in RecordInput) scriptID() string {
	if in.ID == "" {
		return replylost.NewRecordID()
	}
	return in.Worker + " " + in.ID
}
