package store

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/breakerd/breakerd/internal/ceiling"
)

// LiveKey is the sorted set of live breakers the --max-breakers ceiling
// counts (internal/ceiling): member a breaker's name, score when its state
// is expected to expire (ms since the epoch). It is one key, in a Cluster
// slot of its own, so it is kept next to the breakers' state, not
// atomically with it.
const LiveKey = Prefix + "live"

// CeilingError is the error a call gets past the ceiling on live
// breakers (ceiling.Error).
type CeilingError = ceiling.Error

// newCeiling builds the live-breaker ceiling of s (Options.MaxBreakers):
// the store runs its admission's round trip (reserve).
func newCeiling(s *Store) *ceiling.Ceiling {
	key := s.o.LiveKey
	if key == "" {
		key = LiveKey
	}
	return ceiling.New(ceiling.Options{Max: s.o.MaxBreakers, Key: key, Client: s.rdb, Reserve: s.reserve,
		Now: s.Now, EventRetention: s.o.EventRetention, Within: s.WithinDecision})
}

// reserve is the ceiling's admission round trip (ceiling.Reserve): EXISTS
// on breaker's state and reserve.lua on the live set, pipelined, within
// the call's decision bound. A reply of the wrong shape admits, as a
// Redis error does.
func (s *Store) reserve(ctx context.Context, key, breaker string, now, max, until int64) (held, admitted bool, live int64, err error) {
	ctx, cancel := s.WithinDecision(ctx)
	defer cancel()
	var exists *redis.IntCmd
	var reserve *redis.Cmd
	err = pipelined(ctx, s.rdb, func(p redis.Pipeliner, eval evalFunc) {
		exists = p.Exists(ctx, KeysOf(breaker).State)
		reserve = eval(reserveScript, []string{key}, now, max, breaker, until)
	})
	if err != nil {
		return false, false, 0, err
	}
	if exists.Val() > 0 {
		return true, true, 0, nil
	}
	res, err := reserve.Int64Slice()
	if err != nil || len(res) != 2 {
		return false, true, 0, nil
	}
	return false, res[0] != 0, res[1], nil
}

func (s *Store) nowMs() int64 {
	if s.o.Now != nil {
		return s.o.Now().UnixMilli()
	}
	return time.Now().UnixMilli()
}

// LiveBreakers returns how many breakers the ceiling counts as live now
// (expired entries pruned first). Without a ceiling it is 0.
func (s *Store) LiveBreakers(ctx context.Context) (int64, error) { return s.ceil.Live(ctx) }
