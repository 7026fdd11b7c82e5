package store

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/policy"
	pb "github.com/breakerd/breakerd/proto/breakerd/v1"
)

// LiveKey is the sorted set of live breakers the --max-breakers ceiling
// counts: member a breaker's name, score when its state is expected to
// expire (ms since the epoch). It is one key, in a Cluster slot of its own,
// so it is kept next to the breakers' state, not atomically with it.
const LiveKey = Prefix + "live"

// maxRemembered bounds the names a daemon remembers as registered in the
// live set; past it the memory starts afresh (names are registered again,
// once each).
const maxRemembered = 100_000

// CeilingError is the error a call gets when it would create state for a
// new breaker while the fleet holds state for the ceiling's number of
// breakers or more. The server answers it as ResourceExhausted.
type CeilingError struct {
	Breaker string
	Live    int64 // live breakers counted
	Max     int64 // the ceiling (--max-breakers)
}

func (e *CeilingError) Error() string {
	return fmt.Sprintf("breaker: %q would be a new breaker, and the fleet already holds state for %d breakers, at or past the ceiling of %d (--max-breakers); calls on breakers that hold state still work, and state expires once idle for its retention",
		e.Breaker, e.Live, e.Max)
}

// ceiling keeps the count of live breakers (Options.MaxBreakers).
//
// How it counts: before a call that could create state for a breaker this
// daemon has not registered (a Record whose outcome is not a success, a
// slow success, or any Record in window mode, which writes its window), it asks Redis in one round trip whether the breaker holds
// state (EXISTS) and, in reserve.lua on the live set's slot, prunes the
// expired members, counts the rest and, below Max, reserves the breaker's
// place (a member scored reserveFor from now) in the same atomic step; at
// or past Max it refuses. After every script run whose reply shows the
// breaker holding state, the daemon re-scores it (ZADD GT) with the time
// its keys expire at the latest (twice the policy's retention from now, or
// its window if longer, or a pin's end plus the retention; a pin without
// an end never expires; a breaker with an event log, when the log does,
// Options.EventRetention from now); it repeats that only once the score it
// set is more than a retention short of that.
//
// How exact: the count and the reservation are one script on one key, so
// daemons admitting at once, on one Redis or a Cluster, never take more
// places than Max. What makes the count differ from the breakers holding
// state: an admitted call that creates no state (an error, a stale
// ticket) holds its place until the reservation ends (reserveFor); a
// breaker whose state exists but was never registered (created while
// Redis was away, or its registration failed) is not counted until a call
// registers it; a paused breaker (its pause outlives twice the retention)
// may drop from the count before its keys expire, and a breaker whose keys
// expired early is counted until its score passes. While Redis is away
// the ceiling is not applied (the in-memory breakers are dropped when it
// answers again), and a Redis error on the admission admits the call: the
// call itself meets the same Redis.
type ceiling struct {
	max int64
	key string

	mu    sync.Mutex
	known map[string]int64 // breaker -> the score this daemon set (ms)
}

// reserveFor is how long an admitted breaker's place is held before the
// call that creates its state re-scores it: well past any call's timeout.
const reserveFor = time.Minute

func newCeiling(max int64, key string) *ceiling {
	if key == "" {
		key = LiveKey
	}
	return &ceiling{max: max, key: key, known: map[string]int64{}}
}

func (s *Store) nowMs() int64 {
	if s.o.Now != nil {
		return s.o.Now().UnixMilli()
	}
	return time.Now().UnixMilli()
}

// admitNew applies the ceiling to a call that could create state for
// breaker: nil when it may go ahead (its place reserved when it needed
// one), or a *CeilingError. A Redis error admits the call: the call itself
// meets the same Redis.
func (s *Store) admitNew(ctx context.Context, breaker string) error {
	c := s.ceil
	if c == nil {
		return nil
	}
	now := s.nowMs()
	c.mu.Lock()
	registered := c.known[breaker] > now
	c.mu.Unlock()
	if registered {
		return nil
	}
	var exists *redis.IntCmd
	var reserve *redis.Cmd
	err := pipelined(ctx, s.rdb, func(p redis.Pipeliner, eval evalFunc) {
		exists = p.Exists(ctx, KeysOf(breaker).State)
		reserve = eval(reserveScript, []string{c.key}, now, c.max, breaker, now+reserveFor.Milliseconds())
	})
	if err != nil || exists.Val() > 0 {
		return nil // a Redis error admits; a breaker holding state is never refused
	}
	res, err := reserve.Int64Slice()
	if err != nil || len(res) != 2 {
		return nil
	}
	if res[0] == 0 {
		return &CeilingError{Breaker: breaker, Live: res[1], Max: c.max}
	}
	return nil
}

// register adds breaker to the live set when st shows it holding state or
// an event log (logged: the call raised an alert whatever st shows) and
// the score this daemon last set is more than a retention short of the
// one it would set now. A breaker with an event log counts until the log
// expires (Options.EventRetention from now), so the ceiling bounds the
// event streams too: a log outlives its breaker's state. Errors are
// ignored: the count is approximate, and the next call registers it again.
func (s *Store) register(ctx context.Context, breaker string, p policy.Policy, st *pb.BreakerState, logged bool) {
	c := s.ceil
	if c == nil || st == nil {
		return
	}
	// Every event leaves a generation, a suspect or a capped trip behind,
	// except a credential or quota alert on a breaker holding nothing.
	logged = logged || st.GetGeneration() > 0 || st.GetSuspectWorker() != "" || st.GetOpenFractionCapped()
	if !logged && st.GetFailures() == 0 && st.GetDistinctWorkers() == 0 && st.GetSlowCalls() == 0 &&
		st.GetState() == pb.State_STATE_CLOSED && !st.GetWindowMode() {
		return // holds no state (a window-mode call always writes its window)
	}
	now := s.nowMs()
	ret := p.Retention().Milliseconds()
	score := now + max(2*ret, p.Window.Milliseconds())
	if logged {
		score = max(score, now+s.o.EventRetention.Milliseconds())
	}
	switch {
	case (st.GetState() == pb.State_STATE_FORCED_OPEN || st.GetState() == pb.State_STATE_FORCED_CLOSED) && st.GetForcedUntilMs() == 0:
		score = math.MaxInt64
	case st.GetForcedUntilMs() > 0:
		score = max(score, st.GetForcedUntilMs()+ret)
	}
	c.mu.Lock()
	fresh := c.known[breaker] >= score-ret
	c.mu.Unlock()
	if fresh {
		return
	}
	member := redis.Z{Score: float64(score), Member: breaker}
	if score == math.MaxInt64 {
		member.Score = math.Inf(1)
	}
	if err := s.rdb.ZAddGT(ctx, c.key, member).Err(); err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.known) >= maxRemembered {
		clear(c.known)
	}
	c.known[breaker] = score
}

// LiveBreakers returns how many breakers the ceiling counts as live now
// (expired entries pruned first). Without a ceiling it is 0.
func (s *Store) LiveBreakers(ctx context.Context) (int64, error) {
	if s.ceil == nil {
		return 0, nil
	}
	var card *redis.IntCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRemRangeByScore(ctx, s.ceil.key, "-inf", "("+strconv.FormatInt(s.nowMs(), 10))
		card = p.ZCard(ctx, s.ceil.key)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("store: live breakers: %w", err)
	}
	return card.Val(), nil
}
