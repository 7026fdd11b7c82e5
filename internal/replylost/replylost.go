// Package replylost settles a decision script's reply lost after Redis
// may have run it: the connection breaks on the way back, or the caller
// stops waiting. go-redis then sends the command again or reports an
// error, and the daemon cannot tell whether the script ran. Both decision
// scripts are safe to send twice (docs/reliability.md, "A reply lost"):
//
//   - an Allow carries the lease token the daemon proposed: sent again, it
//     finds its own token holding the lease and is answered PROBE again
//     (breaker.Result.Repeat), never denied for its own lease;
//   - a Record carries an id record.lua remembers (RecordMemory,
//     RecordsKept): sent again, it is answered as the first was and
//     applied once.
//
// The package tells an error that leaves it unknown whether the script
// ran (Indeterminate) from one that says it did not, or that only its
// caller left (CallerLeft). When no answer came back at all, an Allow
// that may have taken the lease is settled (Settler.Allow): the executor
// sends the same Allow again on the daemon's own budget and, if it holds
// the lease, releases it (a CANCELED outcome, the machine's rule for a
// probe that never ran), so that the fleet's next Allow probes at once
// instead of after the probe timeout. The package never runs a script
// itself: the store hands it the settling round trip.
package replylost

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/probe"
)

// RecordMemory is how long record.lua remembers a breaker's Record ids
// after the last one: well past any resend (go-redis's retry comes within
// one read timeout and backoff).
const RecordMemory = time.Minute

// RecordsKept bounds the Record ids one breaker remembers: when full,
// record.lua forgets them all, so no flood of Records grows the key. A
// resend is recognised unless that many other Records of the breaker came
// between it and the first.
const RecordsKept = 64

// settleTimeout bounds the settling of one lost Allow.
const settleTimeout = 5 * time.Second

// maxSettling bounds the lost Allows settled at once: past it (Redis
// away, every call failing), the leases are left to lapse by themselves.
const maxSettling = 64

// NewRecordID returns a Record's id: random, 128 bits, as lease tokens.
func NewRecordID() string { return probe.NewToken() }

// StillQueued is the error of a call whose context ended while its script
// was queued or in flight (on a shared pipeline, or past the daemon's
// decision bound): the script may still run after the call returned.
// Wait blocks until it has run or failed.
type StillQueued struct {
	Err  error
	Wait func()
}

func (e StillQueued) Error() string { return e.Err.Error() }
func (e StillQueued) Unwrap() error { return e.Err }

// Unsent is the error of a call whose context had ended before it was
// sent: Redis never saw it.
type Unsent struct{ Err error }

func (e Unsent) Error() string { return e.Err.Error() }
func (e Unsent) Unwrap() error { return e.Err }

// Indeterminate reports whether err leaves it unknown whether Redis ran
// the command: it may have been sent, and no reply came back. A Redis
// error reply, a reply that came (any error matching one of replied, such
// as the executor's malformed reply), a refused connection, a closed
// client, an exhausted pool or a context ended before the call all say
// the script did not run (or ran and answered).
func Indeterminate(err error, replied ...error) bool {
	var re redis.Error
	var oe *net.OpError
	var un Unsent
	switch {
	case err == nil, errors.As(err, &re), errors.Is(err, redis.ErrClosed),
		errors.Is(err, redis.ErrPoolTimeout), errors.As(err, &oe) && oe.Op == "dial", errors.As(err, &un):
		return false
	}
	for _, r := range replied {
		if errors.Is(err, r) {
			return false
		}
	}
	return true
}

// CallerLeft reports whether err is a decision's caller that stopped
// waiting (its context ended) while the script was out: the script still
// runs on the daemon's own bound, and its reply comes back to no one.
// Callers leave by the hundred when the daemon itself was frozen.
func CallerLeft(err error) bool {
	var q StillQueued
	return errors.As(err, &q) && (errors.Is(q.Err, context.Canceled) || errors.Is(q.Err, context.DeadlineExceeded))
}

// Settler settles lost replies, at most maxSettling Allows at once. Its
// zero value is ready; Log (nil: discarded) receives what no answer tells.
type Settler struct {
	Log      *slog.Logger
	settling atomic.Int32
}

func (s *Settler) log() *slog.Logger {
	if s.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Log
}

// Record logs a Record whose reply never came back (err, Indeterminate
// by replied): it may or may not have counted (it never counted twice).
func (s *Settler) Record(name, worker string, err error, replied ...error) {
	if CallerLeft(err) {
		return // the script runs on: nothing was lost but the caller
	}
	if Indeterminate(err, replied...) {
		s.log().Warn("a Record's reply from redis was lost: it counted once or not at all", "breaker", name, "worker", worker, "err", err)
	}
}

// Allow settles an Allow whose reply never came back (err, which the
// caller found Indeterminate), in the background: once a StillQueued
// first script has ended, settle sends it again (the same token) and
// releases the lease it holds, reporting whether there was one.
func (s *Settler) Allow(name, worker string, err error, settle func(context.Context) (released bool, err error)) {
	if s.settling.Add(1) > maxSettling {
		s.settling.Add(-1)
		s.log().Warn("an Allow's reply from redis was lost; too many to settle at once: a probe lease it took lapses after the probe timeout",
			"breaker", name, "worker", worker, "err", err)
		return
	}
	go func() {
		defer s.settling.Add(-1)
		var q StillQueued
		if errors.As(err, &q) {
			q.Wait() // the first may still run: settle after it
		}
		ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
		defer cancel()
		released, serr := settle(ctx)
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
