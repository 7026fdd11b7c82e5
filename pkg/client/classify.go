package client

import (
	"context"
	"errors"
	"net"
	"time"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Classifier turns what a tool call returned into a Result. ok false means
// "do not record" (the caller gave up; that says nothing of the
// dependency). ctx is the call's context. Implementations must be safe for
// concurrent use.
type Classifier func(ctx context.Context, err error) (r Result, ok bool)

// OutcomeError lets a tool state its own outcome: return it (or wrap it)
// from the function Do runs.
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

// DefaultClassifier reads: nil as SUCCESS; an *OutcomeError as its own
// outcome; the caller's context.Canceled as not recorded;
// context.DeadlineExceeded and net.Error timeouts as TIMEOUT; any other
// error as TRANSPORT.
func DefaultClassifier(ctx context.Context, err error) (Result, bool) {
	var oe *OutcomeError
	var ne net.Error
	switch {
	case err == nil:
		return Result{Outcome: pb.Outcome_OUTCOME_SUCCESS}, true
	case errors.As(err, &oe):
		r := Result{Outcome: oe.Outcome, RetryAfter: oe.RetryAfter, Message: oe.Message}
		r.Deadline = r.RetryAfter // no deadline: the caller can wait it out
		if dl, ok := ctx.Deadline(); ok {
			r.Deadline = max(0, time.Until(dl))
		}
		return r, true
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return Result{}, false
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return Result{Outcome: pb.Outcome_OUTCOME_TIMEOUT}, true
	}
	return Result{Outcome: pb.Outcome_OUTCOME_TRANSPORT, Message: "transport error"}, true
}
