package store

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// Test hooks into the package's internals, for the external tests.

// RunRecordScript runs record.lua with raw ARGV, as Record would.
func RunRecordScript(ctx context.Context, c redis.Scripter, breaker string, args ...any) ([]any, error) {
	return run(ctx, c, recordScript, keys(breaker), args...)
}

// LibLua and RecordLua are the scripts' sources.
var LibLua, RecordLua = libLua, recordLua

// ScriptError maps err as a record.lua error.
func ScriptError(err error) error { return scriptError(recordScript, err) }

// CountQueued makes st count the calls it queues for coalescing into n
// (false without coalescing).
func CountQueued(st *Store, n *atomic.Int64) bool {
	p := st.pipe.Load()
	if p == nil {
		return false
	}
	p.queued = func() { n.Add(1) }
	return true
}

// StateOf is a view as the API shows it under a policy (the view's
// fields plus what the policy adds, such as window_mode).
var StateOf = stateOf

// Seeded reports whether st's outage memory holds a seed for name (an
// event for it reached ObserveEvent).
func Seeded(st *Store, name string) bool {
	_, ok := st.out.Heard(name)
	return ok
}

// Outstanding is the number of st's decision scripts outstanding (sent,
// neither answered nor ended).
func Outstanding(st *Store) int {
	st.dec.mu.Lock()
	defer st.dec.mu.Unlock()
	n := 0
	for d := st.dec.head; d != nil; d = d.next {
		n++
	}
	return n
}

// IsLate reports whether err is a decision still outstanding at the
// store's bound, its node not taken as down: a Redis that answered late.
func IsLate(err error) bool {
	var s stalled
	return errors.As(err, &s) && !s.down
}

// ListPiece is how many breakers a paced listing reads per round trip.
const ListPiece = listPiece

// MayPause is mayPause.
var MayPause = mayPause

// OnPieceSeeded makes st call f once each piece of a paced listing has
// seeded its outage memory.
func OnPieceSeeded(st *Store, f func([]*pb.BreakerState)) { st.pieceSeeded = f }
