package store

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/probe"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// A reply can be lost after Redis ran the script: the connection breaks
// on the way back, or the caller stops waiting. go-redis then sends the
// command again (Options.MaxRetries) or reports an error, and the daemon
// cannot tell whether the script ran. Both decision scripts are safe to
// send twice (docs/reliability.md, "A reply lost"):
//
//   - an Allow carries the lease token the daemon proposed: sent again, it
//     finds its own token holding the lease and is answered PROBE again
//     (breaker.Result.Repeat), never denied for its own lease;
//   - a Record carries an id record.lua remembers (recordMemory,
//     recordsKept): sent again, it is answered as the first was and
//     applied once.
//
// When no answer came back at all, an Allow that may have taken the lease
// is settled here: the same Allow is sent again on the daemon's own
// budget and, if it holds the lease, released (a CANCELED outcome, the
// machine's rule for a probe that never ran), so that the fleet's next
// Allow probes at once instead of after the probe timeout.

// recordMemory is how long record.lua remembers a breaker's Record ids
// after the last one: well past any resend (go-redis's retry comes within
// one read timeout and backoff).
const recordMemory = time.Minute

// recordsKept bounds the Record ids one breaker remembers: when full,
// record.lua forgets them all, so no flood of Records grows the key. A
// resend is recognised unless that many other Records of the breaker came
// between it and the first.
const recordsKept = 64

// settleTimeout bounds the settling of one lost Allow.
const settleTimeout = 5 * time.Second

// maxSettling bounds the lost Allows settled at once: past it (Redis
// away, every call failing), the leases are left to lapse by themselves.
const maxSettling = 64

// newRecordID returns a Record's id: random, 128 bits, as lease tokens.
func newRecordID() string { return probe.NewToken() }

// log is Options.Log, or a logger that discards.
func (s *Store) log() *slog.Logger {
	if s.o.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.o.Log
}

// indeterminate reports whether err leaves it unknown whether Redis ran
// the command: it may have been sent, and no reply came back. A Redis
// error reply, a malformed reply, a refused connection, a closed client,
// an exhausted pool or a context ended before the call all say the script
// did not run (or ran and answered).
func indeterminate(err error) bool {
	var re redis.Error
	var oe *net.OpError
	var un unsent
	switch {
	case err == nil, errors.As(err, &re), errors.Is(err, errBadReply), errors.Is(err, redis.ErrClosed),
		errors.Is(err, redis.ErrPoolTimeout), errors.As(err, &oe) && oe.Op == "dial", errors.As(err, &un):
		return false
	}
	return true
}

// callerLeft reports whether err is a decision's caller that stopped
// waiting (its context ended) while the script was out: the script still
// runs on the daemon's own bound, and its reply comes back to no one.
// Callers leave by the hundred when the daemon itself was frozen.
func callerLeft(err error) bool {
	var q stillQueued
	return errors.As(err, &q) && (errors.Is(q.err, context.Canceled) || errors.Is(q.err, context.DeadlineExceeded))
}

// lostRecord logs a Record whose reply never came back: it may or may not
// have counted (it never counted twice: see above).
func (s *Store) lostRecord(name, worker string, err error) {
	if callerLeft(err) {
		return // the script runs on: nothing was lost but the caller
	}
	if indeterminate(err) {
		s.log().Warn("a Record's reply from redis was lost: it counted once or not at all", "breaker", name, "worker", worker, "err", err)
	}
}

// lostAllow settles an Allow whose reply never came back (err), in the
// background: its script, sent again with the same arguments (the same
// token), answers PROBE when the first took the lease, which is then
// released. keys and args are the Allow's own.
func (s *Store) lostAllow(name, worker string, keys []string, args []any, err error) {
	if !indeterminate(err) {
		return
	}
	if s.settling.Add(1) > maxSettling {
		s.settling.Add(-1)
		s.log().Warn("an Allow's reply from redis was lost; too many to settle at once: a probe lease it took lapses after the probe timeout",
			"breaker", name, "worker", worker, "err", err)
		return
	}
	go func() {
		defer s.settling.Add(-1)
		var q stillQueued
		if errors.As(err, &q) {
			q.wait() // the first may still run: settle after it
		}
		ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
		defer cancel()
		released, serr := s.settleAllow(ctx, name, worker, keys, args)
		switch {
		case serr != nil:
			s.log().Warn("an Allow's reply from redis was lost and could not be settled: a probe lease it took lapses after the probe timeout",
				"breaker", name, "worker", worker, "err", err, "settle_err", serr)
		case released:
			s.log().Warn("an Allow's reply from redis was lost after it took the probe lease: the lease is released, the next Allow probes",
				"breaker", name, "worker", worker, "err", err)
		default:
			s.log().Info("an Allow's reply from redis was lost; it held no probe lease", "breaker", name, "worker", worker, "err", err)
		}
	}()
}

// settleAllow sends the Allow (keys, args) again and, if it holds the
// probe lease (its answer is a PROBE, enforced or shadow), releases the
// lease with a CANCELED outcome on its ticket.
func (s *Store) settleAllow(ctx context.Context, name, worker string, keys []string, args []any) (released bool, err error) {
	out, err := run(ctx, s.rdb, allowScript, keys, args...)
	if err != nil {
		return false, err
	}
	r := reply{v: out}
	code, token, v, shadow := r.int(0), r.str(2), r.view(3), r.int(4)
	if err := r.errOr(); err != nil {
		return false, err
	}
	probing := pb.Decision_DECISION_PROBE
	if pb.Decision(code) != probing && pb.Decision(shadow) != probing {
		return false, nil
	}
	req := &pb.RecordRequest{Breaker: name, WorkerId: worker, Outcome: pb.Outcome_OUTCOME_CANCELED,
		Ticket: &pb.Ticket{Generation: v.Gen, LeaseToken: token}}
	in, err := NewRecordInput(req, s.policies.Load(), s.Now())
	if err != nil {
		return false, err
	}
	if _, err := s.record(ctx, in, nil); err != nil {
		return false, err
	}
	return true, nil
}

// stillQueued is the error of a call whose context ended while its script
// was queued or in flight on a shared pipeline (coalesce.go): the script
// may still run after the call returned. wait blocks until it has run or
// failed.
type stillQueued struct {
	err  error
	wait func()
}

func (e stillQueued) Error() string { return e.err.Error() }
func (e stillQueued) Unwrap() error { return e.err }

// unsent is the error of a call whose context had ended before it was
// sent: Redis never saw it.
type unsent struct{ err error }

func (e unsent) Error() string { return e.err.Error() }
func (e unsent) Unwrap() error { return e.err }
