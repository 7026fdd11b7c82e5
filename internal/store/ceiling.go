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

// ceiling keeps the approximate count of live breakers (Options.MaxBreakers).
//
// How it counts: after every script run whose reply shows the breaker
// holding state, the daemon adds the breaker to LiveKey (ZADD GT) with the
// time its keys expire at the latest (twice the policy's retention from
// now, or a pin's end plus the retention; a pin without an end never
// expires); it repeats that only once less than a retention is left of the
// score it set. Before a call that could create state for a breaker this
// daemon has not registered (a Record whose outcome is not a success), it
// asks Redis in one round trip whether the breaker holds state (EXISTS)
// and how many live breakers there are (ZREMRANGEBYSCORE of the expired,
// ZCARD), adds the creations it has admitted and not yet registered, and
// refuses past Max.
//
// How approximate: within one daemon the count is never short (admissions
// and registrations are counted under one lock; one that landed in Redis
// just before the read is counted twice, which refuses early by at most
// the daemon's concurrent creating calls). Across daemons, a creation
// admitted by another daemon and not yet registered is not seen: the fleet
// ends at most Max + (daemons - 1) x (creating calls in flight at once on
// one daemon) over. A paused breaker (its pause outlives twice the
// retention) may drop from the count before its keys expire, and a breaker
// whose keys expired early is counted until its score passes: both are
// bounded by the retention. While Redis is away the ceiling is not
// applied (the in-memory breakers are dropped when it answers again).
type ceiling struct {
	max int64
	key string

	mu       sync.Mutex
	known    map[string]int64 // breaker -> the score this daemon set (ms)
	added    int64            // new members this daemon added to key
	inflight int64            // admitted creations not yet registered
}

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
// breaker. It returns a release to call once the call is done (after
// register), or a *CeilingError. A Redis error admits the call: the call
// itself meets the same Redis.
func (s *Store) admitNew(ctx context.Context, breaker string) (release func(), err error) {
	c := s.ceil
	noop := func() {}
	if c == nil {
		return noop, nil
	}
	now := s.nowMs()
	c.mu.Lock()
	if c.known[breaker] > now {
		c.mu.Unlock()
		return noop, nil
	}
	before := c.added
	c.mu.Unlock()
	var exists, card *redis.IntCmd
	_, perr := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		exists = p.Exists(ctx, KeysOf(breaker).State)
		p.ZRemRangeByScore(ctx, c.key, "-inf", "("+strconv.FormatInt(now, 10))
		card = p.ZCard(ctx, c.key)
		return nil
	})
	if perr != nil {
		return noop, nil
	}
	if exists.Val() > 0 {
		return noop, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	live := card.Val() + (c.added - before) + c.inflight
	if live >= c.max {
		return noop, &CeilingError{Breaker: breaker, Live: live, Max: c.max}
	}
	c.inflight++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			c.inflight--
			c.mu.Unlock()
		})
	}, nil
}

// register adds breaker to the live set when st shows it holding state
// and this daemon's last registration of it has less than a retention
// left. Errors are ignored: the count is approximate, and the next call
// registers it again.
func (s *Store) register(ctx context.Context, breaker string, p policy.Policy, st *pb.BreakerState) {
	c := s.ceil
	if c == nil || st == nil {
		return
	}
	if st.GetGeneration() == 0 && st.GetFailures() == 0 && st.GetDistinctWorkers() == 0 && st.GetState() == pb.State_STATE_CLOSED {
		return // holds no state
	}
	now := s.nowMs()
	ret := p.Retention().Milliseconds()
	score := now + 2*ret
	switch {
	case (st.GetState() == pb.State_STATE_FORCED_OPEN || st.GetState() == pb.State_STATE_FORCED_CLOSED) && st.GetForcedUntilMs() == 0:
		score = math.MaxInt64
	case st.GetForcedUntilMs() > 0:
		score = max(score, st.GetForcedUntilMs()+ret)
	}
	c.mu.Lock()
	fresh := c.known[breaker]-now >= ret
	c.mu.Unlock()
	if fresh {
		return
	}
	member := redis.Z{Score: float64(score), Member: breaker}
	if score == math.MaxInt64 {
		member.Score = math.Inf(1)
	}
	n, err := s.rdb.ZAddGT(ctx, c.key, member).Result()
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.added += n
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
