package store

import (
	"errors"
	"fmt"

	"github.com/breakerd/breakerd/internal/breaker"
)

// errBadReply marks a script reply that does not have the documented shape.
var errBadReply = errors.New("store: unexpected script reply")

// reply decodes a script's array reply with checked assertions. The first
// mismatch is kept in err and every later read returns a zero value, so a
// caller reads all fields and checks errOr once. A nested reply (list)
// keeps its mismatches in its outermost reply's err, so decoding costs no
// allocation.
type reply struct {
	v      []any
	err    error
	parent *reply // the reply this one is an element of (list)
}

// root is the outermost reply, which holds the first mismatch.
func (r *reply) root() *reply {
	for r.parent != nil {
		r = r.parent
	}
	return r
}

func (r *reply) fail(format string, args ...any) {
	if root := r.root(); root.err == nil {
		root.err = fmt.Errorf("%w: "+format, append([]any{errBadReply}, args...)...)
	}
}

func (r *reply) at(i int) any {
	if i >= len(r.v) {
		r.fail("%d elements, want more than %d", len(r.v), i)
		return nil
	}
	return r.v[i]
}

func (r *reply) int(i int) int64 {
	v := r.at(i)
	n, ok := v.(int64)
	if !ok {
		r.fail("element %d is %T, want integer", i, v)
	}
	return n
}

func (r *reply) str(i int) string {
	v := r.at(i)
	s, ok := v.(string)
	if !ok {
		r.fail("element %d is %T, want string", i, v)
	}
	return s
}

// list returns element i as a nested reply: its mismatches are r's.
func (r *reply) list(i int) reply {
	v := r.at(i)
	l, ok := v.([]any)
	if !ok {
		r.fail("element %d is %T, want array", i, v)
	}
	return reply{v: l, parent: r}
}

// errOr returns the first decoding error of r (and of nested replies).
func (r *reply) errOr(nested ...*reply) error {
	if err := r.root().err; err != nil {
		return err
	}
	for _, n := range nested {
		if err := n.root().err; err != nil {
			return err
		}
	}
	return nil
}

// view decodes element i, the array lib.lua's snapshot() returns: empty
// for a breaker that holds no state (closed, generation 0, no clock read).
func (r *reply) view(i int) breaker.View {
	s := r.list(i)
	if r.errOr() == nil && len(s.v) == 0 {
		return breaker.View{State: string(breaker.Closed)}
	}
	v := breaker.View{
		State:        s.str(0),
		Gen:          s.int(1),
		Fails:        s.int(2),
		Workers:      s.int(3),
		RL:           s.int(4),
		Opened:       s.int(5),
		ProbeAt:      s.int(6),
		Cooldown:     s.int(7),
		Cause:        breaker.Cause(s.str(8)),
		Last:         s.str(9),
		InFlight:     s.int(10) == 1,
		Level:        s.int(11),
		ForceBy:      s.str(12),
		ForceReason:  s.str(13),
		ForceUntil:   s.int(14),
		Suspect:      s.str(15),
		SuspectUntil: s.int(16),
		Now:          s.int(17),
		PauseUntil:   s.int(18),
		Slow:         s.int(19),
		Shadow:       s.str(20),
	}
	v.Capped = s.int(21) == 1
	v.LeaseUntil, v.NoProbe, v.NoProbeUntil = s.int(22), s.str(23), s.int(24)
	return v
}
