package store

import (
	"errors"
	"fmt"

	"github.com/breakerd/breakerd/internal/policy"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// errBadReply marks a script reply that does not have the documented shape.
var errBadReply = errors.New("store: unexpected script reply")

// reply decodes a script's array reply with checked assertions. The first
// mismatch is kept in err and every later read returns a zero value, so a
// caller reads all fields and checks errOr once.
type reply struct {
	v   []any
	err *error
}

func (r reply) fail(format string, args ...any) {
	if *r.err == nil {
		*r.err = fmt.Errorf("%w: "+format, append([]any{errBadReply}, args...)...)
	}
}

func (r *reply) at(i int) any {
	if r.err == nil {
		r.err = new(error)
	}
	if i >= len(r.v) {
		r.fail("%d elements, want more than %d", len(r.v), i)
		return nil
	}
	return r.v[i]
}

func (r *reply) int(i int) int64 {
	v := r.at(i)
	n, ok := v.(int64)
	if !ok && *r.err == nil {
		r.fail("element %d is %T, want integer", i, v)
	}
	return n
}

func (r *reply) str(i int) string {
	v := r.at(i)
	s, ok := v.(string)
	if !ok && *r.err == nil {
		r.fail("element %d is %T, want string", i, v)
	}
	return s
}

// list returns element i as a nested reply sharing r's error.
func (r *reply) list(i int) *reply {
	v := r.at(i)
	l, ok := v.([]any)
	if !ok && *r.err == nil {
		r.fail("element %d is %T, want array", i, v)
	}
	return &reply{v: l, err: r.err}
}

// errOr returns the first decoding error of r (and of nested replies).
func (r *reply) errOr(nested ...*reply) error {
	if r.err != nil && *r.err != nil {
		return *r.err
	}
	for _, n := range nested {
		if n.err != nil && *n.err != nil {
			return *n.err
		}
	}
	return nil
}

// stateNames maps the scripts' state names to the API's.
var stateNames = map[string]pb.State{
	"closed":        pb.State_STATE_CLOSED,
	"open":          pb.State_STATE_OPEN,
	"half_open":     pb.State_STATE_HALF_OPEN,
	"forced_open":   pb.State_STATE_FORCED_OPEN,
	"forced_closed": pb.State_STATE_FORCED_CLOSED,
	"paused":        pb.State_STATE_PAUSED,
}

// snapshot decodes element i, the array lib.lua's snapshot() returns.
func (r *reply) snapshot(i int, breaker string, p policy.Policy) *pb.BreakerState {
	s := r.list(i)
	// A state this build does not know (written by a newer daemon during a
	// rolling upgrade) reads as STATE_UNSPECIFIED rather than failing the
	// read: List must not break on one breaker.
	st := stateNames[s.str(0)]
	return &pb.BreakerState{
		Breaker:         breaker,
		State:           st,
		Generation:      s.int(1),
		Failures:        s.int(2),
		DistinctWorkers: s.int(3),
		OpenedAtMs:      s.int(4),
		NextProbeAtMs:   s.int(5),
		CooldownMs:      s.int(6),
		Reason:          s.str(7),
		LastFailure:     s.str(8),
		ProbeInFlight:   s.int(9) == 1,
		FailedProbes:    s.int(10),
		ForcedBy:        s.str(11),
		ForcedUntilMs:   s.int(12),
		AsOfMs:          s.int(13),
		SuspectWorker:   s.str(14),
		SuspectUntilMs:  s.int(15),
		Alternatives:    p.Alternatives,
	}
}
